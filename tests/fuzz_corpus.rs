//! Replays every file of `fuzz/corpus/<target>/` through the harness that target
//! fuzzes (`tensorplay::fuzzing`), so `cargo test` checks every crash, timeout
//! and out-of-memory ever found (the `regress-*` files) and the whole minimised
//! corpus on the stable toolchain, without cargo-fuzz.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use tensorplay::fuzzing;

fn corpus_dir(target: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fuzz/corpus")
        .join(target)
}

fn files(target: &str) -> Vec<PathBuf> {
    let dir = corpus_dir(target);
    let entries =
        std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("cannot list {}: {e}", dir.display()));
    let mut files: Vec<PathBuf> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.is_file())
        .collect();
    files.sort();
    files
}

/// Run every file; report all that panic (or run far too long), not just the first.
fn replay(target: &str, harness: fn(&[u8])) {
    let files = files(target);
    assert!(
        !files.is_empty(),
        "fuzz/corpus/{target} is empty: seed it with fuzz/seed_corpus.py"
    );
    let mut failures = Vec::new();
    for path in &files {
        let data = match std::fs::read(path) {
            Ok(data) => data,
            // A running campaign replaces corpus files as it shrinks them.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => panic!("cannot read {}: {e}", path.display()),
        };
        let start = Instant::now();
        let outcome = std::panic::catch_unwind(|| harness(&data));
        let took = start.elapsed();
        let name = path.file_name().unwrap_or_default().to_string_lossy();
        if outcome.is_err() {
            failures.push(format!("{name}: panicked"));
        } else if took > Duration::from_secs(10) {
            // libFuzzer's -timeout=10, in an unoptimised build: a hang, not a slow input.
            failures.push(format!("{name}: took {took:?}"));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} files of fuzz/corpus/{target} fail:\n{}",
        failures.len(),
        files.len(),
        failures.join("\n")
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

/// Every target of `fuzzing::TARGETS` is replayed above, and has a corpus.
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
        assert!(!files(name).is_empty(), "target {name} has no corpus");
    }
    assert_eq!(fuzzing::TARGETS.len(), replayed.len());
}
