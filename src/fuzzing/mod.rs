//! Fuzz harnesses: one function per cargo-fuzz target in `fuzz/`, shared with
//! `tests/fuzz_corpus.rs`, which replays every corpus and regression file on the
//! stable toolchain. Each function takes raw bytes, runs one layer of the core on
//! them and asserts the invariants that layer promises. Errors are expected
//! outcomes; a panic here means a violated invariant (or a panic in the core).
//! Only built with the `fuzzing` feature.

// Harnesses assert their invariants: panicking is their job.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::panic
)]

mod archive;
mod round_trip;
mod vm;
mod wrappers;

pub use archive::{checkpoint_open, legacy, zip_archive};
pub use round_trip::{encode_pickle, round_trip, round_trip_tree, save_checkpoint, Key, Tree};
pub use vm::{pickle_vm, scanner_differential};
pub use wrappers::wrappers;

/// A harness: raw bytes in, a panic on a violated invariant.
pub type Harness = fn(&[u8]);

/// Every target, by the name of its fuzz target and corpus directory.
pub const TARGETS: &[(&str, Harness)] = &[
    ("pickle_vm", pickle_vm),
    ("scanner_differential", scanner_differential),
    ("zip_archive", zip_archive),
    ("checkpoint_open", checkpoint_open),
    ("legacy", legacy),
    ("round_trip", round_trip),
    ("wrappers", wrappers),
];

#[cfg(test)]
mod tests {
    use super::TARGETS;

    #[test]
    fn every_harness_survives_trivial_inputs() {
        for (_, f) in TARGETS {
            for data in [&b""[..], b".", b"N.", b"\x80\x02N.", b"PK\x05\x06"] {
                f(data);
            }
        }
    }
}
