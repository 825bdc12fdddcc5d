//! The 7z reader: archives written by py7zr (tests/fixtures/sevenzip/make.py)
//! decode to their files, with every coder chain py7zr writes (a decompressor,
//! then branch filters or Delta), what is not supported is refused naming the
//! method or the layout, and hostile headers (truncated, huge counts, sizes past
//! the file or the cap, wrong CRCs, random damage) end in an error, never a panic
//! or a large allocation.

use proptest::prelude::*;
use tensorplay::archive::sevenzip::{self, Member};
use tensorplay::Error;

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/sevenzip");

// What make.py stores.
const PICKLE: &[u8] = b"\x80\x02}q\x00X\x06\x00\x00\x00weightq\x01]q\x02(G?\xf0\x00\x00\x00\x00\x00\x00G@\x00\x00\x00\x00\x00\x00\x00G@\x08\x00\x00\x00\x00\x00\x00es.";
const SMALL: &[u8] = b"0123456789";

fn text() -> Vec<u8> {
    b"hello 7z\n".repeat(40)
}

/// make.py's `code`: 2048 bytes in which every branch filter finds instructions
/// (of each 32 bytes, an IA-64 branch bundle, then an x86 CALL, an ARM BL, an ARM
/// Thumb BL, a PowerPC bl or a SPARC call in turn).
fn code() -> Vec<u8> {
    const ALPHABET: [u8; 16] = [
        0x00, 0xFF, 0xE8, 0xE9, 0xEB, 0xF0, 0xF8, 0xF7, 0x40, 0x7F, 0x48, 0x4B, 0x01, 0x05, 0x10,
        0xC0,
    ];
    let mut x: u32 = 0x7A5EED;
    let mut out: Vec<u8> = (0..2048)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            if x & 0x100 != 0 {
                ALPHABET[(x >> 28) as usize]
            } else {
                (x >> 20) as u8
            }
        })
        .collect();
    for (k, chunk) in out.chunks_exact_mut(32).enumerate() {
        chunk[0] = (chunk[0] & 0xE0) | 0x10;
        chunk[12] &= 0xF8;
        chunk[15] = 0x50 | (chunk[15] & 0x0F);
        let ins = &mut chunk[16..21];
        match k % 5 {
            0 => (ins[0], ins[4]) = (0xE8, 0x00),
            1 => ins[3] = 0xEB,
            2 => (ins[1], ins[3]) = (0xF0 | (ins[1] & 7), 0xF8 | (ins[3] & 7)),
            3 => (ins[0], ins[3]) = (0x48 | (ins[0] & 3), (ins[3] & 0xFC) | 1),
            _ => (ins[0], ins[1]) = (0x40, ins[1] & 0x3F),
        }
    }
    out
}

fn fixture(name: &str) -> Vec<u8> {
    std::fs::read(format!("{FIXTURES}/{name}")).unwrap()
}

const ALL_FIXTURES: &[&str] = &[
    "lzma2.7z",
    "lzma.7z",
    "bzip2.7z",
    "deflate.7z",
    "copy.7z",
    "solid_plain_header.7z",
    "only_empty.7z",
    "two_folders.7z",
    "append_bad_crc.7z",
    "aes.7z",
    "aes_header.7z",
    "bcj.7z",
    "ppmd.7z",
    "default.7z",
    "zstd.7z",
    "x86_zstd.7z",
    "x86_copy.7z",
    "arm_copy.7z",
    "armt_copy.7z",
    "ppc_copy.7z",
    "sparc_copy.7z",
    "ia64_lzma2.7z",
    "delta_lzma.7z",
    "x86_delta_lzma2.7z",
    "ppmd_x86.7z",
];

const CAP: u64 = 1 << 20;

/// An archive's files as (name, bytes).
type Files = Vec<(String, Vec<u8>)>;

fn read(data: &[u8]) -> Result<Files, Error> {
    let members = sevenzip::members(data, CAP)?;
    Ok(members
        .into_iter()
        .map(|Member { name, data }| (name, data))
        .collect())
}

fn pairs(items: &[(&str, &[u8])]) -> Files {
    items
        .iter()
        .map(|(n, d)| (n.to_string(), d.to_vec()))
        .collect()
}

fn kind_code(result: Result<Files, Error>) -> (&'static str, String) {
    match result {
        Ok(members) => panic!("expected an error, got {} members", members.len()),
        Err(e) => (e.kind().code(), e.to_string()),
    }
}

#[test]
fn fixtures_are_small() {
    for name in ALL_FIXTURES {
        let len = fixture(name).len();
        assert!(len < 16 * 1024, "{name}: {len} bytes");
        assert!(sevenzip::is_7z(&fixture(name)), "{name}");
    }
    assert!(!sevenzip::is_7z(b"PK\x03\x04"));
    assert!(!sevenzip::is_7z(b"7z\xbc\xaf\x27"));
}

#[test]
fn every_supported_method_decodes() {
    let text = text();
    let cases: &[(&str, Files)] = &[
        (
            "lzma2.7z",
            pairs(&[("archive/data.pkl", PICKLE), ("hello.txt", &text)]),
        ),
        ("lzma.7z", pairs(&[("data.pkl", PICKLE)])),
        (
            "bzip2.7z",
            pairs(&[("data.pkl", PICKLE), ("hello.txt", &text)]),
        ),
        (
            "deflate.7z",
            pairs(&[("data.pkl", PICKLE), ("hello.txt", &text)]),
        ),
        (
            "copy.7z",
            pairs(&[("data.pkl", PICKLE), ("small.bin", SMALL)]),
        ),
    ];
    for (name, expected) in cases {
        assert_eq!(&read(&fixture(name)).unwrap(), expected, "{name}");
    }
}

#[test]
fn solid_folders_split_into_files_and_directories_are_skipped() {
    let text = text();
    // A plain (not encoded) header; `dir` is a directory, `dir/empty` a stream of 0 bytes.
    assert_eq!(
        read(&fixture("solid_plain_header.7z")).unwrap(),
        pairs(&[
            ("dir/a.pkl", PICKLE),
            ("dir/empty", b""),
            ("b.txt", &text),
            ("c.bin", SMALL)
        ])
    );
    assert_eq!(
        read(&fixture("only_empty.7z")).unwrap(),
        pairs(&[("empty", b"")])
    );
    // Two folders (LZMA2 with two files, then BZip2), each decoded in turn.
    assert_eq!(
        read(&fixture("two_folders.7z")).unwrap(),
        pairs(&[
            ("first.pkl", PICKLE),
            ("second.txt", &text),
            ("third.bin", SMALL)
        ])
    );
}

#[test]
fn the_callback_sees_every_member_and_can_stop_the_walk() {
    let data = fixture("two_folders.7z");
    let mut names = Vec::new();
    sevenzip::for_each_member(&data, CAP, |name, bytes| {
        names.push((name.to_owned(), bytes.len()));
        Ok(())
    })
    .unwrap();
    assert_eq!(
        names,
        [
            ("first.pkl".to_owned(), PICKLE.len()),
            ("second.txt".to_owned(), 360),
            ("third.bin".to_owned(), 10)
        ]
    );
    let stop = sevenzip::for_each_member(&data, CAP, |name, _| {
        Err(Error::archive(
            format!("stop at {name}"),
            Default::default(),
        ))
    });
    assert!(stop.unwrap_err().to_string().contains("stop at first.pkl"));
}

#[test]
fn every_filter_chain_py7zr_writes_decodes() {
    let (code, text) = (code(), text());
    let cases: &[(&str, Files)] = &[
        ("bcj.7z", pairs(&[("data.pkl", PICKLE)])),
        (
            "default.7z",
            pairs(&[("code.bin", &code), ("data.pkl", PICKLE)]),
        ),
        (
            "zstd.7z",
            pairs(&[("data.pkl", PICKLE), ("hello.txt", &text)]),
        ),
        ("x86_zstd.7z", pairs(&[("code.bin", &code)])),
        (
            "x86_copy.7z",
            pairs(&[("code.bin", &code), ("data.pkl", PICKLE)]),
        ),
        ("arm_copy.7z", pairs(&[("code.bin", &code)])),
        ("armt_copy.7z", pairs(&[("code.bin", &code)])),
        ("ppc_copy.7z", pairs(&[("code.bin", &code)])),
        ("sparc_copy.7z", pairs(&[("code.bin", &code)])),
        ("ia64_lzma2.7z", pairs(&[("code.bin", &code)])),
        ("delta_lzma.7z", pairs(&[("code.bin", &code)])),
        (
            "x86_delta_lzma2.7z",
            pairs(&[("code.bin", &code), ("hello.txt", &text)]),
        ),
    ];
    for (name, expected) in cases {
        assert_eq!(&read(&fixture(name)).unwrap(), expected, "{name}");
    }
    // Stored under a filter, the member's bytes are not the file's: each filter
    // converted instructions of `code` (the packed stream starts at byte 32).
    for name in [
        "x86_copy.7z",
        "arm_copy.7z",
        "armt_copy.7z",
        "ppc_copy.7z",
        "sparc_copy.7z",
    ] {
        let stored = &fixture(name)[32..32 + code.len()];
        let changed = stored.iter().zip(&code).filter(|(a, b)| a != b).count();
        assert!(changed >= 20, "{name}: {changed} bytes converted");
    }
}

#[test]
fn unsupported_methods_are_refused_by_name() {
    for (name, method) in [
        ("aes.7z", "7zAES"),
        ("aes_header.7z", "7zAES"),
        ("ppmd.7z", "PPMd"),
        ("ppmd_x86.7z", "PPMd"),
    ] {
        let (code, message) = kind_code(read(&fixture(name)));
        assert_eq!(code, "unsupported", "{name}: {message}");
        assert!(message.contains(method), "{name}: {message}");
    }
}

#[test]
fn the_cap_bounds_the_output() {
    let data = fixture("lzma2.7z");
    let total = (PICKLE.len() + 360) as u64;
    // The encoded header and the tables are charged too: find the least cap that works.
    let least = (0..=CAP)
        .find(|cap| sevenzip::members(&data, *cap).is_ok())
        .unwrap();
    assert!(least >= total && least < total + 4096, "{least}");
    let err = sevenzip::members(&data, least - 1).unwrap_err();
    assert_eq!(err.kind().code(), "limit", "{err}");
    assert!(err.to_string().contains("max_inflated_bytes"), "{err}");
}

#[test]
fn truncated_archives_are_errors() {
    for name in ALL_FIXTURES {
        let data = fixture(name);
        for len in 0..data.len() {
            assert!(
                sevenzip::members(&data[..len], CAP).is_err(),
                "{name} cut at {len}"
            );
        }
    }
}

// ---------------------------------------------------------------------------
// Archives made by hand, for what no writer makes.

const SIGNATURE: [u8; 6] = [0x37, 0x7A, 0xBC, 0xAF, 0x27, 0x1C];

/// The format's variable-length number.
fn num(v: u64) -> Vec<u8> {
    for n in 0..8u32 {
        let bits = 8 * n + 7 - n;
        if v < 1u64 << bits {
            let first = !(0xFFu8 >> n) | (v >> (8 * n)) as u8;
            let mut out = vec![first];
            out.extend_from_slice(&v.to_le_bytes()[..n as usize]);
            return out;
        }
    }
    let mut out = vec![0xFF];
    out.extend_from_slice(&v.to_le_bytes());
    out
}

fn crc(data: &[u8]) -> u32 {
    crc32fast::hash(data)
}

/// Set the start header (next header offset, size, CRC) and its CRC.
fn seal(file: &mut [u8], next_offset: u64, next_size: u64, next_crc: u32) {
    file[12..20].copy_from_slice(&next_offset.to_le_bytes());
    file[20..28].copy_from_slice(&next_size.to_le_bytes());
    file[28..32].copy_from_slice(&next_crc.to_le_bytes());
    let start_crc = crc(&file[12..32]);
    file[8..12].copy_from_slice(&start_crc.to_le_bytes());
}

/// A 7z file: signature header, packed streams, header.
fn archive(packed: &[u8], header: &[u8]) -> Vec<u8> {
    let mut file = SIGNATURE.to_vec();
    file.extend_from_slice(&[0, 4]);
    file.resize(32, 0);
    file.extend_from_slice(packed);
    file.extend_from_slice(header);
    seal(
        &mut file,
        packed.len() as u64,
        header.len() as u64,
        crc(header),
    );
    file
}

/// Recompute the next header's CRC (and the start header's) after an edit.
fn reseal(file: &mut [u8]) {
    let offset = u64::from_le_bytes(file[12..20].try_into().unwrap());
    let size = u64::from_le_bytes(file[20..28].try_into().unwrap());
    let start = 32 + offset as usize;
    let next_crc = crc(&file[start..start + size as usize]);
    seal(file, offset, size, next_crc);
}

fn cat(parts: &[&[u8]]) -> Vec<u8> {
    parts.concat()
}

fn utf16z(name: &str) -> Vec<u8> {
    let mut out: Vec<u8> = name.encode_utf16().flat_map(u16::to_le_bytes).collect();
    out.extend_from_slice(&[0, 0]);
    out
}

fn bits(flags: &[bool]) -> Vec<u8> {
    let mut out = vec![0u8; flags.len().div_ceil(8)];
    for (i, f) in flags.iter().enumerate() {
        if *f {
            out[i / 8] |= 0x80 >> (i % 8);
        }
    }
    out
}

/// A property of FilesInfo: id, size, body.
fn property(id: u8, body: &[u8]) -> Vec<u8> {
    cat(&[&[id], &num(body.len() as u64), body])
}

/// A plain header of Copy folders, one per stored file, with folder CRCs;
/// `entries` are (name, Some(bytes)) for files with data, (name, None) for
/// directories and (name, Some(b"")) stored as empty files (no stream).
fn copy_archive(entries: &[(&str, Option<&[u8]>)]) -> Vec<u8> {
    let streams: Vec<&[u8]> = entries
        .iter()
        .filter_map(|(_, d)| d.filter(|d| !d.is_empty()))
        .collect();
    let packed = streams.concat();
    let mut header = vec![0x01, 0x04];
    // PackInfo
    header.extend(cat(&[
        &[0x06],
        &num(0),
        &num(streams.len() as u64),
        &[0x09],
    ]));
    for s in &streams {
        header.extend(num(s.len() as u64));
    }
    header.push(0x00);
    // UnpackInfo: one Copy coder per folder.
    header.extend(cat(&[&[0x07, 0x0B], &num(streams.len() as u64), &[0x00]]));
    for _ in &streams {
        header.extend([0x01, 0x01, 0x00]);
    }
    header.push(0x0C);
    for s in &streams {
        header.extend(num(s.len() as u64));
    }
    header.extend([0x0A, 0x01]);
    for s in &streams {
        header.extend(crc(s).to_le_bytes());
    }
    header.extend([0x00, 0x00]);
    // FilesInfo
    header.push(0x05);
    header.extend(num(entries.len() as u64));
    let empty: Vec<bool> = entries
        .iter()
        .map(|(_, d)| d.is_none_or(|d| d.is_empty()))
        .collect();
    if empty.iter().any(|e| *e) {
        header.extend(property(0x0E, &bits(&empty)));
        let empty_files: Vec<bool> = entries
            .iter()
            .filter(|(_, d)| d.is_none_or(|d| d.is_empty()))
            .map(|(_, d)| d.is_some())
            .collect();
        header.extend(property(0x0F, &bits(&empty_files)));
    }
    let mut names = vec![0u8];
    for (name, _) in entries {
        names.extend(utf16z(name));
    }
    header.extend(property(0x11, &names));
    header.extend([0x00, 0x00]);
    archive(&packed, &header)
}

#[test]
fn hand_made_archives_decode() {
    let data = copy_archive(&[
        ("a", Some(b"first")),
        ("dir", None),
        ("e", Some(b"")),
        ("b", Some(b"second")),
    ]);
    assert_eq!(
        read(&data).unwrap(),
        pairs(&[("a", b"first"), ("e", b""), ("b", b"second")])
    );
    // An archive with no header at all is empty.
    let mut empty = SIGNATURE.to_vec();
    empty.extend_from_slice(&[0, 4]);
    empty.resize(32, 0);
    seal(&mut empty, 0, 0, 0);
    assert_eq!(read(&empty).unwrap(), []);
    // A header of no streams and no files.
    assert_eq!(read(&archive(b"", &[0x01, 0x00])).unwrap(), []);
}

#[test]
fn signature_header_errors() {
    let good = copy_archive(&[("a", Some(b"x"))]);
    // Not 7z; too short for the signature header.
    assert_eq!(kind_code(read(b"PK\x03\x04")).0, "malformed_archive");
    assert_eq!(kind_code(read(&good[..20])).0, "malformed_archive");
    // Version 1.x.
    let mut v1 = good.clone();
    v1[6] = 1;
    assert_eq!(kind_code(read(&v1)).0, "unsupported");
    // Start header CRC.
    let mut bad = good.clone();
    bad[8] ^= 1;
    assert!(kind_code(read(&bad)).1.contains("start header CRC"));
    // Next header CRC.
    let mut bad = good.clone();
    bad[28] ^= 1;
    let start_crc = crc(&bad[12..32]);
    bad[8..12].copy_from_slice(&start_crc.to_le_bytes());
    assert!(kind_code(read(&bad)).1.contains("next header CRC"));
    // Next header offset and size past the file, and overflowing.
    for (offset, size) in [
        (0, 1 << 40),
        (1 << 40, 1),
        (u64::MAX, 2),
        (u64::MAX - 31, 1),
        (1, u64::MAX),
        (good.len() as u64 - 32, 1),
    ] {
        let mut bad = good.clone();
        seal(&mut bad, offset, size, 0);
        let (code, message) = kind_code(read(&bad));
        assert_eq!(code, "malformed_archive", "{offset} {size}: {message}");
        assert!(
            message.contains("past the end of the file"),
            "{offset} {size}: {message}"
        );
    }
    // Offset 0 with a size but no header there: a header must start with 0x01 or 0x17.
    let mut bad = good.clone();
    let first = crc(&bad[32..33]);
    seal(&mut bad, 0, 1, first);
    assert_eq!(kind_code(read(&bad)).0, "malformed_archive");
}

/// A plain header from its parts, in an archive whose packed data is `packed`.
fn with_header(packed: &[u8], parts: &[&[u8]]) -> Vec<u8> {
    archive(packed, &parts.concat())
}

#[test]
fn huge_counts_are_refused_before_anything_is_allocated() {
    let big = 1u64 << 40;
    let cases: Vec<(&str, Vec<u8>)> = vec![
        (
            "packed streams",
            with_header(
                b"x",
                &[&[0x01, 0x04, 0x06], &num(0), &num(big), &[0x09, 0x01, 0x00]],
            ),
        ),
        (
            "folders",
            with_header(
                b"",
                &[
                    &[0x01, 0x04, 0x07, 0x0B],
                    &num(big),
                    &[0x00, 0x01, 0x01, 0x00],
                ],
            ),
        ),
        (
            "coders",
            with_header(
                b"",
                &[
                    &[0x01, 0x04, 0x07, 0x0B, 0x01, 0x00],
                    &num(big),
                    &[0x01, 0x00],
                ],
            ),
        ),
        (
            "coder properties",
            with_header(
                b"",
                &[
                    &[0x01, 0x04, 0x07, 0x0B, 0x01, 0x00, 0x01, 0x21, 0x21],
                    &num(big),
                    &[0x00],
                ],
            ),
        ),
        (
            "files",
            with_header(b"", &[&[0x01, 0x05], &num(big), &[0x00, 0x00]]),
        ),
        (
            "file property size",
            with_header(b"", &[&[0x01, 0x05, 0x01, 0x11], &num(big), &[0x00]]),
        ),
        (
            "archive property size",
            with_header(b"", &[&[0x01, 0x02, 0x01], &num(u64::MAX), &[0x00]]),
        ),
        (
            "substreams",
            with_header(
                b"x",
                &[
                    &[0x01, 0x04, 0x06, 0x00, 0x01, 0x09, 0x01, 0x00],
                    &[0x07, 0x0B, 0x01, 0x00, 0x01, 0x01, 0x00, 0x0C, 0x01, 0x00],
                    &[0x08, 0x0D],
                    &num(big),
                    &[0x09, 0x01, 0x00, 0x00, 0x00],
                ],
            ),
        ),
        (
            "substreams (two folders adding up past u64)",
            with_header(
                b"xy",
                &[
                    &[0x01, 0x04, 0x06, 0x00, 0x02, 0x09, 0x01, 0x01, 0x00],
                    &[
                        0x07, 0x0B, 0x02, 0x00, 0x01, 0x01, 0x00, 0x01, 0x01, 0x00, 0x0C, 0x01,
                        0x01, 0x00,
                    ],
                    &[0x08, 0x0D],
                    &num(u64::MAX),
                    &num(u64::MAX),
                    &[0x09, 0x00, 0x00, 0x00],
                ],
            ),
        ),
        (
            "names",
            with_header(
                b"",
                &[&[0x01, 0x05], &num(3), &property(0x11, &[0, b'a', 0, 0, 0])],
            ),
        ),
    ];
    for (what, data) in cases {
        let (code, message) = kind_code(read(&data));
        assert_eq!(code, "malformed_archive", "{what}: {message}");
        assert!(
            message.contains("cannot fit in the") || message.contains("reaches past the"),
            "{what}: {message}"
        );
    }
}

#[test]
fn a_declared_size_past_the_cap_is_a_limit_before_decoding() {
    // One Copy folder that claims 2^50 bytes from one packed byte.
    let data = with_header(
        b"x",
        &[
            &[0x01, 0x04, 0x06, 0x00, 0x01, 0x09, 0x01, 0x00],
            &[0x07, 0x0B, 0x01, 0x00, 0x01, 0x01, 0x00, 0x0C],
            &num(1 << 50),
            &[0x00, 0x00],
            &[0x05, 0x01],
            &property(0x11, &cat(&[&[0], &utf16z("a")])),
            &[0x00, 0x00],
        ],
    );
    let err = sevenzip::members(&data, CAP).unwrap_err();
    assert!(err.is_limit(), "{err}");
    // Within the cap the size is still a lie: a Copy stream of one byte.
    let err = sevenzip::members(&data, u64::MAX).unwrap_err();
    assert_eq!(err.kind().code(), "malformed_archive", "{err}");
}

/// A plain header of one folder whose coders are `coders` (each as the folder
/// record writes it: flags, id, stream counts, properties), then `links` (its
/// bind pairs, input then output, and packed-stream indices if it lists any),
/// reading the packed streams `packs` and listing `sizes` for the coders'
/// outputs; one file, `a`, of the folder's main output.
fn folder_archive(packs: &[&[u8]], coders: &[&[u8]], links: &[u64], sizes: &[u64]) -> Vec<u8> {
    let mut header = vec![0x01, 0x04, 0x06];
    header.extend(num(0));
    header.extend(num(packs.len() as u64));
    header.push(0x09);
    for p in packs {
        header.extend(num(p.len() as u64));
    }
    header.extend([0x00, 0x07, 0x0B, 0x01, 0x00]);
    header.extend(num(coders.len() as u64));
    for c in coders {
        header.extend_from_slice(c);
    }
    for l in links {
        header.extend(num(*l));
    }
    header.push(0x0C);
    for s in sizes {
        header.extend(num(*s));
    }
    header.extend([0x00, 0x00, 0x05, 0x01]);
    header.extend(property(0x11, &cat(&[&[0], &utf16z("a")])));
    header.extend([0x00, 0x00]);
    archive(&packs.concat(), &header)
}

// Coder records: flags (id length, 0x10 stream counts follow, 0x20 properties
// follow), id, then what the flags announce.
const COPY: &[u8] = &[0x01, 0x00];
const X86: &[u8] = &[0x04, 0x03, 0x03, 0x01, 0x03];
const DELTA_1: &[u8] = &[0x21, 0x03, 0x01, 0x00];

#[test]
fn chains_decode_in_the_order_their_bind_pairs_give() {
    // Copy, then x86: bind pair input 1 from output 0, the packed stream into input 0.
    let data = folder_archive(
        &[b"\xE8\x00\x01\x00\x00\x90"],
        &[COPY, X86],
        &[1, 0],
        &[6, 6],
    );
    assert_eq!(
        read(&data).unwrap(),
        pairs(&[("a", b"\xE8\xFB\x00\x00\x00\x90")])
    );
    // Copy, then Delta (distance 1), then x86: each coder reads the one before;
    // the bind pairs may come in any order.
    let data = folder_archive(
        &[b"\xE8\x00\x00\x01\x00\x00"],
        &[COPY, DELTA_1, X86],
        &[2, 1, 1, 0],
        &[6, 6, 6],
    );
    // Delta gives E8 E8 E8 E9 E9 E9; x86 converts nothing in six bytes whose
    // fourth following byte is no sign byte.
    assert_eq!(
        read(&data).unwrap(),
        pairs(&[("a", b"\xE8\xE8\xE8\xE9\xE9\xE9")])
    );
}

#[test]
fn chains_laid_out_otherwise_are_refused_by_name() {
    let cases: Vec<(&str, Vec<u8>, &str)> = vec![
        (
            "7-Zip's reverse order: x86's output into Copy",
            folder_archive(&[b"abcdef"], &[COPY, X86], &[0, 1], &[6, 6]),
            "bound otherwise than in a chain",
        ),
        (
            "a coder's output into its own input",
            folder_archive(&[b"abcdef"], &[COPY, X86], &[1, 1], &[6, 6]),
            "bound otherwise than in a chain",
        ),
        (
            "a filter first",
            folder_archive(&[b"abcdef"], &[X86, COPY], &[1, 0], &[6, 6]),
            "only a decompressor",
        ),
        (
            "two decompressors",
            folder_archive(&[b"abcdef"], &[COPY, COPY], &[1, 0], &[6, 6]),
            "only a decompressor",
        ),
        (
            "five coders",
            folder_archive(
                &[b"abcdef"],
                &[COPY, DELTA_1, DELTA_1, DELTA_1, DELTA_1],
                &[1, 0, 2, 1, 3, 2, 4, 3],
                &[6, 6, 6, 6, 6],
            ),
            "at most 4",
        ),
        (
            "a coder of two inputs",
            folder_archive(
                &[b"abc", b"def"],
                &[&[0x11, 0x00, 0x02, 0x01], X86],
                &[2, 0, 0, 1],
                &[6, 6],
            ),
            "coder 0 has 2 inputs and 1 outputs",
        ),
        (
            "a method no filter of py7zr's",
            folder_archive(&[b"abcdef"], &[COPY, &[0x01, 0x0A]], &[1, 0], &[6, 6]),
            "the 7z method BCJ (ARM64) (id 0A) in a folder of 2 coders (Copy (id 00)",
        ),
        (
            "BCJ2, four inputs",
            folder_archive(
                &[b"a", b"b", b"c", b"d"],
                &[&[0x14, 0x03, 0x03, 0x01, 0x1B, 0x04, 0x01]],
                &[0, 1, 2, 3],
                &[4],
            ),
            "the 7z method BCJ2 (id 0303011B)",
        ),
        (
            "x86 with a start offset",
            folder_archive(
                &[b"abcdef"],
                &[
                    COPY,
                    &[0x24, 0x03, 0x03, 0x01, 0x03, 0x04, 0x10, 0x00, 0x00, 0x00],
                ],
                &[1, 0],
                &[6, 6],
            ),
            "BCJ (x86) (id 03030103) with 4 bytes of properties",
        ),
        (
            "Delta without its distance",
            folder_archive(&[b"abcdef"], &[COPY, &[0x01, 0x03]], &[1, 0], &[6, 6]),
            "Delta (id 03) with 0 bytes of properties (1 expected)",
        ),
        (
            "Zstandard without its properties",
            folder_archive(&[b"abcdef"], &[&[0x04, 0x04, 0xF7, 0x11, 0x01]], &[], &[6]),
            "Zstandard properties of 0 bytes",
        ),
    ];
    for (what, data, says) in cases {
        let (code, message) = kind_code(read(&data));
        let expected = if says.starts_with("Zstandard") {
            "malformed_archive"
        } else {
            "unsupported"
        };
        assert_eq!(code, expected, "{what}: {message}");
        assert!(message.contains(says), "{what}: {message}");
    }
}

#[test]
fn a_filter_keeps_the_length() {
    // Copy's output listed as 4 bytes, Delta's as 5.
    let data = folder_archive(&[b"abcd"], &[COPY, DELTA_1], &[1, 0], &[4, 5]);
    let (code, message) = kind_code(read(&data));
    assert_eq!(code, "malformed_archive", "{message}");
    assert!(message.contains("keep the length"), "{message}");
}

/// One LZMA2 folder of the packed bytes `chunks` declaring `size` bytes, holding one file.
fn lzma2_archive(chunks: &[u8], size: u64) -> Vec<u8> {
    with_header(
        chunks,
        &[
            &[0x01, 0x04, 0x06, 0x00, 0x01, 0x09],
            &num(chunks.len() as u64),
            &[0x00],
            &[0x07, 0x0B, 0x01, 0x00, 0x01, 0x21, 0x21, 0x01, 0x18, 0x0C],
            &num(size),
            &[0x00, 0x00],
            &[0x05, 0x01],
            &property(0x11, &cat(&[&[0], &utf16z("a")])),
            &[0x00, 0x00],
        ],
    )
}

#[test]
fn lzma2_chunks_must_declare_the_folder_size() {
    // One uncompressed chunk of 5 bytes, then the end byte.
    let chunks = b"\x01\x00\x04hello\x00";
    assert_eq!(
        read(&lzma2_archive(chunks, 5)).unwrap(),
        pairs(&[("a", b"hello")])
    );
    for size in [4, 6, 1 << 19] {
        let (code, message) = kind_code(read(&lzma2_archive(chunks, size)));
        assert_eq!(code, "malformed_archive", "{size}: {message}");
        assert!(message.contains("declare 5 bytes"), "{message}");
    }
    // A chunk that claims 2 MiB from a few bytes, with a folder that says so too:
    // past a small cap it is a limit, before anything is decoded.
    let bomb = b"\xFF\xFF\xFF\x00\x05\x00\x00\x00\x00\x00\x00\x00";
    let err = sevenzip::members(&lzma2_archive(bomb, 1 << 21), 1000).unwrap_err();
    assert!(err.is_limit(), "{err}");
    // With room, the chunk is a lie (its packed bytes run out).
    assert!(sevenzip::members(&lzma2_archive(bomb, 1 << 21), 1 << 22).is_err());
    // Missing end byte, bad control byte, bytes after the end.
    for chunks in [
        &b"\x01\x00\x04hello"[..],
        b"\x03\x00\x04hello\x00",
        b"\x01\x00\x04hello\x00\x00",
    ] {
        assert!(read(&lzma2_archive(chunks, 5)).is_err(), "{chunks:?}");
    }
}

#[test]
fn crc_mismatches_are_malformed() {
    // A folder CRC that disagrees with the stored bytes.
    let mut data = copy_archive(&[("a", Some(b"first"))]);
    let at = 32; // the packed byte 'f'
    data[at] = b'F';
    let (code, message) = kind_code(read(&data));
    assert_eq!(code, "malformed_archive");
    assert!(message.contains("CRC mismatch"), "{message}");
    // py7zr's Copy archive lists substream CRCs: change a stored byte of the second file.
    let mut copy = fixture("copy.7z");
    let at = 32 + PICKLE.len() + 3;
    copy[at] ^= 0x20;
    let (code, message) = kind_code(read(&copy));
    assert_eq!(code, "malformed_archive");
    assert!(message.contains("CRC"), "{message}");
    // py7zr's append mode lists wrong substream sizes (its own reader fails too).
    let (code, message) = kind_code(read(&fixture("append_bad_crc.7z")));
    assert_eq!(code, "malformed_archive");
    assert!(message.contains("CRC mismatch"), "{message}");
    // A compressed payload changed: the decoder fails or the CRC does.
    for name in ["lzma2.7z", "lzma.7z", "bzip2.7z", "deflate.7z"] {
        let mut data = fixture(name);
        data[40] ^= 0x01;
        assert!(read(&data).is_err(), "{name}");
    }
}

#[test]
fn structural_lies_are_malformed() {
    // Two streams, but one file.
    let data = with_header(
        b"ab",
        &[
            &[0x01, 0x04, 0x06, 0x00, 0x02, 0x09, 0x01, 0x01, 0x00],
            &[
                0x07, 0x0B, 0x02, 0x00, 0x01, 0x01, 0x00, 0x01, 0x01, 0x00, 0x0C, 0x01, 0x01, 0x00,
                0x00,
            ],
            &[0x05, 0x01],
            &property(0x11, &cat(&[&[0], &utf16z("a")])),
            &[0x00, 0x00],
        ],
    );
    assert!(kind_code(read(&data)).1.contains("1 files have data"));
    // Folders that read more packed streams than the pack info lists.
    let data = with_header(
        b"ab",
        &[
            &[0x01, 0x04, 0x06, 0x00, 0x01, 0x09, 0x02, 0x00],
            &[
                0x07, 0x0B, 0x02, 0x00, 0x01, 0x01, 0x00, 0x01, 0x01, 0x00, 0x0C, 0x01, 0x01, 0x00,
                0x00,
            ],
        ],
    );
    assert!(kind_code(read(&data)).1.contains("read 2 packed streams"));
    // A packed stream that overlaps the header.
    let data = with_header(
        b"x",
        &[
            &[0x01, 0x04, 0x06, 0x00, 0x01, 0x09, 0x05, 0x00],
            &[
                0x07, 0x0B, 0x01, 0x00, 0x01, 0x01, 0x00, 0x0C, 0x05, 0x00, 0x00,
            ],
            &[0x05, 0x01],
            &property(0x11, &cat(&[&[0], &utf16z("a")])),
            &[0x00, 0x00],
        ],
    );
    assert!(kind_code(read(&data))
        .1
        .contains("past the start of the header"));
    // Bytes after the header's end.
    let data = with_header(b"", &[&[0x01, 0x00, 0x00]]);
    assert_eq!(kind_code(read(&data)).0, "malformed_archive");
    // Additional streams, external folders: unsupported.
    let data = with_header(b"", &[&[0x01, 0x03, 0x00, 0x00]]);
    assert_eq!(kind_code(read(&data)).0, "unsupported");
    // An encoded header that decodes to another encoded header.
    let inner = [0x17u8, 0x00];
    let data = with_header(
        &inner,
        &[
            &[0x17, 0x06, 0x00, 0x01, 0x09, 0x02, 0x00],
            &[
                0x07, 0x0B, 0x01, 0x00, 0x01, 0x01, 0x00, 0x0C, 0x02, 0x00, 0x00,
            ],
        ],
    );
    assert!(kind_code(read(&data)).1.contains("one level"));
    // A file name that is not UTF-16.
    let data = with_header(
        b"",
        &[
            &[0x01, 0x05, 0x01],
            &property(0x11, &[0, 0x00, 0xD8, 0, 0]),
            &[0x00, 0x00],
        ],
    );
    assert!(kind_code(read(&data)).1.contains("UTF-16"));
}

// ---------------------------------------------------------------------------
// Random damage: never a panic, and never more output than the cap.

fn check_bounded(data: &[u8], cap: u64) {
    let mut total = 0u64;
    let result = sevenzip::for_each_member(data, cap, |_, bytes| {
        total += bytes.len() as u64;
        Ok(())
    });
    if result.is_ok() {
        assert!(total <= cap, "{total} > {cap}");
    }
}

/// Where the next header lies, for damage that should reach the parser.
fn header_span(data: &[u8]) -> std::ops::Range<usize> {
    let offset = u64::from_le_bytes(data[12..20].try_into().unwrap()) as usize;
    let size = u64::from_le_bytes(data[20..28].try_into().unwrap()) as usize;
    32 + offset..32 + offset + size
}

#[test]
fn every_single_byte_change_of_a_plain_header_is_handled() {
    for name in [
        "copy.7z",
        "solid_plain_header.7z",
        "only_empty.7z",
        "x86_copy.7z",
    ] {
        let good = fixture(name);
        for at in header_span(&good) {
            for value in [
                0x00,
                0x01,
                0x7F,
                0x80,
                0xFF,
                good[at] ^ 0x01,
                good[at].wrapping_add(1),
            ] {
                let mut data = good.clone();
                data[at] = value;
                reseal(&mut data);
                check_bounded(&data, CAP);
                check_bounded(&data, 100);
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn random_damage_never_panics(
        which in 0..ALL_FIXTURES.len(),
        flips in proptest::collection::vec((any::<usize>(), any::<u8>()), 1..6),
        in_header in any::<bool>(),
        fix_crcs in any::<bool>(),
        cap in prop_oneof![Just(CAP), 0u64..2000],
    ) {
        let mut data = fixture(ALL_FIXTURES[which]);
        let span = if in_header { header_span(&data) } else { 0..data.len() };
        for (at, value) in flips {
            let at = span.start + at % span.len();
            data[at] = value;
        }
        if fix_crcs && in_header {
            reseal(&mut data);
        }
        check_bounded(&data, cap);
    }

    #[test]
    fn random_bytes_after_the_signature_never_panic(
        tail in proptest::collection::vec(any::<u8>(), 0..200),
        header in proptest::collection::vec(any::<u8>(), 1..64),
    ) {
        let mut data = archive(&tail, &header);
        check_bounded(&data, CAP);
        data.truncate(32 + tail.len());
        check_bounded(&data, CAP);
    }
}
