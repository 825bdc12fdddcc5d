//! The coders of a 7z folder: which chains of them are decoded (a decompressor,
//! then filters), and the decoding of a folder into its unpack size.

use std::io::{self, Write};
use std::panic::{catch_unwind, AssertUnwindSafe};

use crate::archive::sevenzip::filters::Filter;
use crate::archive::sevenzip::model::{Coder, Folder, Pack};
use crate::archive::sevenzip::Budget;
use crate::archive::streams::{inflate_into, unzstd_into, Capped, StreamError};
use crate::error::{Error, Location};

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

/// The decompressors decoded here: the first coder of a folder's chain, the one
/// its packed stream feeds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Decoder {
    Copy,
    Lzma,
    Lzma2,
    Bzip2,
    Deflate,
    Zstd,
}

fn decoder(coder: &Coder) -> Option<Decoder> {
    Some(match coder.id.as_slice() {
        [0x00] => Decoder::Copy,
        [0x03, 0x01, 0x01] => Decoder::Lzma,
        [0x21] => Decoder::Lzma2,
        [0x04, 0x02, 0x02] => Decoder::Bzip2,
        [0x04, 0x01, 0x08] => Decoder::Deflate,
        [0x04, 0xF7, 0x11, 0x01] => Decoder::Zstd,
        _ => return None,
    })
}

/// The filter a coder applies, `Ok(None)` for a method that is none, or why
/// its properties are not read: a branch filter has none (liblzma's start
/// offset is not modelled), Delta one byte, its distance less one.
fn filter(coder: &Coder) -> Result<Option<Filter>, String> {
    let filter = match coder.id.as_slice() {
        [0x04] | [0x03, 0x03, 0x01, 0x03] => Filter::X86,
        [0x05] | [0x03, 0x03, 0x02, 0x05] => Filter::PowerPc,
        [0x06] | [0x03, 0x03, 0x04, 0x01] => Filter::Ia64,
        [0x07] | [0x03, 0x03, 0x05, 0x01] => Filter::Arm,
        [0x08] | [0x03, 0x03, 0x07, 0x01] => Filter::ArmThumb,
        [0x09] | [0x03, 0x03, 0x08, 0x05] => Filter::Sparc,
        [0x03] => {
            return match coder.props.as_slice() {
                [d] => Ok(Some(Filter::Delta {
                    distance: usize::from(*d) + 1,
                })),
                other => Err(format!(
                    "the 7z method {} with {} bytes of properties (1 expected)",
                    describe(coder),
                    other.len()
                )),
            }
        }
        _ => return Ok(None),
    };
    if !coder.props.is_empty() {
        return Err(format!(
            "the 7z method {} with {} bytes of properties (a start offset; none expected)",
            describe(coder),
            coder.props.len()
        ));
    }
    Ok(Some(filter))
}

/// The most coders a chain may have: py7zr writes and reads at most four, and
/// 7-Zip's C decoder (7zDec.c) no more.
const MAX_CHAIN: usize = 4;

/// How a folder this reader decodes is coded: a decompressor, then the filters
/// its output goes through, in order.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct Chain {
    decoder: Decoder,
    filters: Vec<Filter>,
}

/// The chain of a folder this reader can decode, or why it cannot: coder 0
/// reads the packed stream, coder `i` reads the output of coder `i - 1` (bind
/// pair input `i`, output `i - 1`), and the last coder's output is the folder's,
/// as py7zr writes every folder (and as 7-Zip's C decoder requires); each coder
/// has one input and one output, the first is a decompressor and the others are
/// filters. Any other layout is refused, naming the coders.
pub(super) fn supported(folder: &Folder) -> Result<Chain, String> {
    let coders = folder.coders.as_slice();
    let n = coders.len();
    let listing = || {
        let names: Vec<String> = coders.iter().map(describe).collect();
        format!("a folder of {n} coders ({})", names.join(", "))
    };
    if n > MAX_CHAIN {
        return Err(format!("{}: at most {MAX_CHAIN} are read", listing()));
    }
    let mut filters = Vec::with_capacity(n.saturating_sub(1));
    let mut first = None;
    for (i, coder) in coders.iter().enumerate() {
        let filter = filter(coder)?;
        let known = decoder(coder).is_some() || filter.is_some();
        if !known {
            let place = if n > 1 {
                format!(" in {}", listing())
            } else {
                String::new()
            };
            return Err(format!("the 7z method {}{place}", describe(coder)));
        }
        if coder.ins != 1 || coder.outs != 1 {
            return Err(format!(
                "{}: coder {i} has {} inputs and {} outputs (one of each expected)",
                listing(),
                coder.ins,
                coder.outs
            ));
        }
        match (i, decoder(coder), filter) {
            (0, Some(d), _) => first = Some(d),
            (1.., None, Some(f)) => filters.push(f),
            _ => {
                return Err(format!(
                    "{}: only a decompressor (Copy, LZMA, LZMA2, BZip2, Deflate, Zstandard) \
                     followed by filters (BCJ x86, ARM, ARM Thumb, PowerPC, SPARC, IA64, \
                     Delta) is read",
                    listing()
                ))
            }
        }
    }
    let Some(decoder) = first else {
        return Err("a folder of no coders".to_owned());
    };
    let chained = folder.packed_inputs == [0]
        && folder.binds.len() == n - 1
        && (1..n as u64).all(|i| (folder.binds.iter()).any(|b| b.input == i && b.output == i - 1));
    if !chained {
        let binds: Vec<String> = (folder.binds.iter())
            .map(|b| format!("input {} from output {}", b.input, b.output))
            .collect();
        return Err(format!(
            "{} bound otherwise than in a chain (bind pairs: {}; packed streams into inputs \
             {:?}): only the packed stream into coder 0 and each coder's output into the next \
             coder is read",
            listing(),
            if binds.is_empty() {
                "none".to_owned()
            } else {
                binds.join(", ")
            },
            folder.packed_inputs
        ));
    }
    Ok(Chain { decoder, filters })
}

pub(super) fn folder_error(why: String, index: usize) -> Error {
    Error::unsupported(format!("7z folder {index}: {why}"), Location::default())
}

/// Decode one folder (of a supported chain) into a new buffer of exactly its
/// unpack size, charged against the budget first, and check its CRCs. The
/// decompressor writes into the buffer, which never grows past that size, and
/// the filters rewrite it in place.
pub(super) fn decode_folder(
    data: &[u8],
    packs: &[Pack],
    folder: &Folder,
    budget: &mut Budget,
) -> Result<Vec<u8>, Error> {
    let chain = supported(folder).map_err(|why| Error::unsupported(why, Location::default()))?;
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
    let fail = |reason: String| Error::archive(reason, at.clone());
    // A filter keeps the length: every coder of the chain outputs the folder's size.
    if let Some((i, other)) = (folder.unpack_sizes.iter().enumerate()).find(|(_, s)| **s != size) {
        return Err(fail(format!(
            "coder {i} of the folder outputs {other} bytes, the folder {size}: the filters of \
             a chain keep the length"
        )));
    }
    budget.take(size, || at.clone())?;
    let mut out = Capped::new(size);
    let decoded = catch_unwind(AssertUnwindSafe(|| match chain.decoder {
        Decoder::Copy => {
            if packed.len() as u64 != size {
                return Err(format!(
                    "a stored (Copy) stream of {} bytes cannot hold {size} bytes",
                    packed.len()
                ));
            }
            out.write_all(packed).map_err(|e| e.to_string())
        }
        Decoder::Lzma => unlzma(packed, &folder.coders, size, &mut out),
        Decoder::Lzma2 => unlzma2(packed, &folder.coders, size, &mut out),
        Decoder::Bzip2 => bunzip(packed, &mut out),
        Decoder::Deflate => {
            let used = inflate_into(packed, &mut out).map_err(|e| stream_error(e, size))?;
            if used != packed.len() {
                return Err(format!(
                    "{} bytes follow the deflate stream",
                    packed.len().saturating_sub(used)
                ));
            }
            Ok(())
        }
        Decoder::Zstd => unzstd(packed, &folder.coders, size, &mut out),
    }));
    match decoded {
        Ok(Ok(())) => {}
        Ok(Err(reason)) => return Err(fail(reason)),
        Err(_) => return Err(fail("the decoder failed on a corrupt stream".into())),
    }
    let mut output = out.into_inner();
    if output.len() as u64 != size {
        return Err(fail(format!(
            "the folder decodes to {} bytes, but its unpack size is {size}",
            output.len()
        )));
    }
    for filter in &chain.filters {
        filter.decode(&mut output);
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

fn stream_error(e: StreamError, size: u64) -> String {
    match e {
        StreamError::TooLarge(_) => too_large(size),
        StreamError::Corrupt(why) => why,
    }
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

/// Zstandard (the 7-Zip fork's method, which py7zr writes): three or five
/// property bytes (the zstd version and level that wrote it, which the frames
/// do not need), then frames, decoded as a `.zst` file is.
fn unzstd(packed: &[u8], coders: &[Coder], size: u64, out: &mut Capped) -> Result<(), String> {
    let props = props(coders);
    if !matches!(props.len(), 3 | 5) {
        return Err(format!(
            "Zstandard properties of {} bytes (3 or 5 expected)",
            props.len()
        ));
    }
    unzstd_into(packed, out).map_err(|e| stream_error(e, size))
}

#[cfg(test)]
mod tests {
    use super::*;

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
