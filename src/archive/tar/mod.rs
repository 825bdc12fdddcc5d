//! Tar archives as CPython 3.11.7's `tarfile` reads them: the reader torch's
//! legacy loader tries first on every file (`tarfile.open(fileobj=f, mode="r:")`,
//! then `extract("storages")`, `extract("tensors")`, `extractfile("pickle")`).
//!
//! The model is of `tarfile.open(fileobj=io.BytesIO(data), mode="r:")` and then
//! `getmembers()`: the header block (`TarInfo.frombuf`: checksums signed and
//! unsigned, `int()`'s spellings of octal, base-256 numbers, V7 directories, the
//! ustar prefix), the headers that change the member after them (GNU long
//! names and links, old GNU sparse headers and their extension blocks, PAX
//! extended, global and Solaris records, with every keyword that moves data:
//! `size`, `path`, `linkpath`, `GNU.sparse.*`), which types have data blocks
//! (regular ones and every type tarfile does not know; the others skip none,
//! whatever their size field says), and where `TarFile.next` ends the archive
//! or raises. What a member hands out is modelled both ways tarfile hands it
//! out: `extractfile(m).read()` and the file `extract(m)` writes, which differ
//! for sparse members and negative sizes. `tests/test_tar_model.py` holds the
//! model to CPython's `tarfile` itself, through `_core._tar_model`.
//!
//! Errors are told apart as torch tells them apart: a `tarfile.ReadError`
//! (torch then reads the file as its legacy stream) from any other exception
//! tarfile lets escape (torch then fails). The model reads bytes as
//! `io.BytesIO`; a real file differs only in which exception some reads far
//! past its end raise. Where CPython would go on forever (headers whose
//! negative sizes point back) or may hit its recursion limit (a chain of more
//! than 100 headers), the model stops with [`Failure::Limit`].

mod content;
mod file;
mod header;
mod number;
mod pax;
mod reader;
#[cfg(test)]
mod tests;

pub use content::Content;
pub use header::{may_open, BLOCK};

use crate::limits::Limits;

/// The exceptions other than `tarfile.ReadError` that escape tarfile on some
/// archives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PyException {
    /// `int()` of a PAX number or a sparse map, a seek before the start.
    ValueError,
    /// A short old-GNU sparse extension block.
    IndexError,
    /// A seek or read past what a C `ssize_t` holds.
    OverflowError,
    /// A PAX `hdrcharset` that is not UTF-8.
    UnicodeDecodeError,
    /// `extract` seeking its target file before the start.
    OsError,
}

impl PyException {
    pub fn name(self) -> &'static str {
        match self {
            PyException::ValueError => "ValueError",
            PyException::IndexError => "IndexError",
            PyException::OverflowError => "OverflowError",
            PyException::UnicodeDecodeError => "UnicodeDecodeError",
            PyException::OsError => "OSError",
        }
    }
}

/// Why tarfile (or the model of it) stops.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Failure {
    /// `tarfile.ReadError`, a `TarError`: what torch's legacy loader catches.
    ReadError(&'static str),
    /// Another exception: no `TarError`, so torch fails with it.
    Raises(PyException),
    /// Past what the model follows: CPython would go on (or hit its recursion
    /// limit, depending on the caller's stack), so the answer is unknown.
    Limit(&'static str),
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Failure::ReadError(why) => write!(f, "tarfile raises ReadError ({why})"),
            Failure::Raises(e) => write!(f, "tarfile raises {}", e.name()),
            Failure::Limit(why) => f.write_str(why),
        }
    }
}

/// Internal exceptions, with the header errors `TarFile.next` tells apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Raise {
    Header(header::HeaderError),
    /// `SubsequentHeaderError`: the header after a GNU or PAX header is bad.
    Subsequent,
    /// `next()`'s own `ReadError("unexpected end of data")`.
    EndOfData,
    Python(PyException),
    Limit(&'static str),
}

/// One member, as `getmembers()` lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Member {
    /// `TarInfo.name`, as bytes (tarfile decodes them as UTF-8 with
    /// `surrogateescape`, which keeps every byte).
    pub name: Vec<u8>,
    pub linkname: Vec<u8>,
    /// The type byte (after the V7 directory rule).
    pub kind: u8,
    /// `TarInfo.offset`: the first header of the member (a GNU or PAX header
    /// before it included).
    pub offset: u64,
    /// `TarInfo.offset_data`.
    pub offset_data: u64,
    /// `TarInfo.size` (see [`number::clamp`] for the numbers past any file).
    pub size: i128,
    /// A sparse file's `(offset, numbytes)` map.
    pub sparse: Option<Vec<(i128, i128)>>,
}

impl Member {
    /// Whether `extractfile` and `extract` hand out data blocks: the regular
    /// types (`0`, NUL, `7`, `S`) and every type tarfile does not know.
    pub fn has_data(&self) -> bool {
        is_regular(self.kind)
    }

    /// A hard link (`1`) or symbolic link (`2`): `extractfile` reads its target,
    /// `extract` makes a link to it (on the host, for a symbolic link).
    pub fn is_link(&self) -> bool {
        matches!(self.kind, header::LNKTYPE | header::SYMTYPE)
    }

    /// The name as text, for reports.
    pub fn display_name(&self) -> String {
        String::from_utf8_lossy(&self.name).into_owned()
    }

    /// What `extractfile(member).read()` returns (or the bytes before what it
    /// raises), up to `max_len` bytes it would have to make (a sparse file's
    /// holes).
    pub fn file_content<'d>(&self, data: &'d [u8], max_len: u64) -> Content<'d> {
        content::file_content(self, data, max_len)
    }

    /// What `extract(member)` writes to the file torch then opens.
    pub fn extracted_content<'d>(&self, data: &'d [u8], max_len: u64) -> Content<'d> {
        content::extracted_content(self, data, max_len)
    }

    /// Whether `extract` may write other bytes than `extractfile` reads: a
    /// sparse map is replayed differently, a negative size still copies.
    pub fn extract_differs(&self) -> bool {
        self.sparse.is_some() || self.size < 0
    }
}

/// What `getmembers()` gives after `tarfile.open` succeeded: the members read,
/// and what stopped the reading if it did not end where tarfile ends it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Archive {
    pub members: Vec<Member>,
    pub failure: Option<Failure>,
}

/// `tarfile.open(fileobj=io.BytesIO(data), mode="r:")`, then `getmembers()`.
/// `Err` when `open` itself fails (`Failure::ReadError`: tarfile says it is no
/// tar). Past `limits.max_zip_entries` members the reading stops with a limit.
pub fn open(data: &[u8], limits: &Limits) -> Result<Archive, Failure> {
    reader::read(data, limits.max_zip_entries)
}

/// Whether `tarfile.open(mode="r:")` succeeds on `data`: only the first member
/// is read, and most files fail the first block's checksum. `Err` says what it
/// raises, or that the model cannot tell.
pub fn tarfile_open(data: &[u8]) -> Result<(), Failure> {
    reader::open(data)
}

/// Whether `tarfile.open(mode="r:")` succeeds on `data`.
pub fn opens_as_tar(data: &[u8]) -> bool {
    tarfile_open(data).is_ok()
}

/// Whether tarfile might read `data` as a tar: it opens, or the model cannot
/// tell (a chain of headers too long to follow).
pub fn may_be_tar(data: &[u8]) -> bool {
    matches!(tarfile_open(data), Ok(()) | Err(Failure::Limit(_)))
}

/// `isreg() or type not in SUPPORTED_TYPES`.
fn is_regular(kind: u8) -> bool {
    !matches!(kind, b'1'..=b'6' | b'L' | b'K')
}
