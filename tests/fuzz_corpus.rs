//! Replays every input of `fuzz/corpus/<target>.tar.zst` through the harness that
//! target fuzzes (`tensorplay::fuzzing`), so `cargo test` checks every crash,
//! timeout and out-of-memory ever found (the `regress-*` members) and the whole
//! minimised corpus on the stable toolchain, without cargo-fuzz.
//!
//! The corpus is kept as one archive per target (`fuzz/corpus.sh pack` writes it:
//! a ustar tar of flat file names, zstd-compressed) so that the source tree holds
//! seven files rather than twenty thousand. It is unpacked here in memory, with
//! ruzstd (already the core's zstd decoder) and the few lines of ustar below, not
//! with the core's own tar reader: the replay must not depend on the code it tests.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use tensorplay::fuzzing;

fn archive_path(target: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fuzz/corpus")
        .join(format!("{target}.tar.zst"))
}

/// The zstd frames of `data`, one after another, decompressed.
fn unzstd(data: &[u8], archive: &str) -> Vec<u8> {
    let mut input = data;
    let mut out = Vec::new();
    while !input.is_empty() {
        let mut decoder = ruzstd::decoding::StreamingDecoder::new(&mut input)
            .unwrap_or_else(|e| panic!("{archive}: not a zstd stream: {e}"));
        decoder
            .read_to_end(&mut out)
            .unwrap_or_else(|e| panic!("{archive}: corrupt zstd stream: {e}"));
    }
    out
}

fn octal(field: &[u8], archive: &str, at: usize) -> usize {
    let text = std::str::from_utf8(field)
        .unwrap_or_else(|_| panic!("{archive}: header at {at}: number field is not ASCII"));
    let digits = text.trim_matches(|c| c == ' ' || c == '\0');
    usize::from_str_radix(digits, 8)
        .unwrap_or_else(|_| panic!("{archive}: header at {at}: bad octal number {text:?}"))
}

fn text(field: &[u8]) -> &[u8] {
    field.split(|&b| b == 0).next().unwrap_or_default()
}

/// The members of a ustar archive as `corpus.sh pack` writes it: regular files
/// with flat, distinct names, in name order. Anything else fails the test, so
/// what is replayed is exactly what `corpus.sh unpack` gives a campaign.
fn ustar_members(tar: &[u8], archive: &str) -> Vec<(String, Vec<u8>)> {
    let mut members: Vec<(String, Vec<u8>)> = Vec::new();
    let mut at = 0;
    loop {
        let header = tar
            .get(at..at + 512)
            .unwrap_or_else(|| panic!("{archive}: ends inside the header at {at}"));
        if header.iter().all(|&b| b == 0) {
            break;
        }
        assert_eq!(
            &header[257..263],
            b"ustar\0",
            "{archive}: header at {at} is not ustar"
        );
        // The checksum counts its own field as spaces.
        let sum: usize = header[..148]
            .iter()
            .chain(&[b' '; 8])
            .chain(&header[156..])
            .map(|&b| usize::from(b))
            .sum();
        assert_eq!(
            sum,
            octal(&header[148..156], archive, at),
            "{archive}: header at {at} fails its checksum"
        );
        let kind = header[156];
        assert!(
            kind == b'0' || kind == 0,
            "{archive}: header at {at} is not a regular file (type {kind:?})"
        );
        let (name, prefix) = (text(&header[..100]), text(&header[345..500]));
        assert!(prefix.is_empty(), "{archive}: header at {at} has a prefix");
        let name = String::from_utf8(name.to_vec())
            .unwrap_or_else(|_| panic!("{archive}: header at {at}: name is not UTF-8"));
        assert!(
            !name.is_empty() && !name.contains('/') && name != "." && name != "..",
            "{archive}: member name {name:?} is not a plain file name"
        );
        if let Some((last, _)) = members.last() {
            assert!(
                *last < name,
                "{archive}: {name} is not after {last}: names must be sorted and distinct"
            );
        }
        let size = octal(&header[124..136], archive, at);
        let start = at + 512;
        let data = tar
            .get(start..start + size)
            .unwrap_or_else(|| panic!("{archive}: {name} ends past the archive"));
        members.push((name, data.to_vec()));
        at = start + size.div_ceil(512) * 512;
    }
    members
}

/// Every input of a target's corpus: (member name, bytes).
fn members(target: &str) -> Vec<(String, Vec<u8>)> {
    let path = archive_path(target);
    let shown = format!("fuzz/corpus/{target}.tar.zst");
    let compressed =
        std::fs::read(&path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    ustar_members(&unzstd(&compressed, &shown), &shown)
}

/// Run every input; report all that panic (or run far too long), not just the first.
fn replay(target: &str, harness: fn(&[u8])) {
    let members = members(target);
    assert!(
        !members.is_empty(),
        "fuzz/corpus/{target}.tar.zst is empty: seed it with fuzz/seed_corpus.py"
    );
    let mut failures = Vec::new();
    for (name, data) in &members {
        let start = Instant::now();
        let outcome = std::panic::catch_unwind(|| harness(data));
        let took = start.elapsed();
        if outcome.is_err() {
            failures.push(format!("{name}: panicked"));
        } else if took > Duration::from_secs(10) {
            // libFuzzer's -timeout=10, in an unoptimised build: a hang, not a slow input.
            failures.push(format!("{name}: took {took:?}"));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} files of fuzz/corpus/{target}.tar.zst fail:\n{}",
        failures.len(),
        members.len(),
        failures.join("\n")
    );
    // Seen with --nocapture: the count to compare with `fuzz/corpus.sh list`.
    println!(
        "fuzz/corpus/{target}.tar.zst: {} inputs replayed",
        members.len()
    );
}

#[test]
fn pickle_vm() {
    replay("pickle_vm", fuzzing::pickle_vm);
}

#[test]
fn scanner_differential() {
    replay("scanner_differential", fuzzing::scanner_differential);
}

#[test]
fn zip_archive() {
    replay("zip_archive", fuzzing::zip_archive);
}

#[test]
fn checkpoint_open() {
    replay("checkpoint_open", fuzzing::checkpoint_open);
}

#[test]
fn legacy() {
    replay("legacy", fuzzing::legacy);
}

#[test]
fn round_trip() {
    replay("round_trip", fuzzing::round_trip);
}

#[test]
fn wrappers() {
    replay("wrappers", fuzzing::wrappers);
}

/// Every target of `fuzzing::TARGETS` is replayed above and has a corpus archive,
/// and `fuzz/corpus/` holds no archive of a target that does not exist.
#[test]
fn every_target_has_a_corpus() {
    let replayed = [
        "pickle_vm",
        "scanner_differential",
        "zip_archive",
        "checkpoint_open",
        "legacy",
        "round_trip",
        "wrappers",
    ];
    for (name, _) in fuzzing::TARGETS {
        assert!(replayed.contains(name), "target {name} is not replayed");
        assert!(
            archive_path(name).is_file(),
            "target {name} has no fuzz/corpus/{name}.tar.zst"
        );
    }
    assert_eq!(fuzzing::TARGETS.len(), replayed.len());
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/corpus");
    let entries =
        std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("cannot list {}: {e}", dir.display()));
    for entry in entries.filter_map(|e| e.ok()) {
        let file = entry.file_name().to_string_lossy().into_owned();
        if let Some(target) = file.strip_suffix(".tar.zst") {
            assert!(
                replayed.contains(&target),
                "fuzz/corpus/{file} is the corpus of no target"
            );
        }
    }
}
