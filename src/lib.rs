//! tensorplay's core: load PyTorch checkpoints without running code from them.
//!
//! The data path: [`archive`] finds the records of a checkpoint in the mapped file,
//! the [`pickle`] VM interprets `data.pkl` into an arena of values, [`torch`] gives
//! the allowlisted globals torch's weights-only meaning, and [`checkpoint`] binds
//! every storage to its bytes after validating it. Only `bindings` (behind the
//! `python` feature) touches Python.

#![deny(unsafe_code)]

pub mod archive;
pub mod checkpoint;
pub mod error;
pub mod fill;
#[doc(hidden)]
pub mod fuzzing;
pub mod limits;
pub mod pickle;
pub mod raw;
pub mod save;
pub mod scan;
pub mod torch;
pub mod value;

#[cfg(feature = "python")]
mod bindings;

pub use checkpoint::{open, Checkpoint, Endianness, LoadOptions};
pub use error::{Error, Location, Refusal, Result};
pub use limits::Limits;
