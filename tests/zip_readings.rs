//! Archives that zip readers read apart: a load refuses every one, a scan reads
//! every reading and reports the payload only one of them reaches.

mod common;

use std::sync::Arc;

use common::zipw::{self, Options};
use tensorplay::archive::source::Source;
use tensorplay::archive::zip::read_entries;
use tensorplay::checkpoint::{self, LoadOptions};
use tensorplay::scan::{scan_bytes, unsafe_globals, ScanOptions, Verdict};

const BENIGN: &[u8] = b"\x80\x02}q\x00.";
const HOSTILE: &[u8] = b"\x80\x02cos\nsystem\nX\x02\x00\x00\x00ls\x85R.";

/// A zip written part by part: local headers with their payloads, then any
/// directories and end records the test wants, wherever it wants them.
#[derive(Default)]
struct Builder {
    out: Vec<u8>,
}

/// A payload written: what a directory record needs to point at it.
#[derive(Clone)]
struct Written {
    name: String,
    offset: u32,
    size: u32,
}

impl Builder {
    fn put(&mut self, bytes: &[u8]) -> usize {
        let at = self.out.len();
        self.out.extend_from_slice(bytes);
        at
    }

    fn entry(&mut self, name: &str, data: &[u8]) -> Written {
        let offset = self.out.len() as u32;
        let mut h = vec![];
        h.extend_from_slice(&0x0403_4b50u32.to_le_bytes());
        h.extend_from_slice(&[20, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
        h.extend_from_slice(&(data.len() as u32).to_le_bytes());
        h.extend_from_slice(&(data.len() as u32).to_le_bytes());
        h.extend_from_slice(&(name.len() as u16).to_le_bytes());
        h.extend_from_slice(&0u16.to_le_bytes());
        h.extend_from_slice(name.as_bytes());
        h.extend_from_slice(data);
        self.put(&h);
        Written {
            name: name.to_owned(),
            offset,
            size: data.len() as u32,
        }
    }

    /// A central directory of `entries`: its offset and size.
    fn directory(&mut self, entries: &[Written]) -> (u32, u32) {
        let start = self.out.len();
        for e in entries {
            let mut r = vec![];
            r.extend_from_slice(&0x0201_4b50u32.to_le_bytes());
            r.extend_from_slice(&[20, 0, 20, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
            r.extend_from_slice(&e.size.to_le_bytes());
            r.extend_from_slice(&e.size.to_le_bytes());
            r.extend_from_slice(&(e.name.len() as u16).to_le_bytes());
            r.extend_from_slice(&[0; 12]);
            r.extend_from_slice(&e.offset.to_le_bytes());
            r.extend_from_slice(e.name.as_bytes());
            self.put(&r);
        }
        (start as u32, (self.out.len() - start) as u32)
    }

    fn end(&mut self, count: u16, (offset, size): (u32, u32), comment_len: u16) -> usize {
        let mut r = vec![];
        r.extend_from_slice(&0x0605_4b50u32.to_le_bytes());
        r.extend_from_slice(&[0, 0, 0, 0]);
        r.extend_from_slice(&count.to_le_bytes());
        r.extend_from_slice(&count.to_le_bytes());
        r.extend_from_slice(&size.to_le_bytes());
        r.extend_from_slice(&offset.to_le_bytes());
        r.extend_from_slice(&comment_len.to_le_bytes());
        self.put(&r)
    }
}

fn load(data: &[u8]) -> Result<(), String> {
    let source = Arc::new(Source::from_vec(data.to_vec()));
    checkpoint::open(source, &LoadOptions::default())
        .map(drop)
        .map_err(|e| e.to_string())
}

/// The file is refused by a load and by the strict check of the scan, and its
/// payload, which one reading reaches, is found.
fn assert_read_apart(data: &[u8], why: &str) {
    let refusal = load(data).expect_err("a load accepted an archive readers read apart");
    assert!(
        refusal.contains("zip readers would read this archive apart"),
        "{refusal}"
    );
    assert!(refusal.contains(why), "{refusal}");
    let report = scan_bytes(data, &ScanOptions::default());
    assert_eq!(report.verdict(), Verdict::Unsafe, "{report:?}");
    assert_eq!(report.names(), ["os.system"]);
    assert!(
        report.problems.iter().any(|p| p.to_string().contains(why)),
        "{:?}",
        report.problems
    );
    let globals = unsafe_globals(data, &ScanOptions::default()).unwrap();
    assert_eq!(globals, ["os.system"]);
}

#[test]
fn an_end_record_that_counts_one_entry_short() {
    let mut b = Builder::default();
    let benign = b.entry("archive/data.pkl", BENIGN);
    let version = b.entry("archive/version", b"3\n");
    let hostile = b.entry("archive/data.pkl", HOSTILE);
    let dir = b.directory(&[benign, version, hostile]);
    b.end(2, dir, 0);
    assert_read_apart(&b.out, "the end record counts 2 entries");
}

#[test]
fn a_directory_that_ends_before_its_end_record() {
    // Python's zipfile takes the gap for a prefix and moves every offset by it:
    // its reading of the one record lands on the hostile entry right after the
    // benign one.
    let mut b = Builder::default();
    let benign = b.entry("archive/data.pkl", BENIGN);
    let pad = b.out.len();
    b.entry("archive/data.pkl", HOSTILE);
    let dir = b.directory(&[benign]);
    b.put(&vec![0u8; pad]);
    b.end(1, dir, 0);
    assert_read_apart(&b.out, "Python's zipfile moves every offset");
}

#[test]
fn a_zip64_end_record_that_disagrees_with_the_classic_one() {
    let mut b = Builder::default();
    let benign = b.entry("archive/data.pkl", BENIGN);
    let version = b.entry("archive/version", b"3\n");
    let hostile = b.entry("archive/data.pkl", HOSTILE);
    let classic = b.directory(&[hostile, version.clone()]);
    let wide = b.directory(&[benign, version]);
    let z64 = b.out.len() as u64;
    let mut r = vec![];
    r.extend_from_slice(&0x0606_4b50u32.to_le_bytes());
    r.extend_from_slice(&44u64.to_le_bytes());
    r.extend_from_slice(&[45, 0, 45, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
    r.extend_from_slice(&2u64.to_le_bytes());
    r.extend_from_slice(&2u64.to_le_bytes());
    r.extend_from_slice(&u64::from(wide.1).to_le_bytes());
    r.extend_from_slice(&u64::from(wide.0).to_le_bytes());
    r.extend_from_slice(&0x0706_4b50u32.to_le_bytes());
    r.extend_from_slice(&0u32.to_le_bytes());
    r.extend_from_slice(&z64.to_le_bytes());
    r.extend_from_slice(&1u32.to_le_bytes());
    b.put(&r);
    b.end(2, classic, 0);
    assert_read_apart(&b.out, "the ZIP64 end record and the classic one");
}

#[test]
fn an_end_record_in_the_comment_of_another() {
    // The real end record's comment holds a second directory and end record,
    // then five bytes: the last end record does not reach the file's end, the
    // real one does.
    let mut b = Builder::default();
    let benign = b.entry("archive/data.pkl", BENIGN);
    let version = b.entry("archive/version", b"3\n");
    let hostile = b.entry("archive/data.pkl", HOSTILE);
    let real = b.directory(&[hostile, version.clone()]);
    let real_end = b.end(2, real, 0);
    let fake = b.directory(&[benign, version]);
    b.end(2, fake, 0);
    b.put(b"tail!");
    let comment = (b.out.len() - real_end - 22) as u16;
    b.out[real_end + 20..real_end + 22].copy_from_slice(&comment.to_le_bytes());
    assert_read_apart(&b.out, "lies in the comment of another");
}

#[test]
fn a_local_header_the_directory_does_not_list() {
    let mut b = Builder::default();
    let benign = b.entry("archive/data.pkl", BENIGN);
    b.entry("archive/extra.pkl", HOSTILE);
    let version = b.entry("archive/version", b"3\n");
    let dir = b.directory(&[benign, version]);
    b.end(2, dir, 0);
    // torch's get_unsafe_globals_in_checkpoint reads the directory and the one
    // local header of data.pkl, no other: the load and the scan see the entry.
    let refusal = load(&b.out).expect_err("accepted");
    assert!(
        refusal.contains("that the central directory does not list"),
        "{refusal}"
    );
    let report = scan_bytes(&b.out, &ScanOptions::default());
    assert_eq!(report.names(), ["os.system"]);
    assert_eq!(report.verdict(), Verdict::Unsafe);
}

#[test]
fn another_end_record_further_back_is_read_by_a_scan() {
    // Every reader that loads checkpoints takes the last end record (the benign
    // directory); a reader searching forward takes the first.
    let mut b = Builder::default();
    let benign = b.entry("archive/data.pkl", BENIGN);
    let version = b.entry("archive/version", b"3\n");
    let hostile = b.entry("archive/data.pkl", HOSTILE);
    let first = b.directory(&[hostile, version.clone()]);
    b.end(2, first, 0);
    let last = b.directory(&[benign, version]);
    b.end(2, last, 0);
    let report = scan_bytes(&b.out, &ScanOptions::default());
    assert_eq!(report.verdict(), Verdict::Unsafe, "{report:?}");
    assert_eq!(report.names(), ["os.system"]);
    assert!(
        (report.problems.iter()).any(|p| p.kind == "parser_disagreement"
            && p.to_string().contains("another end record at byte")),
        "{:?}",
        report.problems
    );
}

#[test]
fn archives_writers_make_are_read_alike() {
    let written = zipw::checkpoint(BENIGN, &[("data/0", &[1u8; 16][..])]);
    let plain = zipw::write(
        &[
            zipw::Entry::new("a.pkl", BENIGN),
            zipw::Entry::new("b.txt", b"hi"),
        ],
        Options::default(),
    );
    for data in [written, plain] {
        let report = scan_bytes(&data, &ScanOptions::default());
        assert!(report.problems.is_empty(), "{:?}", report.problems);
    }
    // Every zip torch wrote in the fixtures, in every version and layout.
    let folder = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/torch");
    let mut zips = 0;
    for file in std::fs::read_dir(folder).unwrap() {
        let data = std::fs::read(file.unwrap().path()).unwrap();
        if !data.starts_with(b"PK\x03\x04") {
            continue;
        }
        let index = read_entries(&data, 1 << 20).unwrap();
        assert_eq!(index.disagreements, [], "{:?}", index.entries.first());
        zips += 1;
    }
    assert!(zips >= 10, "{zips}");
}

/// Checkpoints written one after another into one stream, as a distributed
/// checkpoint's `.distcp` files are: the end records read from the file's end are
/// the last archive's, whose ZIP64 locator points into another one.
#[test]
fn archives_one_after_another_are_each_read() {
    use tensorplay::archive::zip::{archive_sequence, first_archive_end};
    let first = zipw::checkpoint(BENIGN, &[]);
    let second = zipw::checkpoint(HOSTILE, &[]);
    let stream = [&first[..], &second[..]].concat();
    assert_eq!(first_archive_end(&stream, 100), Some(first.len()));
    assert_eq!(
        archive_sequence(&stream, 100),
        Some(vec![0..first.len(), first.len()..stream.len()])
    );
    assert_eq!(archive_sequence(&first, 100), None);
    let report = scan_bytes(&stream, &ScanOptions::default());
    assert_eq!(report.verdict(), Verdict::Unsafe, "{report:?}");
    assert!(report
        .findings
        .iter()
        .any(|f| f.name == "posix.system" || f.name == "os.system"));
    // Followed by anything but an archive, the file is not a sequence.
    let trailing = [&first[..], b"junk"].concat();
    assert_eq!(archive_sequence(&trailing, 100), None);
}
