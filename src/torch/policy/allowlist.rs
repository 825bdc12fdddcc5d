//! The built-in allowlist: torch 2.13's 144 names, `builtins.bytes`, and the numpy
//! names that rebuild a plain numeric array, dtype or scalar from its bytes. A
//! name resolves to a tag; nothing here imports anything.

use std::borrow::Cow;

use crate::torch::dtype::DType;

/// Functions of `torch._utils` (and `torch._tensor`) that rebuild tensors.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RebuildFn {
    Tensor,
    TensorV2,
    TensorV3,
    Parameter,
    ParameterWithState,
    QTensor,
    SparseTensor,
    MetaTensorNoStorage,
    NestedTensor,
    WrapperSubclass,
    DeviceTensorFromNumpy,
    DeviceTensorFromCpuTensor,
    FromTypeV2,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum QScheme {
    PerTensorAffine,
    PerTensorSymmetric,
    PerChannelAffine,
    PerChannelSymmetric,
    PerChannelAffineFloatQParams,
}

impl QScheme {
    pub fn name(self) -> &'static str {
        match self {
            QScheme::PerTensorAffine => "per_tensor_affine",
            QScheme::PerTensorSymmetric => "per_tensor_symmetric",
            QScheme::PerChannelAffine => "per_channel_affine",
            QScheme::PerChannelSymmetric => "per_channel_symmetric",
            QScheme::PerChannelAffineFloatQParams => "per_channel_affine_float_qparams",
        }
    }

    const ALL: [QScheme; 5] = [
        QScheme::PerTensorAffine,
        QScheme::PerTensorSymmetric,
        QScheme::PerChannelAffine,
        QScheme::PerChannelSymmetric,
        QScheme::PerChannelAffineFloatQParams,
    ];
}

/// A global from the built-in allowlist.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Builtin {
    OrderedDict,
    Counter,
    Parameter,
    GetLayout,
    Size,
    Tensor,
    Device,
    CodecsEncode,
    ByteArray,
    Bytes,
    Set,
    Complex,
    Dtype(DType),
    /// `torch.FloatTensor`, `torch.cuda.FloatTensor`, `torch.sparse.FloatTensor`...
    LegacyTensorType {
        dtype: DType,
        cuda: bool,
        sparse: bool,
    },
    TypedStorageClass,
    UntypedStorageClass,
    /// `torch.FloatStorage`, `torch.cuda.FloatStorage`...: only carries a dtype.
    StorageType {
        dtype: DType,
        cuda: bool,
    },
    QScheme(QScheme),
    Rebuild(RebuildFn),
    /// numpy's array pickle pattern, which tensorplay builds from the bytes itself.
    NumpyReconstruct,
    NumpyNdarray,
    NumpyDtype,
    NumpyScalar,
    /// `numpy._core.numeric._frombuffer`: how protocol 5 pickles arrays.
    NumpyFrombuffer,
    /// One of `torch.jit._pickle`'s builders, met in a TorchScript archive's own
    /// pickle (never resolved elsewhere: see [`super::torchscript_builder`]).
    JitBuilder(JitBuilder),
}

/// The builders of `torch.jit._pickle` that TorchScript's unpickler treats as
/// data: each hands back a value it is given, tagged with a static type that
/// only the TorchScript runtime uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum JitBuilder {
    IntList,
    DoubleList,
    BoolList,
    TensorList,
    /// `restore_type_tag(value, type_str)`: typed dicts and lists.
    RestoreTypeTag,
}

impl JitBuilder {
    pub const MODULE: &'static str = "torch.jit._pickle";
    /// `build_tensor_from_id` is not here: it names a tensor in a table that only
    /// RPC's unpickler has, and torch.jit.load fails on it.
    pub const ALL: [JitBuilder; 5] = [
        JitBuilder::IntList,
        JitBuilder::DoubleList,
        JitBuilder::BoolList,
        JitBuilder::TensorList,
        JitBuilder::RestoreTypeTag,
    ];

    pub fn name(self) -> &'static str {
        match self {
            JitBuilder::IntList => "build_intlist",
            JitBuilder::DoubleList => "build_doublelist",
            JitBuilder::BoolList => "build_boollist",
            JitBuilder::TensorList => "build_tensorlist",
            JitBuilder::RestoreTypeTag => "restore_type_tag",
        }
    }
}

impl Builtin {
    /// The `module.name` under which the built-in is allowlisted.
    pub fn full_name(self) -> Cow<'static, str> {
        match self {
            Builtin::OrderedDict => "collections.OrderedDict".into(),
            Builtin::Counter => "collections.Counter".into(),
            Builtin::Parameter => "torch.nn.parameter.Parameter".into(),
            Builtin::GetLayout => "torch.serialization._get_layout".into(),
            Builtin::Size => "torch.Size".into(),
            Builtin::Tensor => "torch.Tensor".into(),
            Builtin::Device => "torch.device".into(),
            Builtin::CodecsEncode => "_codecs.encode".into(),
            Builtin::ByteArray => "builtins.bytearray".into(),
            Builtin::Bytes => "builtins.bytes".into(),
            Builtin::Set => "builtins.set".into(),
            Builtin::Complex => "builtins.complex".into(),
            Builtin::Dtype(d) => Cow::Owned(format!("torch.{}", d.name())),
            Builtin::LegacyTensorType {
                dtype,
                cuda,
                sparse,
            } => Cow::Owned(format!(
                "torch.{}{}{}",
                if cuda { "cuda." } else { "" },
                if sparse { "sparse." } else { "" },
                dtype.legacy_tensor_name().unwrap_or("?")
            )),
            Builtin::TypedStorageClass => "torch.storage.TypedStorage".into(),
            Builtin::UntypedStorageClass => "torch.storage.UntypedStorage".into(),
            Builtin::StorageType { dtype, cuda } => Cow::Owned(format!(
                "torch.{}{}",
                if cuda { "cuda." } else { "" },
                dtype.legacy_storage_name().unwrap_or("?")
            )),
            Builtin::QScheme(q) => Cow::Owned(format!("torch.{}", q.name())),
            Builtin::Rebuild(f) => rebuild_fn_full_name(f).into(),
            Builtin::NumpyReconstruct => "numpy._core.multiarray._reconstruct".into(),
            Builtin::NumpyNdarray => "numpy.ndarray".into(),
            Builtin::NumpyDtype => "numpy.dtype".into(),
            Builtin::NumpyScalar => "numpy._core.multiarray.scalar".into(),
            Builtin::NumpyFrombuffer => "numpy._core.numeric._frombuffer".into(),
            Builtin::JitBuilder(j) => Cow::Owned(format!("{}.{}", JitBuilder::MODULE, j.name())),
        }
    }

    /// Every built-in, for tests and the documentation.
    pub fn all() -> Vec<Builtin> {
        let mut out = vec![
            Builtin::OrderedDict,
            Builtin::Counter,
            Builtin::Parameter,
            Builtin::GetLayout,
            Builtin::Size,
            Builtin::Tensor,
            Builtin::Device,
            Builtin::CodecsEncode,
            Builtin::ByteArray,
            Builtin::Bytes,
            Builtin::Set,
            Builtin::Complex,
            Builtin::TypedStorageClass,
            Builtin::UntypedStorageClass,
            Builtin::NumpyReconstruct,
            Builtin::NumpyNdarray,
            Builtin::NumpyDtype,
            Builtin::NumpyScalar,
            Builtin::NumpyFrombuffer,
        ];
        out.extend(DType::ALL.iter().map(|d| Builtin::Dtype(*d)));
        for cuda in [false, true] {
            for sparse in [false, true] {
                out.extend(
                    DType::ALL
                        .iter()
                        .filter(|d| {
                            d.legacy_tensor_name().is_some() && !(sparse && **d == DType::Bool)
                        })
                        .map(|d| Builtin::LegacyTensorType {
                            dtype: *d,
                            cuda,
                            sparse,
                        }),
                );
            }
            out.extend(
                DType::ALL
                    .iter()
                    .filter(|d| d.legacy_storage_name().is_some() && !(cuda && d.is_quantized()))
                    .map(|d| Builtin::StorageType { dtype: *d, cuda }),
            );
        }
        out.extend(QScheme::ALL.iter().map(|q| Builtin::QScheme(*q)));
        out.extend(REBUILD_FNS.iter().map(|f| Builtin::Rebuild(*f)));
        out
    }
}

const REBUILD_FNS: [RebuildFn; 13] = [
    RebuildFn::Tensor,
    RebuildFn::TensorV2,
    RebuildFn::TensorV3,
    RebuildFn::Parameter,
    RebuildFn::ParameterWithState,
    RebuildFn::QTensor,
    RebuildFn::SparseTensor,
    RebuildFn::MetaTensorNoStorage,
    RebuildFn::NestedTensor,
    RebuildFn::WrapperSubclass,
    RebuildFn::DeviceTensorFromNumpy,
    RebuildFn::DeviceTensorFromCpuTensor,
    RebuildFn::FromTypeV2,
];

fn rebuild_fn_full_name(f: RebuildFn) -> &'static str {
    match f {
        RebuildFn::Tensor => "torch._utils._rebuild_tensor",
        RebuildFn::TensorV2 => "torch._utils._rebuild_tensor_v2",
        RebuildFn::TensorV3 => "torch._utils._rebuild_tensor_v3",
        RebuildFn::Parameter => "torch._utils._rebuild_parameter",
        RebuildFn::ParameterWithState => "torch._utils._rebuild_parameter_with_state",
        RebuildFn::QTensor => "torch._utils._rebuild_qtensor",
        RebuildFn::SparseTensor => "torch._utils._rebuild_sparse_tensor",
        RebuildFn::MetaTensorNoStorage => "torch._utils._rebuild_meta_tensor_no_storage",
        RebuildFn::NestedTensor => "torch._utils._rebuild_nested_tensor",
        RebuildFn::WrapperSubclass => "torch._utils._rebuild_wrapper_subclass",
        RebuildFn::DeviceTensorFromNumpy => "torch._utils._rebuild_device_tensor_from_numpy",
        RebuildFn::DeviceTensorFromCpuTensor => {
            "torch._utils._rebuild_device_tensor_from_cpu_tensor"
        }
        RebuildFn::FromTypeV2 => "torch._tensor._rebuild_from_type_v2",
    }
}

/// The built-in allowlist entry for `module.name` (already mapped by [`map_py2`]).
pub fn builtin(module: &str, name: &str) -> Option<Builtin> {
    let b = match (module, name) {
        ("collections", "OrderedDict") => Builtin::OrderedDict,
        ("collections", "Counter") => Builtin::Counter,
        ("torch.nn.parameter", "Parameter") => Builtin::Parameter,
        ("torch.serialization", "_get_layout") => Builtin::GetLayout,
        ("torch", "Size") => Builtin::Size,
        ("torch", "Tensor") => Builtin::Tensor,
        ("torch", "device") => Builtin::Device,
        ("_codecs", "encode") => Builtin::CodecsEncode,
        ("builtins", "bytearray") => Builtin::ByteArray,
        ("builtins", "bytes") => Builtin::Bytes,
        ("builtins", "set") => Builtin::Set,
        ("builtins", "complex") => Builtin::Complex,
        ("torch.storage", "TypedStorage") => Builtin::TypedStorageClass,
        ("torch.storage", "UntypedStorage") => Builtin::UntypedStorageClass,
        ("torch._tensor", "_rebuild_from_type_v2") => Builtin::Rebuild(RebuildFn::FromTypeV2),
        ("numpy._core.multiarray" | "numpy.core.multiarray", "_reconstruct") => {
            Builtin::NumpyReconstruct
        }
        ("numpy._core.multiarray" | "numpy.core.multiarray", "scalar") => Builtin::NumpyScalar,
        ("numpy._core.numeric" | "numpy.core.numeric", "_frombuffer") => Builtin::NumpyFrombuffer,
        ("numpy", "ndarray") => Builtin::NumpyNdarray,
        ("numpy", "dtype") => Builtin::NumpyDtype,
        ("torch._utils", f) => {
            let name = |r: &&RebuildFn| rebuild_fn_full_name(**r).strip_prefix("torch._utils.");
            Builtin::Rebuild(*REBUILD_FNS.iter().find(|r| name(r) == Some(f))?)
        }
        ("torch", n) => {
            if let Some(d) = DType::from_name(n) {
                Builtin::Dtype(d)
            } else if let Some(q) = QScheme::ALL.iter().find(|q| q.name() == n) {
                Builtin::QScheme(*q)
            } else if let Some(dtype) = DType::from_legacy_storage_name(n) {
                Builtin::StorageType { dtype, cuda: false }
            } else {
                let dtype = DType::from_legacy_tensor_name(n)?;
                Builtin::LegacyTensorType {
                    dtype,
                    cuda: false,
                    sparse: false,
                }
            }
        }
        ("torch.cuda", n) => {
            if let Some(dtype) = DType::from_legacy_storage_name(n).filter(|d| !d.is_quantized()) {
                Builtin::StorageType { dtype, cuda: true }
            } else {
                let dtype = DType::from_legacy_tensor_name(n)?;
                Builtin::LegacyTensorType {
                    dtype,
                    cuda: true,
                    sparse: false,
                }
            }
        }
        ("torch.sparse", n) | ("torch.cuda.sparse", n) => {
            let dtype = DType::from_legacy_tensor_name(n).filter(|d| *d != DType::Bool)?;
            Builtin::LegacyTensorType {
                dtype,
                cuda: module == "torch.cuda.sparse",
                sparse: true,
            }
        }
        _ => return None,
    };
    Some(b)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_builtin_allowlist_is_torchs_144_names_plus_bytes_and_numpys_array_pattern() {
        let all = Builtin::all();
        assert_eq!(all.len(), 150);
        for b in &all {
            let full = b.full_name();
            let (module, name) = full.rsplit_once('.').unwrap();
            assert_eq!(builtin(module, name), Some(*b), "{full}");
        }
    }

    #[test]
    fn aliases_are_not_names() {
        assert_eq!(builtin("torch", "float"), None);
        assert_eq!(builtin("torch", "half"), None);
        assert_eq!(builtin("torch.tensor", "_rebuild_from_type_v2"), None);
        assert_eq!(builtin("torch.cuda", "QInt8Storage"), None);
        assert_eq!(builtin("torch.sparse", "BoolTensor"), None);
    }
}
