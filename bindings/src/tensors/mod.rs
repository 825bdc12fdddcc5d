//! How each backend makes what only it knows: tensors, storages, and torch's
//! other kinds of value (dtypes, sizes, devices, layouts, classes). The builder
//! builds Python's own values and asks these for the rest.

mod inspect;
mod numpy;
mod torch;

use pyo3::prelude::*;
use pyo3::types::{PyString, PyTuple};

use crate::build::Builder;
use tensorplay::torch::policy::Builtin;
use tensorplay::torch::tensor::{Layout, QParams, StorageId, TensorKind, TensorNode};
use tensorplay::torch::value::TensorId;
use tensorplay::value::NodeId;

pub use inspect::InspectTensors;
pub use numpy::NumpyTensors;
pub use torch::TorchTensors;

/// The objects a backend makes for torch's kinds of value. Without torch, its
/// values are plain Python ones (a dtype's name, a size as a tuple): the
/// defaults, which the torch backend replaces.
pub trait Tensors<'a, 'py> {
    /// A built-in global itself: a dtype, a class, a rebuild function...
    fn builtin(&self, b: &Builder<'a, 'py>, builtin: Builtin) -> PyResult<Bound<'py, PyAny>> {
        plain_builtin(b, builtin)
    }
    /// `torch.Size(dims)`.
    fn size(&self, b: &Builder<'a, 'py>, dims: &[i64]) -> PyResult<Bound<'py, PyAny>> {
        Ok(PyTuple::new(b.py, dims.iter().copied())?.into_any())
    }
    /// `torch.device(device)`.
    fn device(&self, b: &Builder<'a, 'py>, device: &str) -> PyResult<Bound<'py, PyAny>> {
        Ok(PyString::new(b.py, device).into_any())
    }
    fn layout(&self, b: &Builder<'a, 'py>, layout: Layout) -> PyResult<Bound<'py, PyAny>> {
        Ok(PyString::new(b.py, layout.name()).into_any())
    }
    /// A storage returned as a value of its own (`t.storage()` pickled at top level).
    fn storage(&self, b: &Builder<'a, 'py>, id: StorageId) -> PyResult<Bound<'py, PyAny>>;
    fn tensor(&self, b: &Builder<'a, 'py>, id: TensorId) -> PyResult<Bound<'py, PyAny>>;
    /// The nodes a tensor needs built before it.
    fn children(&self, t: &TensorNode) -> Vec<NodeId> {
        tensor_children(t)
    }
    /// Whether a tensor is what makes a dict key unhashable (numpy arrays are).
    fn arrays_unhashable(&self) -> bool {
        false
    }
}

/// The globals torch's objects stand for, as Python without torch has them:
/// names, and Python's own classes; anything else is refused, naming torch.
fn plain_builtin<'py>(b: &Builder<'_, 'py>, builtin: Builtin) -> PyResult<Bound<'py, PyAny>> {
    let py = b.py;
    match builtin {
        Builtin::Dtype(d) => Ok(PyString::new(py, d.name()).into_any()),
        Builtin::QScheme(q) => Ok(PyString::new(py, q.name()).into_any()),
        Builtin::OrderedDict => py.import("collections")?.getattr("OrderedDict"),
        Builtin::Counter => py.import("collections")?.getattr("Counter"),
        // Python's own, not torch's: the same objects in either backend.
        Builtin::Set | Builtin::Complex | Builtin::ByteArray | Builtin::Bytes => {
            let full = builtin.full_name();
            py.import("builtins")?
                .getattr(full.trim_start_matches("builtins."))
        }
        Builtin::CodecsEncode => py.import("_codecs")?.getattr("encode"),
        other => Err(b.unsupported(format!(
            "the numpy backend cannot represent the object {}; load with backend='torch'",
            other.full_name()
        ))),
    }
}

/// Every node a tensor's construction refers to.
pub fn tensor_children(t: &TensorNode) -> Vec<NodeId> {
    match &t.kind {
        TensorKind::Dense(_) | TensorKind::Empty { .. } | TensorKind::Meta { .. } => Vec::new(),
        TensorKind::Quantized { params, .. } => match params {
            QParams::PerTensor { .. } => Vec::new(),
            QParams::PerChannel {
                scales,
                zero_points,
                ..
            } => vec![*scales, *zero_points],
        },
        TensorKind::Sparse { parts, .. } => parts.to_vec(),
        TensorKind::Nested {
            buffer,
            sizes,
            strides,
            offsets,
        } => vec![*buffer, *sizes, *strides, *offsets],
        TensorKind::Parameter { data, state } => {
            [Some(*data), *state].into_iter().flatten().collect()
        }
        TensorKind::FromType { base, cls, state } => vec![*base, *cls, *state],
        TensorKind::TorchCall { args, .. } => vec![*args],
    }
}
