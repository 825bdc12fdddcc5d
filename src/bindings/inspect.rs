//! `_core.inspect`: a checkpoint's structure without reading any payload byte and
//! without torch. Values are built as the numpy backend builds them, and every
//! tensor becomes a description of where its bytes are.

use std::collections::HashMap;
use std::sync::Arc;

use pyo3::prelude::*;
use pyo3::types::{PyDict, PyTuple};

use crate::archive::source::MapMode;
use crate::bindings::build::{Backend, Builder};
use crate::bindings::errors::to_pyerr;
use crate::bindings::load::{open_source, options_from};
use crate::bindings::numpy_api::NumpyApi;
use crate::checkpoint::{self, Format};
use crate::torch::tensor::{Dense, TensorKind, TensorNode};
use crate::torch::value::{Node, Torch};

impl<'py> Builder<'_, 'py> {
    /// A `TensorInfo` for a tensor node; `parameter` when it is a Parameter's data.
    pub(crate) fn describe_tensor(
        &self,
        t: &TensorNode,
        parameter: bool,
    ) -> PyResult<Bound<'py, PyAny>> {
        let py = self.py;
        let info = PyDict::new(py);
        info.set_item("requires_grad", t.requires_grad)?;
        info.set_item("parameter", parameter)?;
        info.set_item("layout", t.kind_name())?;
        let dense = |d: &Dense, info: &Bound<'py, PyDict>| -> PyResult<()> {
            let storage = self.checkpoint.storage(d.storage);
            info.set_item("dtype", d.dtype.name())?;
            info.set_item("shape", PyTuple::new(py, d.shape.iter().copied())?)?;
            info.set_item("stride", PyTuple::new(py, d.stride.iter().copied())?)?;
            info.set_item("storage", storage.map(|s| s.decl.key.to_string()))?;
            info.set_item("storage_offset", d.offset)?;
            info.set_item("offset", self.checkpoint.data_offset(d.storage))?;
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
                let inner = match self.node(*data) {
                    Node::Domain(Torch::Tensor(inner)) => self.checkpoint.arena.tensor(*inner),
                    // What an allowlisted function makes (torch's jagged NestedTensor)
                    // is only known by running it: the layout says what it is.
                    _ if matches!(t.kind, TensorKind::FromType { .. }) => {
                        return self.helpers.call_method("tensor_info", (), Some(&info));
                    }
                    _ => {
                        return Err(pyo3::exceptions::PyValueError::new_err(
                            "a parameter without a tensor",
                        ))
                    }
                };
                let is_param = matches!(t.kind, TensorKind::Parameter { .. });
                let described = self.describe_tensor(inner, is_param)?;
                return if is_param {
                    described.call_method("_replace", (), Some(&info_subset(py, t)?))
                } else {
                    Ok(described)
                };
            }
            TensorKind::Sparse { size, parts, .. } => {
                info.set_item("shape", PyTuple::new(py, size.iter().copied())?)?;
                // The values are the last component; their dtype and device are the tensor's.
                let values = parts.last().and_then(|v| self.dense_part(*v));
                info.set_item("dtype", values.map(|d| d.dtype.name()))?;
                info.set_item("device", values.and_then(|d| self.location(d)))?;
            }
            TensorKind::Nested { buffer, .. } => {
                let buffer = self.dense_part(*buffer);
                info.set_item("dtype", buffer.map(|d| d.dtype.name()))?;
                info.set_item("device", buffer.and_then(|d| self.location(d)))?;
            }
            TensorKind::TorchCall { .. } => {}
        }
        self.helpers.call_method("tensor_info", (), Some(&info))
    }
}

impl Builder<'_, '_> {
    fn dense_part(&self, id: crate::value::NodeId) -> Option<&Dense> {
        match self.node(id) {
            Node::Domain(Torch::Tensor(t)) => match &self.checkpoint.arena.tensor(*t).kind {
                TensorKind::Dense(d) => Some(d),
                _ => None,
            },
            _ => None,
        }
    }

    /// Where the storage under `d` was saved, as the file names it ("cpu", "cuda:0").
    fn location(&self, d: &Dense) -> Option<&str> {
        self.checkpoint
            .storage(d.storage)
            .map(|s| &*s.decl.location)
    }
}

fn info_subset<'py>(py: Python<'py>, t: &TensorNode) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("requires_grad", t.requires_grad)?;
    d.set_item("parameter", true)?;
    Ok(d)
}

/// The structure of a checkpoint: `(format, tree)` where every tensor is a `TensorInfo`.
#[pyfunction]
#[pyo3(signature = (source, *, user_names=Vec::new(), user_objects=Vec::new(), limits=None, encoding="utf-8"))]
pub fn inspect<'py>(
    py: Python<'py>,
    source: &Bound<'py, PyAny>,
    user_names: Vec<String>,
    user_objects: Vec<Bound<'py, PyAny>>,
    limits: Option<HashMap<String, u64>>,
    encoding: &str,
) -> PyResult<(String, Bound<'py, PyAny>)> {
    let options = options_from(user_names, limits, encoding, "little")?;
    let source = Arc::new(open_source(py, source, MapMode::ReadOnly)?);
    let checkpoint = py
        .detach(|| checkpoint::open(source, &options))
        .map_err(|e| to_pyerr(py, e))?;
    let format = match checkpoint.format {
        Format::Zip => "torch-zip",
        Format::Legacy => "torch-legacy",
    };
    let helpers = py.import("tensorplay._build")?;
    let storages = checkpoint.storages.iter().map(|_| None).collect();
    let mut builder = Builder::new(
        py,
        &checkpoint,
        Backend::Numpy(NumpyApi::new(py)?),
        storages,
        user_objects,
        helpers,
    );
    builder.inspect = true;
    Ok((format.to_owned(), builder.build(checkpoint.root)?))
}
