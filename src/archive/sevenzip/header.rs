//! The headers of a 7z archive: the signature header, the next header (plain,
//! or encoded once with a folder of its own), the streams info (pack info,
//! folders, substreams) and the files info.

use crate::archive::sevenzip::coders::{decode_folder, supported};
use crate::archive::sevenzip::model::{Archive, Bind, Coder, File, Folder, Pack, Streams, Substream};
use crate::archive::sevenzip::reader::{le_u32, le_u64, Reader};
use crate::archive::sevenzip::{is_7z, Budget, SIGNATURE_HEADER_LEN};
use crate::error::{Error, Location};

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

/// The signature header, then the next header, decoded if it is encoded. `None`
/// for an archive without a header (an empty archive).
pub(super) fn read_archive(data: &[u8], budget: &mut Budget) -> Result<Option<Archive>, Error> {
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
        // At most MAX_FOLDER_STREAMS.
        let mut sizes = budget.vec(total_outs as usize, r)?;
        for out in 0..total_outs {
            let size = r.number("an unpack size")?;
            if out == main {
                folder.unpack_size = size;
            }
            sizes.push(size);
        }
        folder.unpack_sizes = sizes;
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
    let mut binds: Vec<Bind> = budget.vec(bind_pairs as usize, r)?;
    for _ in 0..bind_pairs {
        let input = r.index("a bind pair's input", total_ins)?;
        let output = r.index("a bind pair's output", total_outs)?;
        if binds.iter().any(|b| b.input == input || b.output == output) {
            return Err(r.error("a coder stream bound twice"));
        }
        binds.push(Bind { input, output });
    }
    let Some(main) = (0..total_outs).find(|o| binds.iter().all(|b| b.output != *o)) else {
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
    // At most MAX_FOLDER_STREAMS.
    let mut packed_inputs = budget.vec(packed as usize, r)?;
    if packed > 1 {
        for _ in 0..packed {
            packed_inputs.push(r.index("a packed stream's input", total_ins)?);
        }
    } else {
        // The one input no bind pair feeds (there is one: bind_pairs < total_ins).
        let unbound = (0..total_ins).find(|i| binds.iter().all(|b| b.input != *i));
        packed_inputs.extend(unbound);
    }
    let first = *next_pack;
    *next_pack = first.saturating_add(packed as usize);
    let folder = Folder {
        coders,
        binds,
        packed_inputs,
        packs: first..*next_pack,
        unpack_sizes: Vec::new(),
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
