//! Inspection: values built as the numpy backend builds them, and every tensor a
//! description of its dtype, shape and where its bytes are, without reading one.

use pyo3::prelude::*;
use pyo3::types::{PyDict, PyTuple};

use crate::build::Builder;
use crate::build::Tensors;
use tensorplay::torch::{Dense, Dims, StorageId, TensorKind, TensorNode};
use tensorplay::torch::{Node, TensorId, Torch};
use tensorplay::value::NodeId;

pub struct InspectTensors;

impl<'a, 'py> Tensors<'a, 'py> for InspectTensors {
    /// A storage, described as the flat tensor of its dtype it holds.
    fn storage(&self, b: &Builder<'a, 'py>, id: StorageId) -> PyResult<Bound<'py, PyAny>> {
        let decl = &(b.checkpoint.storages.get(id.index()))
            .ok_or_else(|| b.unsupported("unknown storage".into()))?
            .decl;
        let n = decl.nbytes / decl.dtype.itemsize().max(1);
        let dense = Dense {
            storage: id,
            dtype: decl.dtype,
            offset: 0,
            shape: Dims::from(&[n][..]),
            stride: Dims::from(&[1][..]),
        };
        self.describe(b, &TensorNode::new(TensorKind::Dense(dense), false), false)
    }

    fn tensor(&self, b: &Builder<'a, 'py>, id: TensorId) -> PyResult<Bound<'py, PyAny>> {
        self.describe(b, b.arena().tensor(id), false)
    }

    /// A description reads no other node.
    fn children(&self, _: &TensorNode) -> Vec<NodeId> {
        Vec::new()
    }
}

impl InspectTensors {
    /// A `TensorInfo` for a tensor node; `parameter` when it is a Parameter's data.
    fn describe<'py>(
        &self,
        b: &Builder<'_, 'py>,
        t: &TensorNode,
        parameter: bool,
    ) -> PyResult<Bound<'py, PyAny>> {
        let py = b.py;
        let info = PyDict::new(py);
        info.set_item("requires_grad", t.requires_grad)?;
        info.set_item("parameter", parameter)?;
        info.set_item("layout", t.kind_name())?;
        let dense = |d: &Dense, info: &Bound<'py, PyDict>| -> PyResult<()> {
            let storage = b.checkpoint.storage(d.storage);
            info.set_item("dtype", d.dtype.name())?;
            info.set_item("shape", PyTuple::new(py, d.shape.iter().copied())?)?;
            info.set_item("stride", PyTuple::new(py, d.stride.iter().copied())?)?;
            info.set_item("storage", storage.map(|s| s.decl.key.to_string()))?;
            info.set_item("storage_offset", d.offset)?;
            info.set_item("offset", b.checkpoint.data_offset(d.storage))?;
            info.set_item("nbytes", storage.map_or(0, |s| s.decl.nbytes))?;
            info.set_item("device", storage.map(|s| &*s.decl.location))?;
            info.set_item("layout", "strided")
        };
        match &t.kind {
            TensorKind::Dense(d) => dense(d, &info)?,
            TensorKind::Quantized { dense: d, .. } => {
                dense(d, &info)?;
                info.set_item("layout", "quantized")?;
            }
            TensorKind::Meta {
                dtype,
                shape,
                stride,
            } => {
                info.set_item("dtype", dtype.name())?;
                info.set_item("shape", PyTuple::new(py, shape.iter().copied())?)?;
                info.set_item("stride", PyTuple::new(py, stride.iter().copied())?)?;
                info.set_item("layout", "meta")?;
                info.set_item("device", "meta")?;
            }
            TensorKind::Empty { dtype } => {
                info.set_item("dtype", dtype.name())?;
                info.set_item("shape", PyTuple::new(py, [0u64])?)?;
                info.set_item("stride", PyTuple::new(py, [1u64])?)?;
            }
            TensorKind::Parameter { data, .. } | TensorKind::FromType { base: data, .. } => {
                let inner = match b.node(*data) {
                    Node::Domain(Torch::Tensor(inner)) => b.checkpoint.arena.tensor(*inner),
                    // What an allowlisted function makes (torch's jagged NestedTensor)
                    // is only known by running it: the layout says what it is.
                    _ if matches!(t.kind, TensorKind::FromType { .. }) => {
                        return b.helpers.call_method("tensor_info", (), Some(&info));
                    }
                    _ => {
                        return Err(pyo3::exceptions::PyValueError::new_err(
                            "a parameter without a tensor",
                        ))
                    }
                };
                let is_param = matches!(t.kind, TensorKind::Parameter { .. });
                let described = self.describe(b, inner, is_param)?;
                return if is_param {
                    described.call_method("_replace", (), Some(&info_subset(py, t)?))
                } else {
                    Ok(described)
                };
            }
            TensorKind::Sparse { size, parts, .. } => {
                info.set_item("shape", PyTuple::new(py, size.iter().copied())?)?;
                // The values are the last component; their dtype and device are the tensor's.
                let values = parts.last().and_then(|v| dense_part(b, *v));
                info.set_item("dtype", values.map(|d| d.dtype.name()))?;
                info.set_item("device", values.and_then(|d| location(b, d)))?;
            }
            TensorKind::Nested { buffer, .. } => {
                let buffer = dense_part(b, *buffer);
                info.set_item("dtype", buffer.map(|d| d.dtype.name()))?;
                info.set_item("device", buffer.and_then(|d| location(b, d)))?;
            }
            TensorKind::TorchCall { .. } => {}
        }
        b.helpers.call_method("tensor_info", (), Some(&info))
    }
}

/// The dense tensor node `id` is, if it is one.
fn dense_part<'a>(b: &Builder<'a, '_>, id: NodeId) -> Option<&'a Dense> {
    match b.node(id) {
        Node::Domain(Torch::Tensor(t)) => match &b.checkpoint.arena.tensor(*t).kind {
            TensorKind::Dense(d) => Some(d),
            _ => None,
        },
        _ => None,
    }
}

/// Where the storage under `d` was saved, as the file names it ("cpu", "cuda:0").
fn location<'a>(b: &Builder<'a, '_>, d: &Dense) -> Option<&'a str> {
    b.checkpoint.storage(d.storage).map(|s| &*s.decl.location)
}

fn info_subset<'py>(py: Python<'py>, t: &TensorNode) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("requires_grad", t.requires_grad)?;
    d.set_item("parameter", true)?;
    Ok(d)
}
