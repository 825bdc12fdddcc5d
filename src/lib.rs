//! tensorplay's core: load PyTorch checkpoints without running code from them.
//!
//! The data path: [`archive`] finds the records of a checkpoint in the mapped file,
//! the [`pickle`] VM interprets `data.pkl` into an arena of [`value`]s, [`torch`]
//! gives the allowlisted globals torch's weights-only meaning, and [`checkpoint`]
//! binds every storage to its bytes after validating it; [`scan`] reads the same
//! bytes without building anything, and [`save`] writes them. Dependencies point
//! down that path, never back up (checked by `.ci/check_layers.py`). Nothing
//! here touches Python: the `tensorplay-python` crate (`bindings/`) builds the
//! extension over this one.

// Input can never panic the core: no unwrap, expect, panic or unchecked index
// outside tests (the fuzzing harnesses, which assert on purpose, opt out).
#![deny(unsafe_code)]
#![cfg_attr(
    not(test),
    deny(
        clippy::unwrap_used,
        clippy::expect_used,
        clippy::indexing_slicing,
        clippy::panic
    )
)]

pub mod archive;
pub mod checkpoint;
pub mod error;
pub mod fill;
#[cfg(feature = "fuzzing")]
#[doc(hidden)]
pub mod fuzzing;
pub mod limits;
pub mod parallel;
pub mod pickle;
pub mod raw;
pub mod save;
pub mod scan;
pub mod torch;
pub mod value;

pub use checkpoint::{open, Checkpoint, Endianness, LoadOptions};
pub use error::{Error, Location, Refusal, Result};
pub use limits::Limits;
