//! What the torch semantics build: storages declared by persistent ids, and tensor
//! descriptions that point into them. Every dense tensor's extent is checked
//! against its storage when it is created, before anything could view the bytes.

use std::sync::Arc;

use crate::error::{Error, Location};
use crate::torch::dtype::DType;
use crate::torch::policy::QScheme;
pub use crate::torch::storage_keys::StorageId;
use crate::torch::storage_keys::StorageKey;
use crate::value::NodeId;

/// A storage as a persistent id declares it. The first id with a key decides its
/// dtype and size, as in torch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StorageDecl {
    pub key: StorageKey,
    /// The element type of the storage class (`uint8` for an `UntypedStorage`).
    pub dtype: DType,
    pub nbytes: u64,
    /// The saved location tag (`cpu`, `cuda:0`...).
    pub location: Arc<str>,
    /// Whether the id named a typed (legacy) storage class rather than `UntypedStorage`.
    pub typed: bool,
    /// Element size of the tensors viewing it, when they agree; decides byte swapping.
    pub view_itemsize: Option<u64>,
    /// The largest element size of the tensors viewing it (0: none does). Memory
    /// used in place must be aligned to it: torch's kernels load a complex128 with
    /// 16-byte aligned vector loads, and crash on a storage aligned to 8.
    pub view_alignment: u64,
}

impl StorageDecl {
    /// The alignment its memory needs to be used in place: that of its own element
    /// type and of every tensor viewing it (a C++ element's alignment is its size).
    pub fn alignment(&self) -> u64 {
        self.view_alignment.max(self.dtype.itemsize()).clamp(1, 16)
    }
}

/// The tensor layouts `torch.serialization._get_layout` can name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Layout {
    Strided,
    SparseCoo,
    SparseCsr,
    SparseCsc,
    SparseBsr,
    SparseBsc,
    Jagged,
}

impl Layout {
    pub fn from_name(name: &str) -> Option<Layout> {
        Some(match name.strip_prefix("torch.").unwrap_or(name) {
            "strided" => Layout::Strided,
            "sparse_coo" => Layout::SparseCoo,
            "sparse_csr" => Layout::SparseCsr,
            "sparse_csc" => Layout::SparseCsc,
            "sparse_bsr" => Layout::SparseBsr,
            "sparse_bsc" => Layout::SparseBsc,
            "jagged" => Layout::Jagged,
            _ => return None,
        })
    }

    pub fn name(self) -> &'static str {
        match self {
            Layout::Strided => "strided",
            Layout::SparseCoo => "sparse_coo",
            Layout::SparseCsr => "sparse_csr",
            Layout::SparseCsc => "sparse_csc",
            Layout::SparseBsr => "sparse_bsr",
            Layout::SparseBsc => "sparse_bsc",
            Layout::Jagged => "jagged",
        }
    }
}

/// Dims held without an allocation: every tensor up to 5-D.
const INLINE_DIMS: usize = 5;

/// A shape or stride. Nearly every tensor's fit inline, so describing a tensor
/// costs no allocation for them.
#[derive(Clone, PartialEq, Eq)]
pub enum Dims {
    Inline { len: u8, dims: [u64; INLINE_DIMS] },
    Heap(Box<[u64]>),
}

impl Dims {
    /// `len` zeros, to be filled in place.
    pub fn zeros(len: usize) -> Dims {
        match u8::try_from(len) {
            Ok(n) if len <= INLINE_DIMS => Dims::Inline {
                len: n,
                dims: [0; INLINE_DIMS],
            },
            _ => Dims::Heap(vec![0; len].into_boxed_slice()),
        }
    }
}

impl From<&[u64]> for Dims {
    fn from(values: &[u64]) -> Dims {
        let mut dims = Dims::zeros(values.len());
        dims.copy_from_slice(values);
        dims
    }
}

impl std::ops::Deref for Dims {
    type Target = [u64];

    fn deref(&self) -> &[u64] {
        match self {
            Dims::Inline { len, dims } => dims.get(..usize::from(*len)).unwrap_or_default(),
            Dims::Heap(dims) => dims,
        }
    }
}

impl std::ops::DerefMut for Dims {
    fn deref_mut(&mut self) -> &mut [u64] {
        match self {
            Dims::Inline { len, dims } => dims.get_mut(..usize::from(*len)).unwrap_or_default(),
            Dims::Heap(dims) => dims,
        }
    }
}

impl std::fmt::Debug for Dims {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

/// A strided view of a storage, in elements of `dtype`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Dense {
    pub storage: StorageId,
    pub dtype: DType,
    pub offset: u64,
    pub shape: Dims,
    pub stride: Dims,
}

impl Dense {
    pub fn numel(&self) -> Option<u64> {
        self.shape
            .iter()
            .try_fold(1u64, |acc, d| acc.checked_mul(*d))
    }

    /// Bytes from the start of the storage to one past the last element.
    pub fn extent_bytes(&self) -> Option<u64> {
        let itemsize = self.dtype.itemsize();
        // An empty view reads nothing, wherever it starts (torch allows any offset).
        if self.shape.contains(&0) {
            return Some(0);
        }
        let mut last = self.offset;
        for (size, stride) in self.shape.iter().zip(self.stride.iter()) {
            last = last.checked_add(size.checked_sub(1)?.checked_mul(*stride)?)?;
        }
        last.checked_add(1)?.checked_mul(itemsize)
    }

    /// Refuse a view that reaches outside its storage, or whose numbers overflow.
    pub fn validate(&self, storage: &StorageDecl, at: &Location) -> Result<(), Error> {
        if self.shape.len() != self.stride.len() {
            return Err(Error::tensor(
                format!(
                    "size has {} dimensions but stride has {}",
                    self.shape.len(),
                    self.stride.len()
                ),
                at.clone(),
            ));
        }
        if self.numel().is_none_or(|n| n > MAX_NUMEL) {
            return Err(numel_overflow(&self.shape, at));
        }
        let extent = self.extent_bytes().ok_or_else(|| {
            Error::tensor(
                format!(
                    "the extent of size {:?} stride {:?} overflows",
                    self.shape, self.stride
                ),
                at.clone(),
            )
        })?;
        if extent > storage.nbytes {
            return Err(Error::tensor(
                format!(
                    "a {} tensor of size {:?}, stride {:?} at offset {} needs {} bytes, but storage '{}' has {}",
                    self.dtype.name(),
                    self.shape,
                    self.stride,
                    self.offset,
                    extent,
                    storage.key,
                    storage.nbytes
                ),
                at.clone(),
            ));
        }
        Ok(())
    }
}

/// The most elements a tensor may have: torch keeps the count in an `int64_t`
/// (`TensorImpl::safe_compute_numel`).
pub const MAX_NUMEL: u64 = i64::MAX as u64;

/// Whether torch can hold a tensor of size `shape`: the product, multiplied out
/// in order, never overflows and fits an `int64_t` (torch refuses
/// `(2**62, 4, 0)`, whose product overflows before the 0, but not `(0, 2**62, 4)`).
pub fn numel_fits(shape: &[u64]) -> bool {
    (shape.iter())
        .try_fold(1u64, |acc, d| acc.checked_mul(*d))
        .is_some_and(|n| n <= MAX_NUMEL)
}

/// torch's "numel: integer multiplication overflow", for a tensor of size `shape`.
pub fn numel_overflow(shape: &[u64], at: &Location) -> Error {
    Error::tensor(
        format!("the element count of size {shape:?} overflows torch's 64-bit count"),
        at.clone(),
    )
}

/// Quantization parameters of `_rebuild_qtensor`.
#[derive(Debug, Clone, PartialEq)]
pub enum QParams {
    PerTensor {
        qscheme: QScheme,
        scale: f64,
        zero_point: i64,
    },
    PerChannel {
        qscheme: QScheme,
        scales: NodeId,
        zero_points: NodeId,
        axis: i64,
    },
}

#[derive(Debug, Clone, PartialEq)]
pub enum TensorKind {
    Dense(Dense),
    /// A fresh empty tensor (`torch.Tensor()`, `torch.FloatTensor()`).
    Empty {
        dtype: DType,
    },
    /// A meta tensor: shape and dtype, no storage.
    Meta {
        dtype: DType,
        shape: Dims,
        stride: Dims,
    },
    Quantized {
        dense: Dense,
        params: QParams,
    },
    /// COO: `[indices, values]`; compressed layouts: `[compressed, plain, values]`.
    Sparse {
        layout: Layout,
        parts: Box<[NodeId]>,
        size: Dims,
        coalesced: Option<bool>,
    },
    /// A strided nested tensor over a flat buffer.
    Nested {
        buffer: NodeId,
        sizes: NodeId,
        strides: NodeId,
        offsets: NodeId,
    },
    /// `nn.Parameter(data)`, with optional attribute state.
    Parameter {
        data: NodeId,
        state: Option<NodeId>,
    },
    /// `_rebuild_from_type_v2`: a tensor turned into `cls` (a user global or `torch.Tensor`)
    /// with attribute `state`.
    FromType {
        base: NodeId,
        cls: NodeId,
        state: NodeId,
    },
    /// A rebuild function whose result only torch can produce (wrapper subclasses,
    /// device tensors); the torch backend calls the function with the built arguments.
    TorchCall {
        func: crate::torch::policy::RebuildFn,
        args: NodeId,
    },
}

#[derive(Debug, Clone, PartialEq)]
pub struct TensorNode {
    pub kind: TensorKind,
    pub requires_grad: bool,
    /// Lazy conjugate / negative bits from `_rebuild_tensor_v2`'s metadata.
    pub conj: bool,
    pub neg: bool,
}

impl TensorNode {
    pub fn new(kind: TensorKind, requires_grad: bool) -> Self {
        TensorNode {
            kind,
            requires_grad,
            conj: false,
            neg: false,
        }
    }

    /// A short name of the kind, for error messages ("sparse_coo", "quantized"...).
    pub fn kind_name(&self) -> &'static str {
        match &self.kind {
            TensorKind::Dense(_) | TensorKind::Empty { .. } => "dense",
            TensorKind::Meta { .. } => "meta",
            TensorKind::Quantized { .. } => "quantized",
            TensorKind::Sparse { layout, .. } => layout.name(),
            TensorKind::Nested { .. } => "nested",
            TensorKind::Parameter { .. } => "parameter",
            TensorKind::FromType { .. } => "tensor subclass",
            TensorKind::TorchCall { .. } => "device or wrapper-subclass tensor",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn storage(nbytes: u64) -> StorageDecl {
        StorageDecl {
            key: StorageKey::Number(0),
            dtype: DType::Float32,
            nbytes,
            location: "cpu".into(),
            typed: true,
            view_itemsize: None,
            view_alignment: 0,
        }
    }

    fn dense(offset: u64, shape: &[u64], stride: &[u64]) -> Dense {
        Dense {
            storage: StorageId(0),
            dtype: DType::Float32,
            offset,
            shape: shape.into(),
            stride: stride.into(),
        }
    }

    #[test]
    fn extents_are_checked_against_the_storage() {
        let s = storage(24);
        assert!(dense(0, &[2, 3], &[3, 1])
            .validate(&s, &Location::default())
            .is_ok());
        assert!(dense(1, &[2, 3], &[3, 1])
            .validate(&s, &Location::default())
            .is_err());
        assert!(dense(0, &[4, 3], &[0, 1])
            .validate(&s, &Location::default())
            .is_ok());
        assert!(dense(6, &[0], &[1])
            .validate(&s, &Location::default())
            .is_ok());
        assert!(dense(7, &[0], &[1])
            .validate(&s, &Location::default())
            .is_ok());
        assert!(dense(u64::MAX / 2, &[0, 5], &[1, 1])
            .validate(&s, &Location::default())
            .is_ok());
        assert!(dense(0, &[2], &[1, 1])
            .validate(&s, &Location::default())
            .is_err());
        assert!(dense(u64::MAX, &[2], &[1])
            .validate(&s, &Location::default())
            .is_err());
        assert!(dense(0, &[u64::MAX, u64::MAX], &[1, 1])
            .validate(&s, &Location::default())
            .is_err());
    }
}
