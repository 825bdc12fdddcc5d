//! Read PyTorch checkpoints (`.pt`, `.pth`, `pytorch_model.bin`, `.ckpt`) without
//! running code from them, and scan files for what a load would import.
//!
//! A checkpoint is a pickle, and unpickling runs whatever code the file names.
//! This crate runs the pickle in a VM of its own that builds only the objects
//! torch's weights-only loader allows (tensors, dicts, lists, numbers...) and
//! refuses the rest, or reads it as a stub; each opcode is charged against named
//! [`Limits`], so no input can make it panic, hang or take unbounded memory.
//!
//! - [`open`] a checkpoint (or [`open_bytes`]), walk its [`Value`]s from
//!   [`Checkpoint::root`] or list its [`Checkpoint::tensors`] by state-dict name,
//!   and read each [`Tensor`]'s dtype, shape, stride and bytes (borrowed from the
//!   mapped file when they can be).
//! - [`scan_file`] reads every pickle of a file (in zip, tar, 7z and compressed
//!   streams too) and reports the globals outside the allowlist.
//!
//! Inside, the data path runs archive, pickle VM, torch's meaning, checkpoint;
//! dependencies point down it, never back up (checked by `.ci/check_layers.py`).
//! Nothing here touches Python: the `tensorplay-python` crate (`bindings/`)
//! builds the Python extension over this one.

// Input can never panic the core: no unwrap, expect, panic or unchecked index
// outside tests (the fuzzing harnesses, which assert on purpose, opt out).
#![deny(unsafe_code)]
#![deny(missing_docs)]
// What only the bindings, the tests and the fuzz targets use is dead without them;
// and clippy holds private types to lints it spares public ones (a boxed Vec
// keeps a value node small on purpose).
#![cfg_attr(
    not(feature = "internals"),
    allow(
        dead_code,
        unused_imports,
        clippy::box_collection,
        clippy::enum_variant_names
    )
)]
#![cfg_attr(
    not(test),
    deny(
        clippy::unwrap_used,
        clippy::expect_used,
        clippy::indexing_slicing,
        clippy::panic
    )
)]

mod api;

pub use api::{
    open, open_bytes, open_with, scan_file, Checkpoint, Kind, Options, ScanFinding, ScanReport,
    Tensor, Value,
};
pub use error::{Error, ErrorKind, Location, Refusal};
pub use limits::{Limit, Limits};

/// The layers, lowest first. Public, and hidden from the documentation, only
/// with the `internals` feature: for the bindings crate, this crate's tests and
/// benchmarks and the fuzz targets, which reach below the API above.
macro_rules! layers {
    ($($name:ident),* $(,)?) => {$(
        #[cfg(feature = "internals")]
        #[doc(hidden)]
        pub mod $name;
        #[cfg(not(feature = "internals"))]
        mod $name;
    )*};
}

layers!(limits, parallel, error, archive, value, pickle, torch, checkpoint, save, fill, raw, scan);

#[cfg(feature = "fuzzing")]
#[doc(hidden)]
pub mod fuzzing;
