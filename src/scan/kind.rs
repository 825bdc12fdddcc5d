//! What a file's (or an entry's) bytes are, judged by content: a tar by what
//! CPython's `tarfile` opens, not by a magic.

use crate::archive::sevenzip::is_7z;
use crate::archive::streams::Compression;
use crate::archive::tar;
use crate::pickle::opcodes;
use crate::torch::legacy;

const NPY_MAGIC: &[u8] = b"\x93NUMPY";

/// The kind of bytes a scan reads next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Empty,
    Zip,
    Npy,
    Tar,
    SevenZip,
    TorchLegacy,
    Safetensors,
    /// A whole file compressed (gzip, bzip2, xz...): what joblib, pandas and
    /// numpy open before they unpickle.
    Compressed(Compression),
    /// Anything else is read as a pickle, which it may turn out not to be.
    Pickle,
}

impl Kind {
    /// A tar is whatever CPython's `tarfile.open` opens (a checksum over the
    /// first 512 bytes rules out most files), or may open where the model
    /// cannot tell: not what has `ustar` at 257, which V7 and old GNU headers
    /// lack.
    pub fn of(data: &[u8]) -> Kind {
        Kind::of_reading(data, true)
    }

    /// What a tar's bytes are besides a tar, if anything.
    pub fn beside_tar(data: &[u8]) -> Kind {
        Kind::of_reading(data, false)
    }

    fn of_reading(data: &[u8], tar: bool) -> Kind {
        if data.is_empty() {
            Kind::Empty
        } else if data.starts_with(b"PK\x03\x04") || data.starts_with(b"PK\x05\x06") {
            Kind::Zip
        } else if data.starts_with(NPY_MAGIC) {
            Kind::Npy
        } else if tar && tar::may_be_tar(data) {
            Kind::Tar
        } else if is_7z(data) {
            Kind::SevenZip
        } else if legacy::is_legacy(data) {
            Kind::TorchLegacy
        } else if is_safetensors(data) {
            Kind::Safetensors
        } else if let Some(c) = Compression::of(data) {
            Kind::Compressed(c)
        } else {
            Kind::Pickle
        }
    }
}

impl Kind {
    /// Whether bytes of this kind also need reading as the pickle an unpickler
    /// would run from their first byte: they start with an opcode, and no other
    /// reading covers them. Pickles and legacy torch files are read as pickles
    /// anyway, and zlib and LZMA-alone (whose magic is weak) both ways; a zip's
    /// `PK` is a persistent id that only a loader opening zips first resolves.
    pub fn also_read_as_a_pickle(self, data: &[u8]) -> bool {
        let starts_with_an_opcode = data.first().copied().is_some_and(opcodes::is_opcode);
        starts_with_an_opcode
            && !matches!(
                self,
                Kind::Pickle
                    | Kind::TorchLegacy
                    | Kind::Zip
                    | Kind::Compressed(Compression::Zlib | Compression::LzmaAlone)
            )
    }
}

/// safetensors: a little-endian u64 header length, then a JSON object. A
/// length that runs past the data still says safetensors: the header check
/// reports it.
fn is_safetensors(data: &[u8]) -> bool {
    let Some(len) = data
        .get(..8)
        .and_then(|b| <[u8; 8]>::try_from(b).ok())
        .map(u64::from_le_bytes)
    else {
        return false;
    };
    len > 1 && len <= 1 << 32 && data.get(8) == Some(&b'{')
}

/// Whether a name says the file is a pickle or a model (`.pkl`, `.pt`, `.bin`...),
/// in any case.
pub fn named_like_a_model(name: &[u8]) -> bool {
    const EXTENSIONS: [&[u8]; 11] = [
        b".pkl",
        b".pickle",
        b".joblib",
        b".pt",
        b".pth",
        b".bin",
        b".ckpt",
        b".npy",
        b".dat",
        b".data",
        b".safetensors",
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

/// What bytes that are no pickle are, for the verdict: text and the common
/// formats that hold no pickle are skipped; other binary data is unreadable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NotAPickle {
    Text,
    /// A known format that holds no pickle (an image, a PDF, GGUF weights...).
    Known(&'static str),
    /// Binary data of no format the scanner knows.
    Unknown,
}

impl NotAPickle {
    pub fn of(data: &[u8]) -> NotAPickle {
        const KNOWN: [(&[u8], &str); 12] = [
            (b"\x89PNG\r\n\x1a\n", "PNG image"),
            (b"\xff\xd8\xff", "JPEG image"),
            (b"GIF87a", "GIF image"),
            (b"GIF89a", "GIF image"),
            (b"%PDF-", "PDF document"),
            (b"II*\x00", "TIFF image"),
            (b"MM\x00*", "TIFF image"),
            (b"GGUF", "GGUF weights"),
            (b"\x89HDF\r\n\x1a\n", "HDF5 data"),
            (b"SQLite format 3\x00", "SQLite database"),
            (b"\x7fELF", "ELF executable"),
            (b"OggS", "Ogg media"),
        ];
        if let Some((_, name)) = KNOWN.iter().find(|(magic, _)| data.starts_with(magic)) {
            return NotAPickle::Known(name);
        }
        if data.starts_with(b"RIFF")
            && data
                .get(8..12)
                .is_some_and(|t| t == b"WEBP" || t == b"WAVE")
        {
            return NotAPickle::Known("RIFF media");
        }
        if is_protobuf(data) {
            return NotAPickle::Known("a protobuf message (ONNX, sentencepiece...)");
        }
        let text = std::str::from_utf8(data).is_ok_and(|t| {
            !t.chars()
                .any(|c| c.is_control() && !matches!(c, '\n' | '\r' | '\t' | '\x0c'))
        });
        if text {
            NotAPickle::Text
        } else {
            NotAPickle::Unknown
        }
    }
}

/// Whether `data` is one well-formed protobuf message from its first byte to its
/// last (what ONNX models and sentencepiece models are, with no magic number):
/// every field a valid tag and a value of its wire type that fits, at least two
/// fields, and no group (a deprecated wire type no such writer uses). Random
/// binary data of any length fails within a few fields.
fn is_protobuf(data: &[u8]) -> bool {
    fn varint(data: &[u8], pos: &mut usize) -> Option<u64> {
        let mut value = 0u64;
        for shift in (0..64).step_by(7) {
            let byte = *data.get(*pos)?;
            *pos += 1;
            value |= u64::from(byte & 0x7f) << shift;
            if byte & 0x80 == 0 {
                return Some(value);
            }
        }
        None
    }
    let mut pos = 0usize;
    let mut fields = 0usize;
    while pos < data.len() {
        let Some(tag) = varint(data, &mut pos) else {
            return false;
        };
        if tag >> 3 == 0 || tag >> 3 > (1 << 29) - 1 {
            return false;
        }
        let skip = match tag & 7 {
            0 => varint(data, &mut pos).map(|_| 0),
            1 => Some(8),
            2 => varint(data, &mut pos).and_then(|n| usize::try_from(n).ok()),
            5 => Some(4),
            _ => None,
        };
        let Some(end) = skip.and_then(|n| pos.checked_add(n)) else {
            return false;
        };
        if end > data.len() {
            return false;
        }
        pos = end;
        fields += 1;
    }
    fields >= 2
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_protobuf_message_is_known_and_random_bytes_are_not() {
        // ir_version 8, producer_name "x", a graph of three bytes.
        let model = b"\x08\x08\x12\x01x\x3a\x03\x0a\x01y";
        assert_eq!(
            NotAPickle::of(model),
            NotAPickle::Known("a protobuf message (ONNX, sentencepiece...)")
        );
        assert_ne!(
            NotAPickle::of(&model[..model.len() - 1]),
            NotAPickle::of(model)
        );
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        let mut random = vec![0u8; 4096];
        for byte in &mut random {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            *byte = state as u8;
        }
        assert_eq!(NotAPickle::of(&random), NotAPickle::Unknown);
    }
}
