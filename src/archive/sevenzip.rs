//! A minimal, strict reader of 7z archives, for the scanner: attackers ship
//! pickles inside 7z archives (also ones named `.pt`), so a scan must read every
//! file of one.
//!
//! Written from the format's description (7zFormat.txt of the LZMA SDK). It reads
//! the signature header, the next header (plain, or encoded once with a folder of
//! its own), the main streams (pack info, folders, substreams) and the files
//! (names, empty streams, empty files, anti items; every other property is skipped
//! by its size). Every count and size read from the file is checked against the
//! bytes that could hold it before anything is allocated, and every allocation
//! (the parsed header's tables, the decoded header, each folder's output) is
//! charged against one budget, `cap`: a hostile header ends in an error, never in
//! an abort.
//!
//! Folders of one coder are decoded: Copy, LZMA, LZMA2, BZip2 and Deflate. Anything
//! else (filter chains such as BCJ or Delta, multi-input coders, AES encryption,
//! PPMd, unknown methods) is refused as unsupported, naming the methods, and the
//! declared CRCs (pack streams, folders, substreams) are checked: a file whose
//! listed data differs from what the decoder produces is malformed.

use std::io::{self, Write};
use std::panic::{catch_unwind, AssertUnwindSafe};

use crate::archive::streams::{inflate_into, Capped, StreamError};
use crate::error::{Error, Location};
use crate::limits::Limit;

/// The six bytes every 7z archive starts with.
pub const SIGNATURE: [u8; 6] = [0x37, 0x7A, 0xBC, 0xAF, 0x27, 0x1C];

/// The signature header: signature, version, start-header CRC, start header.
const SIGNATURE_HEADER_LEN: usize = 32;

/// One file of an archive and its decoded bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Member {
    pub name: String,
    pub data: Vec<u8>,
}

/// Whether `data` starts with the 7z signature.
pub fn is_7z(data: &[u8]) -> bool {
    data.starts_with(&SIGNATURE)
}

/// Every file of the 7z archive `data` with its decoded bytes, in the archive's
/// order: files with a stream, and empty files (with no bytes); directories and
/// anti items are left out. The parsed header and the decoded data take at most
/// `cap` bytes together; the members returned are copies out of one folder's
/// output at a time, so the peak is below twice `cap`. See [`for_each_member`].
pub fn members(data: &[u8], cap: u64) -> Result<Vec<Member>, Error> {
    let mut out = Vec::new();
    for_each_member(data, cap, |name, bytes| {
        out.push(Member {
            name: name.to_owned(),
            data: bytes.to_vec(),
        });
        Ok(())
    })?;
    Ok(out)
}

/// Call `visit` with the name and decoded bytes of every file of the 7z archive
/// `data`, in the archive's order (see [`members`]). Folders are decoded one at a
/// time, when their first file is reached, and their output is freed once their
/// last file has been visited. The parsed header, the decoded header and the
/// output of every folder are charged against `cap` (in total, not at once): past
/// it the error is the [`Limit::InflatedBytes`] limit. An error of `visit` ends the
/// walk and is returned.
pub fn for_each_member(
    data: &[u8],
    cap: u64,
    mut visit: impl FnMut(&str, &[u8]) -> Result<(), Error>,
) -> Result<(), Error> {
    let mut budget = Budget { left: cap, cap };
    let Some(archive) = read_archive(data, &mut budget)? else {
        return Ok(());
    };
    let Archive { streams, files } = archive;
    // Refuse what cannot be decoded before decoding anything.
    for (index, folder) in streams.folders.iter().enumerate() {
        if folder.substreams.is_empty() {
            continue;
        }
        supported(folder).map_err(|why| folder_error(why, index))?;
    }
    let mut substreams = streams
        .folders
        .iter()
        .enumerate()
        .flat_map(|(index, folder)| folder.substreams.iter().map(move |s| (index, s)));
    let mut current: Option<(usize, Vec<u8>)> = None;
    let mut offset = 0usize;
    for file in &files {
        if !file.has_stream {
            if file.is_empty_file {
                visit(&file.name, &[])?;
            }
            continue;
        }
        let Some((folder_index, sub)) = substreams.next() else {
            return Err(Error::archive(
                format!("file '{}' has no stream in the folders", file.name),
                Location::default(),
            ));
        };
        if current.as_ref().map(|(i, _)| *i) != Some(folder_index) {
            // The previous folder's output is freed before the next is decoded.
            drop(current.take());
            let folder = streams
                .folders
                .get(folder_index)
                .ok_or_else(|| Error::archive("a missing folder", Location::default()))?;
            let output = decode_folder(data, &streams.packs, folder, &mut budget)
                .map_err(|e| e.in_entry(&file.name))?;
            current = Some((folder_index, output));
            offset = 0;
        }
        let output = current.as_ref().map(|(_, o)| o.as_slice()).unwrap_or(&[]);
        let end = usize::try_from(sub.size)
            .ok()
            .and_then(|size| offset.checked_add(size));
        let bytes = end.and_then(|end| output.get(offset..end)).ok_or_else(|| {
            Error::archive(
                format!(
                    "the substreams of folder {folder_index} reach past its {} bytes",
                    output.len()
                ),
                Location::entry(&file.name),
            )
        })?;
        if let Some(expected) = sub.crc {
            let actual = crc32fast::hash(bytes);
            if actual != expected {
                return Err(Error::archive(
                    format!(
                        "CRC mismatch: the decoded data has CRC {actual:08x}, the archive lists {expected:08x}"
                    ),
                    Location::entry(&file.name),
                ));
            }
        }
        offset = end.unwrap_or(offset);
        visit(&file.name, bytes)?;
    }
    Ok(())
}

// Property IDs of 7zFormat.txt.
const K_END: u8 = 0x00;
const K_HEADER: u8 = 0x01;
const K_ARCHIVE_PROPERTIES: u8 = 0x02;
const K_ADDITIONAL_STREAMS_INFO: u8 = 0x03;
const K_MAIN_STREAMS_INFO: u8 = 0x04;
const K_FILES_INFO: u8 = 0x05;
const K_PACK_INFO: u8 = 0x06;
const K_UNPACK_INFO: u8 = 0x07;
const K_SUBSTREAMS_INFO: u8 = 0x08;
const K_SIZE: u8 = 0x09;
const K_CRC: u8 = 0x0A;
const K_FOLDER: u8 = 0x0B;
const K_CODERS_UNPACK_SIZE: u8 = 0x0C;
const K_NUM_UNPACK_STREAM: u8 = 0x0D;
const K_EMPTY_STREAM: u8 = 0x0E;
const K_EMPTY_FILE: u8 = 0x0F;
const K_ANTI: u8 = 0x10;
const K_NAME: u8 = 0x11;
const K_ENCODED_HEADER: u8 = 0x17;

/// 7-Zip's own bounds on a folder: coders, and streams of all its coders.
const MAX_CODERS: u64 = 64;
const MAX_FOLDER_STREAMS: u64 = 64;
/// The longest method id (the format allows at most 8 bytes).
const MAX_METHOD_ID: usize = 8;

/// What is left of `cap` for allocations sized by the archive.
struct Budget {
    left: u64,
    cap: u64,
}

impl Budget {
    fn take(&mut self, bytes: u64, location: impl FnOnce() -> Location) -> Result<(), Error> {
        match self.left.checked_sub(bytes) {
            Some(left) => {
                self.left = left;
                Ok(())
            }
            None => Err(Error::limit(Limit::InflatedBytes, self.cap, location())),
        }
    }

    /// An empty vector with room for `n` items, charged first.
    fn vec<T>(&mut self, n: usize, r: &Reader<'_>) -> Result<Vec<T>, Error> {
        let bytes = (n as u64).saturating_mul(std::mem::size_of::<T>() as u64);
        self.take(bytes, || r.location())?;
        Ok(Vec::with_capacity(n))
    }
}

/// A coder of a folder.
struct Coder {
    id: Vec<u8>,
    ins: u64,
    outs: u64,
    props: Vec<u8>,
}

/// A folder: its coders and how their streams connect, the sizes of their
/// outputs, and the substreams (files) its main output holds.
struct Folder {
    coders: Vec<Coder>,
    /// The packed streams it reads, as indices into the archive's pack streams.
    packs: std::ops::Range<usize>,
    /// The size of its main output (the one no bind pair consumes).
    unpack_size: u64,
    crc: Option<u32>,
    substreams: Vec<Substream>,
}

struct Substream {
    size: u64,
    crc: Option<u32>,
}

/// A packed stream: where it lies in the file, and its CRC if listed.
struct Pack {
    start: usize,
    len: usize,
    crc: Option<u32>,
}

#[derive(Default)]
struct Streams {
    packs: Vec<Pack>,
    folders: Vec<Folder>,
}

struct File {
    name: String,
    has_stream: bool,
    is_empty_file: bool,
}

struct Archive {
    streams: Streams,
    files: Vec<File>,
}

/// A cursor over header bytes; `base` is where they start in the file, or, for a
/// decoded header, in the decoded bytes (`decoded`).
struct Reader<'a> {
    data: &'a [u8],
    pos: usize,
    base: u64,
    decoded: bool,
}

impl<'a> Reader<'a> {
    fn location(&self) -> Location {
        let offset = self.base.saturating_add(self.pos as u64);
        if self.decoded {
            Location {
                entry: Some("7z encoded header".to_owned()),
                offset: Some(offset),
                opcode: None,
            }
        } else {
            Location::at(offset)
        }
    }

    fn error(&self, reason: impl Into<String>) -> Error {
        Error::archive(reason, self.location())
    }

    fn remaining(&self) -> usize {
        self.data.len().saturating_sub(self.pos)
    }

    fn bytes(&mut self, n: u64, what: &str) -> Result<&'a [u8], Error> {
        let slice = usize::try_from(n)
            .ok()
            .and_then(|n| self.pos.checked_add(n))
            .and_then(|end| self.data.get(self.pos..end));
        match slice {
            Some(slice) => {
                self.pos += slice.len();
                Ok(slice)
            }
            None => Err(self.error(format!(
                "{what} of {n} bytes reaches past the {} bytes left of the header",
                self.remaining()
            ))),
        }
    }

    fn byte(&mut self, what: &str) -> Result<u8, Error> {
        match self.data.get(self.pos) {
            Some(&b) => {
                self.pos += 1;
                Ok(b)
            }
            None => Err(self.error(format!("the header ends before {what}"))),
        }
    }

    fn u32_le(&mut self, what: &str) -> Result<u32, Error> {
        let b = self.bytes(4, what)?;
        Ok(b.try_into().map(u32::from_le_bytes).unwrap_or_default())
    }

    /// The format's variable-length UINT64: the high bits of the first byte say
    /// how many little-endian bytes follow.
    fn number(&mut self, what: &str) -> Result<u64, Error> {
        let first = self.byte(what)?;
        let mut value = 0u64;
        let mut mask = 0x80u8;
        for i in 0..8u32 {
            if first & mask == 0 {
                let high = u64::from(first & mask.wrapping_sub(1));
                return Ok(value | (high << (8 * i)));
            }
            value |= u64::from(self.byte(what)?) << (8 * i);
            mask >>= 1;
        }
        Ok(value)
    }

    /// A count of items that take at least `each` bytes apiece of what is left.
    fn count(&mut self, what: &str, each: u64) -> Result<usize, Error> {
        let at = self.location();
        let n = self.number(what)?;
        let room = self.remaining() as u64;
        match n.checked_mul(each) {
            Some(need) if need <= room => usize::try_from(n)
                .map_err(|_| Error::archive(format!("{what} {n} is too large"), at)),
            _ => Err(Error::archive(
                format!(
                    "{what} {n} cannot fit in the {room} bytes left of the header \
                     ({each} or more bytes each)"
                ),
                at,
            )),
        }
    }

    /// A number that must be below `bound` (a stream index, a stream count).
    fn index(&mut self, what: &str, bound: u64) -> Result<u64, Error> {
        let at = self.location();
        let n = self.number(what)?;
        if n < bound {
            Ok(n)
        } else {
            Err(Error::archive(
                format!("{what} {n} is out of range (below {bound} expected)"),
                at,
            ))
        }
    }

    /// Read the next property id, which must be `id`: an error naming `what` otherwise.
    fn property(&mut self, id: u8, what: &str) -> Result<(), Error> {
        let at = self.location();
        let got = self.byte(what)?;
        if got == id {
            Ok(())
        } else {
            Err(Error::archive(
                format!("expected {what} (property 0x{id:02x}), found property 0x{got:02x}"),
                at,
            ))
        }
    }

    /// The next `len` bytes as a reader of their own.
    fn sub(&mut self, len: u64, what: &str) -> Result<Reader<'a>, Error> {
        let base = self.base.saturating_add(self.pos as u64);
        let data = self.bytes(len, what)?;
        Ok(Reader {
            data,
            pos: 0,
            base,
            decoded: self.decoded,
        })
    }

    fn finish(&self, what: &str) -> Result<(), Error> {
        if self.remaining() == 0 {
            Ok(())
        } else {
            Err(self.error(format!("{} bytes follow the {what}", self.remaining())))
        }
    }

    /// `n` bits, most significant first in each byte.
    fn bits(&mut self, n: usize, budget: &mut Budget, what: &str) -> Result<Vec<bool>, Error> {
        let bytes = self.bytes(n.div_ceil(8) as u64, what)?;
        let mut out = budget.vec(n, self)?;
        out.extend(
            bytes
                .iter()
                .flat_map(|b| (0..8).map(move |i| b & (0x80 >> i) != 0))
                .take(n),
        );
        Ok(out)
    }

    /// The Digests structure: which of `n` streams have a CRC, then the CRCs.
    fn digests(
        &mut self,
        n: usize,
        budget: &mut Budget,
        what: &str,
    ) -> Result<Vec<Option<u32>>, Error> {
        let all_defined = self.byte(what)?;
        let defined = if all_defined != 0 {
            None
        } else {
            Some(self.bits(n, budget, what)?)
        };
        let count = defined
            .as_ref()
            .map_or(n, |d| d.iter().filter(|b| **b).count());
        if (count as u64).saturating_mul(4) > self.remaining() as u64 {
            return Err(self.error(format!(
                "{count} CRCs of {what} cannot fit in the {} bytes left of the header",
                self.remaining()
            )));
        }
        let mut out = budget.vec(n, self)?;
        for i in 0..n {
            let is_defined = defined
                .as_ref()
                .is_none_or(|d| d.get(i).copied().unwrap_or(false));
            out.push(if is_defined {
                Some(self.u32_le(what)?)
            } else {
                None
            });
        }
        Ok(out)
    }
}

fn le_u32(data: &[u8], at: usize) -> u32 {
    data.get(at..at + 4)
        .and_then(|b| b.try_into().ok())
        .map_or(0, u32::from_le_bytes)
}

fn le_u64(data: &[u8], at: usize) -> u64 {
    data.get(at..at + 8)
        .and_then(|b| b.try_into().ok())
        .map_or(0, u64::from_le_bytes)
}

/// The signature header, then the next header, decoded if it is encoded. `None`
/// for an archive without a header (an empty archive).
fn read_archive(data: &[u8], budget: &mut Budget) -> Result<Option<Archive>, Error> {
    if !is_7z(data) {
        return Err(Error::archive(
            "not a 7z archive: no 7z signature",
            Location::at(0),
        ));
    }
    let Some(signature_header) = data.get(..SIGNATURE_HEADER_LEN) else {
        return Err(Error::archive(
            format!(
                "the 7z signature header needs {SIGNATURE_HEADER_LEN} bytes, the file has {}",
                data.len()
            ),
            Location::at(0),
        ));
    };
    let (major, minor) = (
        signature_header.get(6).copied().unwrap_or_default(),
        signature_header.get(7).copied().unwrap_or_default(),
    );
    if major != 0 {
        return Err(Error::unsupported(
            format!("7z format version {major}.{minor} (only major version 0 exists)"),
            Location::at(6),
        ));
    }
    let start_crc = le_u32(signature_header, 8);
    let actual = crc32fast::hash(signature_header.get(12..).unwrap_or_default());
    if start_crc != actual {
        return Err(Error::archive(
            format!("start header CRC mismatch: computed {actual:08x}, stored {start_crc:08x}"),
            Location::at(8),
        ));
    }
    let next_offset = le_u64(signature_header, 12);
    let next_size = le_u64(signature_header, 20);
    let next_crc = le_u32(signature_header, 28);
    if next_size == 0 {
        // 7-Zip's empty archive: no header at all.
        return if next_offset == 0 {
            Ok(None)
        } else {
            Err(Error::archive(
                format!("an empty next header at offset {next_offset}"),
                Location::at(12),
            ))
        };
    }
    let span = (SIGNATURE_HEADER_LEN as u64)
        .checked_add(next_offset)
        .and_then(|start| Some((start, start.checked_add(next_size)?)))
        .filter(|(_, end)| *end <= data.len() as u64);
    let Some((start, end)) = span else {
        return Err(Error::archive(
            format!(
                "the next header (offset {next_offset}, {next_size} bytes after byte 32) \
                 reaches past the end of the file ({} bytes)",
                data.len()
            ),
            Location::at(12),
        ));
    };
    // Both fit in the file, so in usize.
    let (start, end) = (start as usize, end as usize);
    let header = data.get(start..end).unwrap_or_default();
    let actual = crc32fast::hash(header);
    if actual != next_crc {
        return Err(Error::archive(
            format!("next header CRC mismatch: computed {actual:08x}, stored {next_crc:08x}"),
            Location::at(start as u64),
        ));
    }
    let mut r = Reader {
        data: header,
        pos: 0,
        base: start as u64,
        decoded: false,
    };
    match header.first() {
        Some(&K_HEADER) => read_header(&mut r, start, budget).map(Some),
        Some(&K_ENCODED_HEADER) => {
            r.property(K_ENCODED_HEADER, "an encoded header")?;
            let streams = read_streams(&mut r, start, budget)?;
            r.finish("encoded header's streams info")?;
            let [folder] = streams.folders.as_slice() else {
                return Err(r.error(format!(
                    "an encoded header must be one folder, this one has {}",
                    streams.folders.len()
                )));
            };
            supported(folder).map_err(|why| {
                Error::unsupported(
                    format!("the encoded 7z header: {why}"),
                    Location::at(start as u64),
                )
            })?;
            let decoded = decode_folder(data, &streams.packs, folder, budget)
                .map_err(|e| e.in_entry("7z encoded header"))?;
            if decoded.first() == Some(&K_ENCODED_HEADER) {
                return Err(Error::archive(
                    "the encoded header decodes to another encoded header (one level is allowed)",
                    Location::entry("7z encoded header"),
                ));
            }
            let mut r = Reader {
                data: &decoded,
                pos: 0,
                base: 0,
                decoded: true,
            };
            read_header(&mut r, start, budget).map(Some)
        }
        Some(&other) => Err(r.error(format!(
            "the next header starts with property 0x{other:02x}, not a header (0x01) or an encoded header (0x17)"
        ))),
        None => Err(r.error("an empty next header")),
    }
}

/// The Header: archive properties (skipped), main streams, files. `header_start`
/// bounds the packed streams, which lie before the header.
fn read_header(
    r: &mut Reader<'_>,
    header_start: usize,
    budget: &mut Budget,
) -> Result<Archive, Error> {
    r.property(K_HEADER, "the header")?;
    let mut id = r.byte("the header's first property")?;
    if id == K_ARCHIVE_PROPERTIES {
        loop {
            let kind = r.byte("an archive property")?;
            if kind == K_END {
                break;
            }
            let size = r.number("an archive property's size")?;
            r.bytes(size, "an archive property")?;
        }
        id = r.byte("the header's next property")?;
    }
    if id == K_ADDITIONAL_STREAMS_INFO {
        return Err(Error::unsupported(
            "7z additional streams (header data stored outside the header)",
            r.location(),
        ));
    }
    let mut streams = Streams::default();
    if id == K_MAIN_STREAMS_INFO {
        streams = read_streams(r, header_start, budget)?;
        id = r.byte("the header's next property")?;
    }
    let mut files = Vec::new();
    if id == K_FILES_INFO {
        files = read_files(r, budget)?;
        id = r.byte("the header's end")?;
    }
    if id != K_END {
        return Err(r.error(format!("unexpected property 0x{id:02x} in the header")));
    }
    r.finish("header")?;
    let with_stream = files.iter().filter(|f| f.has_stream).count();
    let substreams: usize = streams.folders.iter().map(|f| f.substreams.len()).sum();
    if with_stream != substreams {
        return Err(r.error(format!(
            "{with_stream} files have data, but the folders hold {substreams} streams"
        )));
    }
    Ok(Archive { streams, files })
}

/// StreamsInfo: pack info, folders, substreams, each optional, in that order.
fn read_streams(
    r: &mut Reader<'_>,
    header_start: usize,
    budget: &mut Budget,
) -> Result<Streams, Error> {
    let mut streams = Streams::default();
    let mut id = r.byte("the streams info")?;
    if id == K_PACK_INFO {
        streams.packs = read_pack_info(r, header_start, budget)?;
        id = r.byte("the streams info's next property")?;
    }
    if id == K_UNPACK_INFO {
        streams.folders = read_unpack_info(r, budget)?;
        id = r.byte("the streams info's next property")?;
    }
    let used: usize = streams.folders.iter().map(|f| f.packs.len()).sum();
    if used != streams.packs.len() {
        return Err(r.error(format!(
            "the folders read {used} packed streams, the pack info lists {}",
            streams.packs.len()
        )));
    }
    if id == K_SUBSTREAMS_INFO {
        read_substreams(r, &mut streams.folders, budget)?;
        id = r.byte("the streams info's end")?;
    } else {
        for folder in &mut streams.folders {
            let mut one = budget.vec(1, r)?;
            one.push(Substream {
                size: folder.unpack_size,
                crc: folder.crc,
            });
            folder.substreams = one;
        }
    }
    if id != K_END {
        return Err(r.error(format!(
            "unexpected property 0x{id:02x} in the streams info"
        )));
    }
    Ok(streams)
}

fn read_pack_info(
    r: &mut Reader<'_>,
    header_start: usize,
    budget: &mut Budget,
) -> Result<Vec<Pack>, Error> {
    let at = r.location();
    let pack_pos = r.number("the pack position")?;
    // Each packed stream has a size of at least one byte.
    let n = r.count("the number of packed streams", 1)?;
    r.property(K_SIZE, "the packed stream sizes")?;
    let mut packs: Vec<Pack> = budget.vec(n, r)?;
    let mut next = (SIGNATURE_HEADER_LEN as u64).checked_add(pack_pos);
    for _ in 0..n {
        let size = r.number("a packed stream size")?;
        let start = next;
        next = start.and_then(|s| s.checked_add(size));
        let (Some(start), Some(end)) = (start, next) else {
            return Err(Error::archive("packed stream positions overflow", at));
        };
        if end > header_start as u64 {
            return Err(Error::archive(
                format!(
                    "a packed stream (bytes {start}..{end}) reaches past the start of the header \
                     at byte {header_start}"
                ),
                at,
            ));
        }
        // Below header_start, so inside the file and usize.
        packs.push(Pack {
            start: start as usize,
            len: size as usize,
            crc: None,
        });
    }
    let mut id = r.byte("the pack info's end")?;
    if id == K_CRC {
        let crcs = r.digests(n, budget, "the packed streams")?;
        for (pack, crc) in packs.iter_mut().zip(crcs) {
            pack.crc = crc;
        }
        id = r.byte("the pack info's end")?;
    }
    if id != K_END {
        return Err(r.error(format!("unexpected property 0x{id:02x} in the pack info")));
    }
    Ok(packs)
}

fn read_unpack_info(r: &mut Reader<'_>, budget: &mut Budget) -> Result<Vec<Folder>, Error> {
    r.property(K_FOLDER, "the folders")?;
    // A folder takes at least two bytes (its coder count and one coder's flags)
    // and its unpack size one more.
    let n = r.count("the number of folders", 3)?;
    let external = r.byte("the folders' external flag")?;
    if external != 0 {
        return Err(Error::unsupported(
            "7z folders stored outside the header",
            r.location(),
        ));
    }
    let mut folders = budget.vec(n, r)?;
    let mut next_pack = 0usize;
    let mut outs = budget.vec::<(u64, u64)>(n, r)?;
    for _ in 0..n {
        let (folder, total_outs, main) = read_folder(r, &mut next_pack, budget)?;
        folders.push(folder);
        outs.push((total_outs, main));
    }
    r.property(K_CODERS_UNPACK_SIZE, "the folders' unpack sizes")?;
    for (folder, (total_outs, main)) in folders.iter_mut().zip(outs) {
        for out in 0..total_outs {
            let size = r.number("an unpack size")?;
            if out == main {
                folder.unpack_size = size;
            }
        }
    }
    let mut id = r.byte("the folders' end")?;
    if id == K_CRC {
        let crcs = r.digests(n, budget, "the folders")?;
        for (folder, crc) in folders.iter_mut().zip(crcs) {
            folder.crc = crc;
        }
        id = r.byte("the folders' end")?;
    }
    if id != K_END {
        return Err(r.error(format!("unexpected property 0x{id:02x} in the unpack info")));
    }
    Ok(folders)
}

/// One folder record; `next_pack` is the first packed stream it reads. Also the
/// number of output streams of its coders, and which of them is the folder's
/// main output (the one no bind pair consumes).
fn read_folder(
    r: &mut Reader<'_>,
    next_pack: &mut usize,
    budget: &mut Budget,
) -> Result<(Folder, u64, u64), Error> {
    let at = r.location();
    let n = r.count("the number of coders", 1)?;
    if n == 0 || n as u64 > MAX_CODERS {
        return Err(Error::archive(
            format!("a folder of {n} coders (1 to {MAX_CODERS} expected)"),
            at,
        ));
    }
    let mut coders = budget.vec(n, r)?;
    let (mut total_ins, mut total_outs) = (0u64, 0u64);
    for _ in 0..n {
        let at = r.location();
        let flags = r.byte("a coder's flags")?;
        if flags & 0xC0 != 0 {
            return Err(Error::unsupported(
                format!("7z coder flags 0x{flags:02x} (alternative methods or reserved bits)"),
                at,
            ));
        }
        let id_len = usize::from(flags & 0x0F);
        if id_len > MAX_METHOD_ID {
            return Err(Error::unsupported(
                format!("a 7z method id of {id_len} bytes (at most {MAX_METHOD_ID})"),
                at,
            ));
        }
        let id = r.bytes(id_len as u64, "a method id")?.to_vec();
        let (ins, outs) = if flags & 0x10 != 0 {
            let ins = r.number("a coder's input streams")?;
            let outs = r.number("a coder's output streams")?;
            (ins, outs)
        } else {
            (1, 1)
        };
        total_ins = total_ins.saturating_add(ins);
        total_outs = total_outs.saturating_add(outs);
        if total_ins > MAX_FOLDER_STREAMS || total_outs > MAX_FOLDER_STREAMS {
            return Err(Error::archive(
                format!("a folder's coders have more than {MAX_FOLDER_STREAMS} streams"),
                at,
            ));
        }
        let props = if flags & 0x20 != 0 {
            let len = r.number("a coder's properties size")?;
            let props = r.bytes(len, "a coder's properties")?;
            budget.take(len, || at.clone())?;
            props.to_vec()
        } else {
            Vec::new()
        };
        coders.push(Coder {
            id,
            ins,
            outs,
            props,
        });
    }
    // Every output but the folder's main one feeds a coder's input (both totals
    // are at most MAX_FOLDER_STREAMS, so the sets below are small).
    let Some(bind_pairs) = total_outs.checked_sub(1) else {
        return Err(Error::archive("a folder whose coders have no output", at));
    };
    let (mut bound_ins, mut bound_outs) = (Vec::new(), Vec::new());
    for _ in 0..bind_pairs {
        let input = r.index("a bind pair's input", total_ins)?;
        let output = r.index("a bind pair's output", total_outs)?;
        if bound_ins.contains(&input) || bound_outs.contains(&output) {
            return Err(r.error("a coder stream bound twice"));
        }
        bound_ins.push(input);
        bound_outs.push(output);
    }
    let Some(main) = (0..total_outs).find(|o| !bound_outs.contains(o)) else {
        return Err(Error::archive("every output of the folder is bound", at));
    };
    let Some(packed) = total_ins.checked_sub(bind_pairs).filter(|p| *p >= 1) else {
        return Err(Error::archive(
            format!(
                "a folder with {total_ins} inputs and {bind_pairs} bind pairs reads no packed stream"
            ),
            at,
        ));
    };
    if packed > 1 {
        for _ in 0..packed {
            r.index("a packed stream's input", total_ins)?;
        }
    }
    let first = *next_pack;
    *next_pack = first.saturating_add(packed as usize);
    let folder = Folder {
        coders,
        packs: first..*next_pack,
        unpack_size: 0,
        crc: None,
        substreams: Vec::new(),
    };
    Ok((folder, total_outs, main))
}

fn read_substreams(
    r: &mut Reader<'_>,
    folders: &mut [Folder],
    budget: &mut Budget,
) -> Result<(), Error> {
    let mut counts = budget.vec::<u64>(folders.len(), r)?;
    counts.resize(folders.len(), 1);
    let mut id = r.byte("the substreams info")?;
    if id == K_NUM_UNPACK_STREAM {
        for count in counts.iter_mut() {
            *count = r.number("a folder's number of substreams")?;
        }
        id = r.byte("the substreams info's next property")?;
    }
    // Each substream past a folder's first has its size written, in a byte or more.
    let extra: u64 = counts
        .iter()
        .map(|c| c.saturating_sub(1))
        .fold(0, u64::saturating_add);
    let has_sizes = id == K_SIZE;
    if extra > 0 && (!has_sizes || extra > r.remaining() as u64) {
        return Err(r.error(format!(
            "{extra} substream sizes cannot fit in the {} bytes left of the header",
            if has_sizes { r.remaining() } else { 0 }
        )));
    }
    for (folder, &count) in folders.iter_mut().zip(&counts) {
        // count <= extra + 1 <= remaining + 1, so it fits in usize.
        let mut subs = budget.vec(count as usize, r)?;
        if count > 0 {
            let mut sum = 0u64;
            for _ in 1..count {
                let size = r.number("a substream size")?;
                sum = sum
                    .checked_add(size)
                    .ok_or_else(|| r.error("substream sizes overflow"))?;
                subs.push(Substream { size, crc: None });
            }
            let Some(last) = folder.unpack_size.checked_sub(sum) else {
                return Err(r.error(format!(
                    "the substreams of a folder add up to {sum} bytes, more than its {}",
                    folder.unpack_size
                )));
            };
            subs.push(Substream {
                size: last,
                crc: None,
            });
        }
        folder.substreams = subs;
    }
    if has_sizes {
        id = r.byte("the substreams info's next property")?;
    }
    // A folder of one substream with a CRC lends it; every other substream's CRC
    // is listed here, if any is.
    let inherited = |f: &Folder| f.substreams.len() == 1 && f.crc.is_some();
    let unknown: usize = folders
        .iter()
        .filter(|f| !inherited(f))
        .map(|f| f.substreams.len())
        .sum();
    let mut crcs = if id == K_CRC {
        let crcs = r.digests(unknown, budget, "the substreams")?;
        id = r.byte("the substreams info's end")?;
        crcs
    } else {
        Vec::new()
    }
    .into_iter();
    for folder in folders.iter_mut() {
        if inherited(folder) {
            let crc = folder.crc;
            for sub in &mut folder.substreams {
                sub.crc = crc;
            }
        } else {
            for sub in &mut folder.substreams {
                sub.crc = crcs.next().flatten();
            }
        }
    }
    if id != K_END {
        return Err(r.error(format!(
            "unexpected property 0x{id:02x} in the substreams info"
        )));
    }
    Ok(())
}

fn read_files(r: &mut Reader<'_>, budget: &mut Budget) -> Result<Vec<File>, Error> {
    // Every file has a name, of at least its two-byte terminator.
    let n = r.count("the number of files", 2)?;
    let mut empty_stream: Option<Vec<bool>> = None;
    let mut empty_file: Option<Vec<bool>> = None;
    let mut anti: Option<Vec<bool>> = None;
    let mut names: Option<Vec<String>> = None;
    loop {
        let at = r.location();
        let kind = r.byte("a file property")?;
        if kind == K_END {
            break;
        }
        let size = r.number("a file property's size")?;
        let mut body = r.sub(size, "a file property")?;
        let duplicate = || {
            Error::archive(
                format!("file property 0x{kind:02x} given twice"),
                at.clone(),
            )
        };
        match kind {
            K_EMPTY_STREAM => {
                if empty_stream.is_some() {
                    return Err(duplicate());
                }
                empty_stream = Some(body.bits(n, budget, "the empty-stream bits")?);
                body.finish("empty-stream bits")?;
            }
            K_EMPTY_FILE | K_ANTI => {
                let slot = if kind == K_EMPTY_FILE {
                    &mut empty_file
                } else {
                    &mut anti
                };
                if slot.is_some() {
                    return Err(duplicate());
                }
                let empties = empty_stream
                    .as_ref()
                    .map(|e| e.iter().filter(|b| **b).count());
                let Some(count) = empties else {
                    return Err(Error::archive(
                        format!("file property 0x{kind:02x} before the empty-stream bits"),
                        at,
                    ));
                };
                *slot = Some(body.bits(count, budget, "the empty-file or anti bits")?);
                body.finish("empty-file or anti bits")?;
            }
            K_NAME => {
                if names.is_some() {
                    return Err(duplicate());
                }
                names = Some(read_names(&mut body, n, budget)?);
            }
            // Times, attributes, comments, start positions, padding, and what a
            // later format may add: skipped by their size.
            _ => {}
        }
    }
    let names = match names {
        Some(names) => names,
        None if n == 0 => Vec::new(),
        None => return Err(r.error(format!("{n} files have no names"))),
    };
    let mut files = budget.vec(n, r)?;
    let mut empty_index = 0usize;
    for (i, name) in names.into_iter().enumerate() {
        let is_empty_stream = empty_stream
            .as_ref()
            .and_then(|e| e.get(i).copied())
            .unwrap_or(false);
        let (mut is_empty_file, mut is_anti) = (false, false);
        if is_empty_stream {
            let bit = |v: &Option<Vec<bool>>| {
                v.as_ref()
                    .and_then(|v| v.get(empty_index).copied())
                    .unwrap_or(false)
            };
            is_empty_file = bit(&empty_file);
            is_anti = bit(&anti);
            empty_index += 1;
        }
        files.push(File {
            name,
            has_stream: !is_empty_stream,
            is_empty_file: is_empty_file && !is_anti,
        });
    }
    Ok(files)
}

/// The names property: an external flag (0), then `n` UTF-16LE names, each ended
/// by a zero, filling the property exactly.
fn read_names(r: &mut Reader<'_>, n: usize, budget: &mut Budget) -> Result<Vec<String>, Error> {
    let external = r.byte("the names' external flag")?;
    if external != 0 {
        return Err(Error::unsupported(
            "7z file names stored outside the header",
            r.location(),
        ));
    }
    if !r.remaining().is_multiple_of(2) {
        return Err(r.error("the names take an odd number of bytes"));
    }
    let mut names = budget.vec(n, r)?;
    let mut units = Vec::new();
    for i in 0..n {
        let at = r.location();
        units.clear();
        loop {
            let pair = r.bytes(2, "a file name")?;
            let unit = pair.try_into().map(u16::from_le_bytes).unwrap_or_default();
            if unit == 0 {
                break;
            }
            units.push(unit);
        }
        let name = String::from_utf16(&units).map_err(|_| {
            Error::archive(
                format!("the name of file {i} is not valid UTF-16"),
                at.clone(),
            )
        })?;
        budget.take(name.len() as u64, || at)?;
        names.push(name);
    }
    r.finish("file names")?;
    Ok(names)
}

/// A method's name, for messages.
fn method_name(id: &[u8]) -> &'static str {
    match id {
        [0x00] => "Copy",
        [0x03] => "Delta",
        [0x04] | [0x03, 0x03, 0x01, 0x03] => "BCJ (x86)",
        [0x03, 0x03, 0x01, 0x1B] => "BCJ2",
        [0x05] | [0x03, 0x03, 0x02, 0x05] => "BCJ (PowerPC)",
        [0x06] | [0x03, 0x03, 0x04, 0x01] => "BCJ (IA64)",
        [0x07] | [0x03, 0x03, 0x05, 0x01] => "BCJ (ARM)",
        [0x08] | [0x03, 0x03, 0x07, 0x01] => "BCJ (ARM Thumb)",
        [0x09] | [0x03, 0x03, 0x08, 0x05] => "BCJ (SPARC)",
        [0x0A] => "BCJ (ARM64)",
        [0x0B] => "BCJ (RISC-V)",
        [0x21] => "LZMA2",
        [0x03, 0x01, 0x01] => "LZMA",
        [0x03, 0x04, 0x01] => "PPMd",
        [0x04, 0x01, 0x08] => "Deflate",
        [0x04, 0x01, 0x09] => "Deflate64",
        [0x04, 0x02, 0x02] => "BZip2",
        [0x04, 0xF7, 0x11, 0x01] => "Zstandard",
        [0x04, 0xF7, 0x11, 0x02] => "Brotli",
        [0x04, 0xF7, 0x11, 0x04] => "LZ4",
        [0x06, 0xF1, 0x07, 0x01] => "7zAES (AES-256, SHA-256 key)",
        _ => "an unknown method",
    }
}

fn describe(coder: &Coder) -> String {
    let hex: String = coder.id.iter().map(|b| format!("{b:02X}")).collect();
    format!("{} (id {hex})", method_name(&coder.id))
}

/// The methods decoded here.
#[derive(Clone, Copy)]
enum Method {
    Copy,
    Lzma,
    Lzma2,
    Bzip2,
    Deflate,
}

/// The method of a folder this reader can decode, or why it cannot.
fn supported(folder: &Folder) -> Result<Method, String> {
    let coder = match folder.coders.as_slice() {
        [coder] if coder.ins == 1 && coder.outs == 1 => coder,
        coders => {
            let chain: Vec<String> = coders.iter().map(describe).collect();
            return Err(format!(
                "a folder of {} coders ({}): only one coder of Copy, LZMA, LZMA2, BZip2 or \
                 Deflate is supported",
                coders.len(),
                chain.join(", ")
            ));
        }
    };
    let method = match coder.id.as_slice() {
        [0x00] => Method::Copy,
        [0x03, 0x01, 0x01] => Method::Lzma,
        [0x21] => Method::Lzma2,
        [0x04, 0x02, 0x02] => Method::Bzip2,
        [0x04, 0x01, 0x08] => Method::Deflate,
        _ => return Err(format!("the 7z method {}", describe(coder))),
    };
    Ok(method)
}

fn folder_error(why: String, index: usize) -> Error {
    Error::unsupported(format!("7z folder {index}: {why}"), Location::default())
}

/// Decode one folder (of one supported coder) into a new buffer of exactly its
/// unpack size, charged against the budget first, and check its CRCs.
fn decode_folder(
    data: &[u8],
    packs: &[Pack],
    folder: &Folder,
    budget: &mut Budget,
) -> Result<Vec<u8>, Error> {
    let method = supported(folder).map_err(|why| Error::unsupported(why, Location::default()))?;
    let pack = packs
        .get(folder.packs.clone())
        .and_then(|p| match p {
            [one] => Some(one),
            _ => None,
        })
        .ok_or_else(|| Error::archive("a folder without its packed stream", Location::default()))?;
    let at = Location::at(pack.start as u64);
    let packed = pack
        .start
        .checked_add(pack.len)
        .and_then(|end| data.get(pack.start..end))
        .ok_or_else(|| Error::archive("a packed stream past the end of the file", at.clone()))?;
    if let Some(expected) = pack.crc {
        let actual = crc32fast::hash(packed);
        if actual != expected {
            return Err(Error::archive(
                format!("packed stream CRC mismatch: computed {actual:08x}, listed {expected:08x}"),
                at,
            ));
        }
    }
    let size = folder.unpack_size;
    budget.take(size, || at.clone())?;
    let mut out = Capped::new(size);
    let fail = |reason: String| Error::archive(reason, at.clone());
    let decoded = catch_unwind(AssertUnwindSafe(|| match method {
        Method::Copy => {
            if packed.len() as u64 != size {
                return Err(format!(
                    "a stored (Copy) stream of {} bytes cannot hold {size} bytes",
                    packed.len()
                ));
            }
            out.write_all(packed).map_err(|e| e.to_string())
        }
        Method::Lzma => unlzma(packed, &folder.coders, size, &mut out),
        Method::Lzma2 => unlzma2(packed, &folder.coders, size, &mut out),
        Method::Bzip2 => bunzip(packed, &mut out),
        Method::Deflate => {
            let used = inflate_into(packed, &mut out).map_err(|e| match e {
                StreamError::TooLarge(_) => too_large(size),
                StreamError::Corrupt(why) => why,
            })?;
            if used != packed.len() {
                return Err(format!(
                    "{} bytes follow the deflate stream",
                    packed.len().saturating_sub(used)
                ));
            }
            Ok(())
        }
    }));
    match decoded {
        Ok(Ok(())) => {}
        Ok(Err(reason)) => return Err(fail(reason)),
        Err(_) => return Err(fail("the decoder failed on a corrupt stream".into())),
    }
    let output = out.into_inner();
    if output.len() as u64 != size {
        return Err(fail(format!(
            "the folder decodes to {} bytes, but its unpack size is {size}",
            output.len()
        )));
    }
    if let Some(expected) = folder.crc {
        let actual = crc32fast::hash(&output);
        if actual != expected {
            return Err(fail(format!(
                "folder CRC mismatch: the decoded data has CRC {actual:08x}, the archive lists {expected:08x}"
            )));
        }
    }
    Ok(output)
}

fn too_large(size: u64) -> String {
    format!("decodes to more than the folder's unpack size of {size} bytes")
}

fn props(coders: &[Coder]) -> &[u8] {
    coders.first().map_or(&[][..], |c| c.props.as_slice())
}

/// LZMA: five property bytes (lc/lp/pb, dictionary size), a raw stream that
/// decodes to the folder's unpack size (an end marker after it is not read). The
/// dictionary is never larger than the output.
fn unlzma(packed: &[u8], coders: &[Coder], size: u64, out: &mut Capped) -> Result<(), String> {
    let props = props(coders);
    let [lclppb, d0, d1, d2, d3] = props else {
        return Err(format!(
            "LZMA properties of {} bytes (5 expected)",
            props.len()
        ));
    };
    let declared = u32::from_le_bytes([*d0, *d1, *d2, *d3]);
    let dict = u64::from(declared).min(size).max(1 << 12);
    let dict = u32::try_from(dict).unwrap_or(u32::MAX);
    let [e0, e1, e2, e3] = dict.to_le_bytes();
    let header = [*lclppb, e0, e1, e2, e3];
    let options = lzma_rs::decompress::Options {
        unpacked_size: lzma_rs::decompress::UnpackedSize::UseProvided(Some(size)),
        memlimit: Some(usize::try_from(dict).unwrap_or(usize::MAX)),
        allow_incomplete: false,
    };
    let mut input = io::Read::chain(&header[..], packed);
    lzma_rs::lzma_decompress_with_options(&mut input, out, &options)
        .map_err(|e| lzma_error(e, size))
}

/// LZMA2: one property byte (the dictionary size, at most 40), then chunks. Their
/// headers are walked first: what they declare must add up to the unpack size,
/// which bounds what the decoder keeps in memory, before anything is decoded.
fn unlzma2(packed: &[u8], coders: &[Coder], size: u64, out: &mut Capped) -> Result<(), String> {
    match props(coders) {
        [dict] if *dict <= 40 => {}
        other => return Err(format!("bad LZMA2 properties {other:02x?}")),
    }
    let declared = lzma2_declared_size(packed)?;
    if declared != size {
        return Err(format!(
            "the LZMA2 chunks declare {declared} bytes, but the folder's unpack size is {size}"
        ));
    }
    let mut input = packed;
    lzma_rs::lzma2_decompress(&mut input, out).map_err(|e| lzma_error(e, size))?;
    if !input.is_empty() {
        return Err(format!("{} bytes follow the LZMA2 stream", input.len()));
    }
    Ok(())
}

/// The total size the chunks of an LZMA2 stream declare, checked to lie in
/// `packed` up to the end byte.
fn lzma2_declared_size(packed: &[u8]) -> Result<u64, String> {
    let truncated = || "a truncated LZMA2 chunk header".to_owned();
    let be16 = |at: usize| {
        packed
            .get(at..at.saturating_add(2))
            .and_then(|b| <[u8; 2]>::try_from(b).ok())
            .map(|b| u64::from(u16::from_be_bytes(b)))
    };
    let mut at = 0usize;
    let mut total = 0u64;
    loop {
        let control = *packed.get(at).ok_or_else(truncated)?;
        let (unpacked, header, body) = match control {
            0x00 => return Ok(total),
            0x01 | 0x02 => {
                let n = be16(at + 1).ok_or_else(truncated)? + 1;
                (n, 3usize, n)
            }
            0x80..=0xFF => {
                let low = be16(at + 1).ok_or_else(truncated)?;
                let unpacked = ((u64::from(control & 0x1F) << 16) | low) + 1;
                let packed_len = be16(at + 3).ok_or_else(truncated)? + 1;
                let header = if control >= 0xC0 { 6 } else { 5 };
                (unpacked, header, packed_len)
            }
            other => return Err(format!("bad LZMA2 control byte 0x{other:02x}")),
        };
        total = total
            .checked_add(unpacked)
            .ok_or_else(|| "LZMA2 chunk sizes overflow".to_owned())?;
        at = usize::try_from(body)
            .ok()
            .and_then(|b| at.checked_add(header)?.checked_add(b))
            .filter(|end| *end <= packed.len())
            .ok_or_else(|| "an LZMA2 chunk reaches past its packed stream".to_owned())?;
    }
}

fn lzma_error(e: lzma_rs::error::Error, size: u64) -> String {
    match e {
        lzma_rs::error::Error::IoError(io) if io.kind() == io::ErrorKind::WriteZero => {
            too_large(size)
        }
        other => format!("corrupt LZMA stream ({other})"),
    }
}

/// One bzip2 stream, which must fill its packed stream exactly.
fn bunzip(packed: &[u8], out: &mut Capped) -> Result<(), String> {
    let mut decoder = bzip2::Decompress::new(false);
    let mut chunk = vec![0u8; 1 << 16];
    loop {
        let (read, written) = (decoder.total_in(), decoder.total_out());
        let input = usize::try_from(read)
            .ok()
            .and_then(|r| packed.get(r..))
            .unwrap_or_default();
        let status = decoder
            .decompress(input, &mut chunk)
            .map_err(|e| format!("corrupt bzip2 stream ({e})"))?;
        let produced = usize::try_from(decoder.total_out().saturating_sub(written)).unwrap_or(0);
        out.write_all(chunk.get(..produced).unwrap_or_default())
            .map_err(|_| "decodes to more than the folder's unpack size".to_owned())?;
        if status == bzip2::Status::StreamEnd {
            break;
        }
        if produced == 0 && decoder.total_in() == read {
            return Err("a truncated bzip2 stream".into());
        }
    }
    let used = decoder.total_in();
    if used != packed.len() as u64 {
        return Err(format!(
            "{} bytes follow the bzip2 stream",
            (packed.len() as u64).saturating_sub(used)
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reader(data: &[u8]) -> Reader<'_> {
        Reader {
            data,
            pos: 0,
            base: 0,
            decoded: false,
        }
    }

    #[test]
    fn numbers_use_the_leading_ones_of_their_first_byte() {
        let cases: &[(&[u8], u64)] = &[
            (&[0x00], 0),
            (&[0x7F], 0x7F),
            (&[0x80, 0x80], 0x80),
            (&[0xBF, 0xFF], 0x3FFF),
            (&[0xC0, 0x00, 0x40], 0x4000),
            (&[0xE1, 0x02, 0x03, 0x04], 0x0104_0302),
            (&[0xFE, 1, 2, 3, 4, 5, 6, 7], 0x0007_0605_0403_0201),
            (&[0xFF, 1, 2, 3, 4, 5, 6, 7, 8], 0x0807_0605_0403_0201),
        ];
        for (bytes, value) in cases {
            let mut r = reader(bytes);
            assert_eq!(r.number("n").unwrap(), *value, "{bytes:02x?}");
            assert_eq!(r.remaining(), 0);
        }
        // Every prefix of a long number is truncated.
        for len in 0..9 {
            let bytes = [0xFF, 1, 2, 3, 4, 5, 6, 7, 8];
            assert!(reader(&bytes[..len]).number("n").is_err());
        }
    }

    #[test]
    fn counts_are_checked_against_the_bytes_left() {
        let mut r = reader(&[0x03, 0, 0, 0]);
        assert_eq!(r.count("items", 1).unwrap(), 3);
        let mut r = reader(&[0x03, 0, 0]);
        assert!(r.count("items", 1).is_err());
        let mut r = reader(&[0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF]);
        assert!(r.count("items", 2).is_err());
    }

    #[test]
    fn bit_vectors_are_most_significant_bit_first() {
        let mut budget = Budget {
            left: 100,
            cap: 100,
        };
        let mut r = reader(&[0b1010_0000, 0b1000_0000]);
        let bits = r.bits(9, &mut budget, "bits").unwrap();
        assert_eq!(
            bits,
            [true, false, true, false, false, false, false, false, true]
        );
        let mut r = reader(&[0xFF]);
        assert!(r.bits(9, &mut budget, "bits").is_err());
    }

    #[test]
    fn lzma2_chunk_headers_are_walked_before_decoding() {
        // An uncompressed chunk of 3 bytes, then an LZMA chunk declaring 2 MiB.
        let mut stream = vec![0x01, 0x00, 0x02, b'a', b'b', b'c'];
        stream.extend_from_slice(&[0xFF, 0xFF, 0xFF, 0x00, 0x01, 0x5D, 0xAA, 0xBB, 0x00]);
        assert_eq!(lzma2_declared_size(&stream).unwrap(), 3 + (1 << 21));
        assert!(lzma2_declared_size(&stream[..stream.len() - 1]).is_err());
        assert!(lzma2_declared_size(&[0x01, 0xFF, 0xFF, 0x00]).is_err());
        assert!(lzma2_declared_size(&[0x03]).is_err());
        assert_eq!(lzma2_declared_size(&[0x00]).unwrap(), 0);
    }

    #[test]
    fn methods_are_named() {
        assert_eq!(
            method_name(&[0x06, 0xF1, 0x07, 0x01]),
            "7zAES (AES-256, SHA-256 key)"
        );
        assert_eq!(method_name(&[0x03, 0x03, 0x01, 0x03]), "BCJ (x86)");
        assert_eq!(method_name(&[0x42]), "an unknown method");
    }
}
