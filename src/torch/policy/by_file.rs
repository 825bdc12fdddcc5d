//! Globals a file may name because of what the file is, beyond the allowlist:
//! a distributed checkpoint's `.metadata` pickles `torch.distributed.checkpoint`'s
//! own metadata classes, which no other file needs, and a TorchScript archive's
//! pickles name `torch.jit._pickle`'s builders. Loads (through
//! `tensorplay.dcp`) and scans take them from here, so they cannot disagree.

use super::allowlist::{Builtin, JitBuilder};

/// What `torch.distributed.checkpoint` pickles into `.metadata` (torch 2.13 to
/// 2.15): dataclasses built from their fields, the memory-format enum, and the
/// checkpoint's path. Each is data: built with `__new__` and its state, or called
/// with plain values (the enum with an int, a path class with strings). pathlib's
/// classes stay dangerous elsewhere: a path is what file gadgets act on.
pub const DCP_METADATA_GLOBALS: &[&str] = &[
    "torch.distributed.checkpoint.metadata.Metadata",
    "torch.distributed.checkpoint.metadata.TensorStorageMetadata",
    "torch.distributed.checkpoint.metadata.TensorProperties",
    "torch.distributed.checkpoint.metadata._MEM_FORMAT_ENCODING",
    "torch.distributed.checkpoint.metadata.ChunkStorageMetadata",
    "torch.distributed.checkpoint.metadata.BytesStorageMetadata",
    "torch.distributed.checkpoint.metadata.MetadataIndex",
    "torch.distributed.checkpoint.metadata.StorageMeta",
    "torch.distributed.checkpoint.filesystem._StorageInfo",
    "pathlib.PosixPath",
    "pathlib.WindowsPath",
    "pathlib.PurePosixPath",
    "pathlib.PureWindowsPath",
];

/// Is `file_name` a distributed checkpoint's metadata: `.metadata`, or a rank's
/// own `__<rank>.metadata` (written when ranks do not coordinate)?
pub fn is_dcp_metadata(file_name: &str) -> bool {
    file_name == ".metadata"
        || (file_name.strip_prefix("__"))
            .and_then(|rest| rest.strip_suffix(".metadata"))
            .is_some_and(|rank| !rank.is_empty() && rank.bytes().all(|b| b.is_ascii_digit()))
}

/// The globals a file named `file_name` may name beyond the allowlist.
pub fn allowed_in_file(file_name: &str) -> &'static [&'static str] {
    if is_dcp_metadata(file_name) {
        DCP_METADATA_GLOBALS
    } else {
        &[]
    }
}

/// What `module.name` is in a TorchScript archive's own pickles (`data.pkl`,
/// `constants.pkl`), beyond the allowlist: one of `torch.jit._pickle`'s builders,
/// which TorchScript's unpickler treats as data (the value they are given, typed).
/// Everywhere else they stay denylisted: the module is torch's code runner, and
/// only in an archive torch.jit.load reads is its meaning pinned to data.
pub fn torchscript_builder(module: &str, name: &str) -> Option<Builtin> {
    if module != JitBuilder::MODULE {
        return None;
    }
    (JitBuilder::ALL.iter())
        .find(|j| j.name() == name)
        .map(|j| Builtin::JitBuilder(*j))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_data_builders_of_torch_jit_pickle() {
        for name in [
            "build_intlist",
            "build_doublelist",
            "build_boollist",
            "build_tensorlist",
            "restore_type_tag",
        ] {
            let b = torchscript_builder("torch.jit._pickle", name).expect(name);
            assert_eq!(b.full_name(), format!("torch.jit._pickle.{name}"));
        }
        for (module, name) in [
            ("torch.jit._pickle", "build_tensor_from_id"),
            ("torch.jit._pickle", "torch"),
            ("torch.jit", "build_intlist"),
            ("torch.jit._pickle.x", "build_intlist"),
        ] {
            assert_eq!(torchscript_builder(module, name), None, "{module}.{name}");
        }
        // Outside a TorchScript archive they are refused, and a scan marks them.
        assert!(super::super::is_dangerous(
            "torch.jit._pickle",
            "build_intlist"
        ));
    }

    #[test]
    fn only_metadata_files_name_dcp_classes() {
        for name in [".metadata", "__0.metadata", "__17.metadata"] {
            assert_eq!(allowed_in_file(name), DCP_METADATA_GLOBALS, "{name}");
        }
        for name in [
            "metadata",
            "x.metadata",
            "__.metadata",
            "__a.metadata",
            "data.pkl",
        ] {
            assert!(allowed_in_file(name).is_empty(), "{name}");
        }
    }
}
