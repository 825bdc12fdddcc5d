//! Resolving a GLOBAL's `module.name`: Python 2 name mapping, the blocklist, the
//! built-in allowlist (torch 2.13's 144 names plus `builtins.bytes`) and the
//! user's entries. Nothing here imports anything: a name resolves to a tag.

use std::borrow::Cow;
use std::collections::BTreeMap;

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

/// A resolved global: a built-in, or the index of a user entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Global {
    Builtin(Builtin),
    User(u32),
}

/// Python 2 names, mapped as Python's `fix_imports` maps them, so the same object
/// has one name whatever protocol wrote it.
pub fn map_py2<'a>(module: &'a str, name: &'a str) -> (Cow<'a, str>, Cow<'a, str>) {
    type Name = (&'static str, &'static str);
    const NAMES: &[(Name, Name)] = &[
        (("__builtin__", "xrange"), ("builtins", "range")),
        (("__builtin__", "reduce"), ("functools", "reduce")),
        (("__builtin__", "intern"), ("sys", "intern")),
        (("__builtin__", "unichr"), ("builtins", "chr")),
        (("__builtin__", "unicode"), ("builtins", "str")),
        (("__builtin__", "long"), ("builtins", "int")),
        (("__builtin__", "basestring"), ("builtins", "str")),
        (("itertools", "izip"), ("builtins", "zip")),
        (("itertools", "imap"), ("builtins", "map")),
        (("itertools", "ifilter"), ("builtins", "filter")),
        (("itertools", "ifilterfalse"), ("itertools", "filterfalse")),
        (("itertools", "izip_longest"), ("itertools", "zip_longest")),
        (
            ("UserDict", "IterableUserDict"),
            ("collections", "UserDict"),
        ),
        (("UserDict", "UserDict"), ("collections", "UserDict")),
        (("UserList", "UserList"), ("collections", "UserList")),
        (("UserString", "UserString"), ("collections", "UserString")),
        (("whichdb", "whichdb"), ("dbm", "whichdb")),
        (("_socket", "fromfd"), ("socket", "fromfd")),
        (("socket", "_socketobject"), ("socket", "SocketType")),
        (
            ("_multiprocessing", "Connection"),
            ("multiprocessing.connection", "Connection"),
        ),
        (
            ("multiprocessing.process", "Process"),
            ("multiprocessing.context", "Process"),
        ),
        (
            ("multiprocessing.forking", "Popen"),
            ("multiprocessing.popen_fork", "Popen"),
        ),
        (("exceptions", "StandardError"), ("builtins", "Exception")),
        (("urllib", "urlopen"), ("urllib.request", "urlopen")),
        (("urllib", "urlretrieve"), ("urllib.request", "urlretrieve")),
        (("urllib2", "HTTPError"), ("urllib.error", "HTTPError")),
        (("urllib2", "URLError"), ("urllib.error", "URLError")),
    ];
    const MODULES: &[(&str, &str)] = &[
        ("__builtin__", "builtins"),
        ("copy_reg", "copyreg"),
        ("Queue", "queue"),
        ("SocketServer", "socketserver"),
        ("ConfigParser", "configparser"),
        ("repr", "reprlib"),
        ("_winreg", "winreg"),
        ("thread", "_thread"),
        ("dummy_thread", "_dummy_thread"),
        ("xmlrpclib", "xmlrpc.client"),
        ("httplib", "http.client"),
        ("commands", "subprocess"),
        ("urlparse", "urllib.parse"),
        ("urllib2", "urllib.request"),
        ("anydbm", "dbm"),
        ("_abcoll", "collections.abc"),
        ("cPickle", "pickle"),
        ("UserDict", "collections"),
        ("UserList", "collections"),
        ("UserString", "collections"),
        ("whichdb", "dbm"),
        ("StringIO", "io"),
        ("cStringIO", "io"),
        ("exceptions", "builtins"),
    ];
    if let Some((_, (m, n))) = NAMES.iter().find(|((m, n), _)| *m == module && *n == name) {
        return (Cow::Borrowed(m), Cow::Borrowed(n));
    }
    if let Some((_, m)) = MODULES.iter().find(|(m, _)| *m == module) {
        return (Cow::Borrowed(m), Cow::Borrowed(name));
    }
    (Cow::Borrowed(module), Cow::Borrowed(name))
}

/// Modules that stay blocked whatever the user allowlists: they reach the OS, the
/// interpreter or another unpickler.
pub const BLOCKED_MODULES: &[&str] = &[
    "os",
    "sys",
    "posix",
    "nt",
    "subprocess",
    "importlib",
    "runpy",
    "pickle",
    "_pickle",
];

/// Names of `builtins` that stay blocked: they evaluate, import or open.
pub const BLOCKED_BUILTINS: &[&str] = &["eval", "exec", "compile", "__import__", "getattr", "open"];

/// The blocked module (or `builtins.name`) that `module.name` falls under, if any.
pub fn blocked_reason(module: &str, name: &str) -> Option<String> {
    for blocked in BLOCKED_MODULES {
        let submodule = module
            .strip_prefix(blocked)
            .is_some_and(|rest| rest.is_empty() || rest.starts_with('.'));
        if submodule {
            return Some((*blocked).to_owned());
        }
    }
    if module == "builtins" && BLOCKED_BUILTINS.contains(&name) {
        return Some(format!("builtins.{name}"));
    }
    None
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

/// The user's allowlist entries, by `module.qualname`; the bindings keep the objects.
/// A B-tree rather than a hash map: building a `RandomState` seeds it from the OS
/// on first use, which a one-file scan would pay for a usually empty list.
#[derive(Debug, Default, Clone)]
pub struct UserGlobals {
    by_name: BTreeMap<String, u32>,
}

impl UserGlobals {
    pub fn new<I: IntoIterator<Item = String>>(names: I) -> Self {
        let mut by_name = BTreeMap::new();
        for (i, name) in names.into_iter().enumerate() {
            by_name.entry(name).or_insert(i as u32);
        }
        UserGlobals { by_name }
    }

    pub fn lookup(&self, full_name: &str) -> Option<u32> {
        self.by_name.get(full_name).copied()
    }

    pub fn is_empty(&self) -> bool {
        self.by_name.is_empty()
    }
}

/// What a GLOBAL resolves to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Resolution {
    Allowed(Global),
    Blocked,
    NotAllowed,
}

/// Resolve a mapped `module.name`: the blocklist first, then the built-ins (which win
/// over user entries on a clash, as in torch), then the user's entries.
pub fn resolve(module: &str, name: &str, user: &UserGlobals) -> Resolution {
    if blocked_reason(module, name).is_some() {
        return Resolution::Blocked;
    }
    if let Some(b) = builtin(module, name) {
        return Resolution::Allowed(Global::Builtin(b));
    }
    if !user.is_empty() {
        if let Some(i) = user.lookup(&format!("{module}.{name}")) {
            return Resolution::Allowed(Global::User(i));
        }
    }
    Resolution::NotAllowed
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

    #[test]
    fn python2_names_map_like_fix_imports() {
        assert_eq!(
            map_py2("__builtin__", "set"),
            ("builtins".into(), "set".into())
        );
        assert_eq!(
            map_py2("__builtin__", "intern"),
            ("sys".into(), "intern".into())
        );
        assert_eq!(
            map_py2("commands", "getoutput"),
            ("subprocess".into(), "getoutput".into())
        );
        assert_eq!(
            map_py2("exceptions", "ValueError"),
            ("builtins".into(), "ValueError".into())
        );
    }

    #[test]
    fn blocked_modules_win_over_user_entries() {
        let user = UserGlobals::new(["os.system".to_owned(), "mymod.Thing".to_owned()]);
        assert_eq!(resolve("os", "system", &user), Resolution::Blocked);
        assert_eq!(resolve("os.path", "join", &user), Resolution::Blocked);
        assert_eq!(resolve("osx", "thing", &user), Resolution::NotAllowed);
        assert_eq!(resolve("builtins", "eval", &user), Resolution::Blocked);
        assert_eq!(resolve("builtins", "print", &user), Resolution::NotAllowed);
        assert_eq!(
            resolve("mymod", "Thing", &user),
            Resolution::Allowed(Global::User(1))
        );
    }
}
