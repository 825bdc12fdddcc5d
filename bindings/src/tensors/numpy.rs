//! The numpy backend: arrays over shared buffers, and plain Python values for
//! torch's other kinds (a dtype's name, a size as a tuple...). Works without torch.

#![allow(unsafe_code)]

use pyo3::prelude::*;
use pyo3::types::PyTuple;

use crate::build::Builder;
use crate::build::{tensor_children, Tensors};
use crate::numpy_api::NumpyApi;
use crate::storages::StorageObject;
use tensorplay::torch::policy::{Builtin, Global};
use tensorplay::torch::DType;
use tensorplay::torch::{Dense, Dims, StorageId, TensorKind, TensorNode};
use tensorplay::torch::{Node, TensorId, Torch};
use tensorplay::value::NodeId;

pub struct NumpyTensors<'py> {
    api: NumpyApi<'py>,
    /// By storage index: the memory arrays view.
    storages: Vec<Option<StorageObject<'py>>>,
}

impl<'py> NumpyTensors<'py> {
    pub fn new(api: NumpyApi<'py>, storages: Vec<Option<StorageObject<'py>>>) -> Self {
        NumpyTensors { api, storages }
    }

    fn dense(&self, b: &Builder<'_, 'py>, d: &Dense) -> PyResult<Bound<'py, PyAny>> {
        let descr = (self.api.descr(d.dtype)?).ok_or_else(|| b.unsupported(no_numpy(d.dtype)))?;
        let buf = match self
            .storages
            .get(d.storage.index())
            .and_then(Option::as_ref)
        {
            Some(StorageObject::Numpy(buf)) => buf,
            _ => return Err(b.unsupported("storage not prepared".into())),
        };
        let itemsize = d.dtype.itemsize();
        let strides: Vec<u64> = d.stride.iter().map(|s| s * itemsize).collect();
        // An empty view may start anywhere, even past its storage: it reads nothing,
        // and numpy keeps no offset.
        let byte_offset = if d.shape.contains(&0) {
            0
        } else {
            d.offset
                .checked_mul(itemsize)
                .and_then(|b| usize::try_from(b).ok())
                .ok_or_else(|| b.unsupported("offset too large".into()))?
        };
        // SAFETY: `Dense::validate` checked offset and extent against the storage size
        // when the tensor was created, and the buffer holds exactly that storage.
        unsafe { self.api.view(&descr, buf, byte_offset, &d.shape, &strides) }
    }
}

fn no_numpy(dtype: DType) -> String {
    format!(
        "numpy has no dtype for torch.{}; load with backend='torch'",
        dtype.name()
    )
}

impl<'a, 'py> Tensors<'a, 'py> for NumpyTensors<'py> {
    /// The storage's bytes as a flat array of its dtype (of bytes when numpy
    /// has no such dtype).
    fn storage(&self, b: &Builder<'a, 'py>, id: StorageId) -> PyResult<Bound<'py, PyAny>> {
        let storage = (b.checkpoint.storages.get(id.index()))
            .ok_or_else(|| b.unsupported("unknown storage".into()))?;
        let dtype = storage.decl.dtype;
        let view_dtype = if dtype.numpy().is_some() {
            dtype
        } else {
            DType::UInt8
        };
        let n = storage.decl.nbytes / view_dtype.itemsize();
        let dense = Dense {
            storage: id,
            dtype: view_dtype,
            offset: 0,
            shape: Dims::from(&[n][..]),
            stride: Dims::from(&[1][..]),
        };
        self.dense(b, &dense)
    }

    fn tensor(&self, b: &Builder<'a, 'py>, id: TensorId) -> PyResult<Bound<'py, PyAny>> {
        let py = b.py;
        let t = b.arena().tensor(id);
        match &t.kind {
            TensorKind::Dense(d) => {
                let array = self.dense(b, d)?;
                if t.conj || t.neg {
                    return b
                        .helpers
                        .call_method1("apply_conj_neg", (array, t.conj, t.neg));
                }
                Ok(array)
            }
            TensorKind::Empty { dtype } => {
                let descr =
                    (self.api.descr(*dtype)?).ok_or_else(|| b.unsupported(no_numpy(*dtype)))?;
                py.import("numpy")?.call_method1("empty", (0, descr))
            }
            TensorKind::Meta {
                dtype,
                shape,
                stride,
            } => b.helpers.call_method1(
                "meta_spec",
                (
                    dtype.name(),
                    PyTuple::new(py, shape.iter().copied())?,
                    PyTuple::new(py, stride.iter().copied())?,
                ),
            ),
            TensorKind::Parameter { data, .. } => b.built(*data),
            TensorKind::FromType { base, cls, .. } => {
                let plain = matches!(
                    b.node(*cls),
                    Node::Domain(Torch::Global(Global::Builtin(Builtin::Tensor)))
                );
                if plain {
                    b.built(*base)
                } else {
                    Err(b.unsupported("the numpy backend cannot hold a tensor subclass; load with backend='torch'".into()))
                }
            }
            other => Err(b.unsupported(format!(
                "the numpy backend cannot hold a {} tensor; load with backend='torch'",
                TensorNode::new(other.clone(), false).kind_name()
            ))),
        }
    }

    /// numpy keeps only the tensor of a tensor-with-attributes; building
    /// `torch.Tensor` itself would need torch.
    fn children(&self, t: &TensorNode) -> Vec<NodeId> {
        match &t.kind {
            TensorKind::FromType { base, .. } => vec![*base],
            _ => tensor_children(t),
        }
    }

    fn arrays_unhashable(&self) -> bool {
        true
    }
}
