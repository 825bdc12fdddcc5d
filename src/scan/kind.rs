//! What a file's (or an entry's) bytes are, judged by content.

use crate::archive::tar::is_tar;
use crate::torch::legacy;

const NPY_MAGIC: &[u8] = b"\x93NUMPY";

/// The kind of bytes a scan reads next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Empty,
    Zip,
    Npy,
    Tar,
    TorchLegacy,
    Safetensors,
    /// Anything else is read as a pickle, which it may turn out not to be.
    Pickle,
}

impl Kind {
    pub fn of(data: &[u8]) -> Kind {
        if data.is_empty() {
            Kind::Empty
        } else if data.starts_with(b"PK\x03\x04") || data.starts_with(b"PK\x05\x06") {
            Kind::Zip
        } else if data.starts_with(NPY_MAGIC) {
            Kind::Npy
        } else if is_tar(data) {
            Kind::Tar
        } else if legacy::is_legacy(data) {
            Kind::TorchLegacy
        } else if is_safetensors(data) {
            Kind::Safetensors
        } else {
            Kind::Pickle
        }
    }
}

/// safetensors: a little-endian u64 header length, then a JSON object.
fn is_safetensors(data: &[u8]) -> bool {
    let Some(len) = data
        .get(..8)
        .and_then(|b| <[u8; 8]>::try_from(b).ok())
        .map(u64::from_le_bytes)
    else {
        return false;
    };
    len > 1 && len <= data.len() as u64 - 8 && data.get(8) == Some(&b'{')
}

/// Whether a name says the file is a pickle or a model (`.pkl`, `.pt`, `.bin`...),
/// in any case.
pub fn named_like_a_model(name: &[u8]) -> bool {
    const EXTENSIONS: [&[u8]; 10] = [
        b".pkl", b".pickle", b".joblib", b".pt", b".pth", b".bin", b".ckpt", b".npy", b".dat",
        b".data",
    ];
    EXTENSIONS.iter().any(|ext| {
        name.len() >= ext.len()
            && name
                .get(name.len() - ext.len()..)
                .is_some_and(|tail| tail.eq_ignore_ascii_case(ext))
    })
}

/// A TensorDict leaf (`<key>.memmap`, `<key>.shape.memmap`) next to its level's
/// `meta.json` (`exists` says which names the archive or folder holds): raw
/// tensor bytes that no reader unpickles, so random data in them is never taken
/// for a broken pickle.
pub fn is_tensordict_leaf(name: &str, mut exists: impl FnMut(&str) -> bool) -> bool {
    if !name.ends_with(".memmap") {
        return false;
    }
    match name.rsplit_once('/') {
        Some((folder, _)) => exists(&format!("{folder}/meta.json")),
        None => exists("meta.json"),
    }
}
