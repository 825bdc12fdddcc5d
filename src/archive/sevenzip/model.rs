//! A 7z archive's parts as its headers describe them: packed streams, folders
//! of coders and the files their outputs hold. The header reader fills them in;
//! the coders decode the folders they describe.

/// A coder of a folder.
pub(super) struct Coder {
    pub(super) id: Vec<u8>,
    pub(super) ins: u64,
    pub(super) outs: u64,
    pub(super) props: Vec<u8>,
}

/// A folder: its coders and how their streams connect, the sizes of their
/// outputs, and the substreams (files) its main output holds.
pub(super) struct Folder {
    pub(super) coders: Vec<Coder>,
    /// Which coder output feeds which coder input: streams are numbered across
    /// the coders, in their order.
    pub(super) binds: Vec<Bind>,
    /// The coder inputs the packed streams feed, in the order of `packs`.
    pub(super) packed_inputs: Vec<u64>,
    /// The packed streams it reads, as indices into the archive's pack streams.
    pub(super) packs: std::ops::Range<usize>,
    /// The size of every coder output, in order.
    pub(super) unpack_sizes: Vec<u64>,
    /// The size of its main output (the one no bind pair consumes).
    pub(super) unpack_size: u64,
    pub(super) crc: Option<u32>,
    pub(super) substreams: Vec<Substream>,
}

/// A bind pair: coder output `output` feeds coder input `input`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Bind {
    pub(super) input: u64,
    pub(super) output: u64,
}

pub(super) struct Substream {
    pub(super) size: u64,
    pub(super) crc: Option<u32>,
}

/// A packed stream: where it lies in the file, and its CRC if listed.
pub(super) struct Pack {
    pub(super) start: usize,
    pub(super) len: usize,
    pub(super) crc: Option<u32>,
}

#[derive(Default)]
pub(super) struct Streams {
    pub(super) packs: Vec<Pack>,
    pub(super) folders: Vec<Folder>,
}

pub(super) struct File {
    pub(super) name: String,
    pub(super) has_stream: bool,
    pub(super) is_empty_file: bool,
}

pub(super) struct Archive {
    pub(super) streams: Streams,
    pub(super) files: Vec<File>,
}
