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
//! A folder is decoded when its coders are a chain of at most four, as py7zr
//! writes every folder (its default on x86 is LZMA2, then BCJ x86): a
//! decompressor (Copy, LZMA, LZMA2, BZip2, Deflate or Zstandard) reading the
//! folder's one packed stream, then filters (BCJ for x86, ARM, ARM Thumb,
//! PowerPC, SPARC or IA-64, and Delta), each reading the output of the coder
//! before it, as the folder's bind pairs must say (`coders`; the filters in
//! `filters`). Anything else (another layout of the bind pairs, multi-stream
//! coders such as BCJ2, AES encryption, PPMd, Brotli, unknown methods) is refused
//! as unsupported, naming the coders, and the declared CRCs (pack streams,
//! folders, substreams) are checked: a file whose listed data differs from what
//! the chain produces is malformed.
//!
//! The parts: `reader` (the cursor over header bytes), `header` (the headers and
//! their tables), `coders` (which chains are read, and decoding a folder),
//! `filters` (the filters after a decompressor).

mod coders;
mod filters;
mod header;
mod model;
mod reader;

use crate::error::{Error, Location};
use crate::limits::Limit;

use coders::{decode_folder, folder_error, supported};
use header::read_archive;
use model::Archive;
use reader::Reader;

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
