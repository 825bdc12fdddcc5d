//! The coders of a 7z folder: which methods are decoded, and the decoding of a
//! folder into its unpack size.

use std::io::{self, Write};
use std::panic::{catch_unwind, AssertUnwindSafe};

use crate::archive::sevenzip::header::{Coder, Folder, Pack};
use crate::archive::sevenzip::Budget;
use crate::archive::streams::{inflate_into, Capped, StreamError};
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

/// The methods decoded here.
#[derive(Clone, Copy)]
pub(super) enum Method {
    Copy,
    Lzma,
    Lzma2,
    Bzip2,
    Deflate,
}

/// The method of a folder this reader can decode, or why it cannot.
pub(super) fn supported(folder: &Folder) -> Result<Method, String> {
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

pub(super) fn folder_error(why: String, index: usize) -> Error {
    Error::unsupported(format!("7z folder {index}: {why}"), Location::default())
}

/// Decode one folder (of one supported coder) into a new buffer of exactly its
/// unpack size, charged against the budget first, and check its CRCs.
pub(super) fn decode_folder(
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
