//! Wrapper detection and unwrapping: the whole-file decoders within their caps,
//! the 7z reader within its cap, and the scan's promise that a wrapper hides
//! nothing: what a scan finds in some bytes, it finds in those bytes gzipped,
//! zlib-wrapped, put in a tar or in a zip.

use crate::archive::sevenzip;
use crate::archive::streams::Compression;
use crate::scan::{scan_bytes, ScanOptions, Verdict};

/// Output cap for the decoders: far above any fuzz input's honest expansion.
const CAP: u64 = 1 << 20;

const EVERY_COMPRESSION: [Compression; 6] = [
    Compression::Gzip,
    Compression::Bzip2,
    Compression::Xz,
    Compression::LzmaAlone,
    Compression::Zlib,
    Compression::Zstd,
];

pub fn wrappers(data: &[u8]) {
    // Each decoder on any bytes, sniffed or not: an error or at most CAP bytes.
    let sniffed = Compression::of(data);
    for c in EVERY_COMPRESSION {
        if let Ok(out) = c.decode(data, CAP) {
            assert!(out.len() as u64 <= CAP, "{} decoded past its cap", c.name());
        }
    }
    if let Some(c) = sniffed {
        assert!(EVERY_COMPRESSION.contains(&c));
    }
    let mut total = 0u64;
    let members = sevenzip::for_each_member(data, CAP, |_, bytes| {
        total += bytes.len() as u64;
        Ok(())
    });
    if members.is_ok() {
        assert!(total <= CAP, "7z members past the cap");
    }

    let options = ScanOptions::default();
    let bare = scan_bytes(data, &options);
    let bare_names = bare.names();
    // One wrapper per input (a scan is the costly part), chosen by its length.
    let wrap: [(&str, Wrap); 4] = [("gzip", gzip), ("zlib", zlib), ("tar", tar), ("zip", zip)];
    if let Some(&(wrapper, make)) = wrap.get(data.len() % wrap.len()) {
        let wrapped = make(data);
        let report = scan_bytes(&wrapped, &options);
        // One more level may pass the depth or the work a scan allows.
        let spent = (report.problems.iter()).any(|p| p.kind == crate::error::code::LIMIT);
        if spent {
            return;
        }
        let names = report.names();
        for name in &bare_names {
            assert!(
                names.contains(name),
                "{wrapper} hides {name}: {names:?} (bare: {bare_names:?})"
            );
        }
        if bare.verdict() == Verdict::Unsafe {
            assert_eq!(report.verdict(), Verdict::Unsafe, "{wrapper}");
            // A zip file is itself the archive its findings are in; a wrapper
            // around the file is named.
            let named = (report.findings.iter()).any(|f| f.wrappers.first() == Some(&wrapper));
            assert!(
                wrapper == "zip" || named,
                "{wrapper}: findings not named as inside it"
            );
        }
    }
}

type Wrap = fn(&[u8]) -> Vec<u8>;

/// DEFLATE stored blocks (at most 65,535 bytes each) holding `data`.
fn stored_blocks(data: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut chunks = data.chunks(0xffff).peekable();
    if chunks.peek().is_none() {
        out.extend_from_slice(&[1, 0, 0, 0xff, 0xff]);
    }
    while let Some(chunk) = chunks.next() {
        out.push(u8::from(chunks.peek().is_none()));
        let len = chunk.len() as u16;
        out.extend_from_slice(&len.to_le_bytes());
        out.extend_from_slice(&(!len).to_le_bytes());
        out.extend_from_slice(chunk);
    }
    out
}

fn gzip(data: &[u8]) -> Vec<u8> {
    let mut out = vec![0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 0xff];
    out.extend(stored_blocks(data));
    out.extend_from_slice(&crc32fast::hash(data).to_le_bytes());
    out.extend_from_slice(&(data.len() as u32).to_le_bytes());
    out
}

fn zlib(data: &[u8]) -> Vec<u8> {
    let mut out = vec![0x78, 0x01];
    out.extend(stored_blocks(data));
    let (mut a, mut b) = (1u32, 0u32);
    for byte in data {
        a = (a + u32::from(*byte)) % 65521;
        b = (b + a) % 65521;
    }
    out.extend_from_slice(&((b << 16) | a).to_be_bytes());
    out
}

/// A ustar archive with `data` as `model.pkl`.
fn tar(data: &[u8]) -> Vec<u8> {
    let mut header = [0u8; 512];
    header[..9].copy_from_slice(b"model.pkl");
    header[100..107].copy_from_slice(b"0000644");
    let size = format!("{:011o}", data.len());
    header[124..135].copy_from_slice(size.as_bytes());
    header[136..147].copy_from_slice(b"00000000000");
    header[156] = b'0';
    header[257..263].copy_from_slice(b"ustar\0");
    header[263..265].copy_from_slice(b"00");
    header[148..156].copy_from_slice(b"        ");
    let sum: u32 = header.iter().map(|b| u32::from(*b)).sum();
    header[148..155].copy_from_slice(format!("{sum:06o}\0").as_bytes());
    let mut out = header.to_vec();
    out.extend_from_slice(data);
    out.resize(out.len().div_ceil(512) * 512 + 1024, 0);
    out
}

/// A zip with `data` stored as `model.pkl`.
fn zip(data: &[u8]) -> Vec<u8> {
    let name = b"model.pkl";
    let crc = crc32fast::hash(data);
    let size = data.len() as u32;
    let mut out = Vec::new();
    out.extend_from_slice(&0x0403_4b50u32.to_le_bytes());
    out.extend_from_slice(&[20, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
    out.extend_from_slice(&crc.to_le_bytes());
    out.extend_from_slice(&size.to_le_bytes());
    out.extend_from_slice(&size.to_le_bytes());
    out.extend_from_slice(&(name.len() as u16).to_le_bytes());
    out.extend_from_slice(&0u16.to_le_bytes());
    out.extend_from_slice(name);
    out.extend_from_slice(data);
    let directory = out.len() as u32;
    out.extend_from_slice(&0x0201_4b50u32.to_le_bytes());
    out.extend_from_slice(&[20, 0, 20, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
    out.extend_from_slice(&crc.to_le_bytes());
    out.extend_from_slice(&size.to_le_bytes());
    out.extend_from_slice(&size.to_le_bytes());
    out.extend_from_slice(&(name.len() as u16).to_le_bytes());
    out.extend_from_slice(&[0; 12]);
    out.extend_from_slice(&0u32.to_le_bytes());
    out.extend_from_slice(name);
    let directory_size = out.len() as u32 - directory;
    out.extend_from_slice(&0x0605_4b50u32.to_le_bytes());
    out.extend_from_slice(&[0, 0, 0, 0, 1, 0, 1, 0]);
    out.extend_from_slice(&directory_size.to_le_bytes());
    out.extend_from_slice(&directory.to_le_bytes());
    out.extend_from_slice(&0u16.to_le_bytes());
    out
}
