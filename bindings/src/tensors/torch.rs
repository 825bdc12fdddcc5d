//! The torch backend: the objects `torch.load(weights_only=True)` returns.

use std::cell::RefCell;

use pyo3::prelude::*;
use pyo3::types::{PyDict, PyTuple};

use crate::build::Builder;
use crate::build::Tensors;
use crate::errors::wrap_build_error;
use crate::storages::{DimsTuples, StorageObject, TorchStorage};
use crate::torch_api::TorchApi;
use tensorplay::checkpoint::{Format, StorageData};
use tensorplay::torch::policy::Builtin;
use tensorplay::torch::TensorId;
use tensorplay::torch::{Layout, QParams, StorageId, TensorKind, TensorNode};

pub struct TorchTensors<'a, 'py> {
    api: TorchApi<'py>,
    /// By storage index.
    storages: Vec<Option<StorageObject<'py>>>,
    /// By tensor index: tensors already made together with their storage, each
    /// taken by the first node that builds it.
    premade: RefCell<Vec<Option<Bound<'py, PyAny>>>>,
    /// Shapes and strides as tuples, shared.
    dims_tuples: RefCell<DimsTuples<'a, 'py>>,
    /// Under a FakeTensorMode: called on every dense tensor to set its fake device.
    fake: Option<Bound<'py, PyAny>>,
}

impl<'a, 'py> TorchTensors<'a, 'py> {
    pub fn new(
        api: TorchApi<'py>,
        storages: Vec<Option<StorageObject<'py>>>,
        premade: Vec<Option<Bound<'py, PyAny>>>,
        dims_tuples: DimsTuples<'a, 'py>,
        fake: Option<Bound<'py, PyAny>>,
    ) -> Self {
        TorchTensors {
            api,
            storages,
            premade: RefCell::new(premade),
            dims_tuples: RefCell::new(dims_tuples),
            fake,
        }
    }

    fn untyped_storage(&self, b: &Builder<'a, 'py>, id: StorageId) -> PyResult<TorchStorage<'py>> {
        self.storages
            .get(id.index())
            .and_then(Option::as_ref)
            .ok_or_else(|| b.unsupported("storage not prepared".into()))?
            .torch()?
            .ok_or_else(|| b.unsupported("mixed backends".into()))
    }

    fn dims(&self, py: Python<'py>, dims: &'a [u64]) -> PyResult<Bound<'py, PyTuple>> {
        self.dims_tuples.borrow_mut().get(py, dims)
    }
}

fn tuple_of<'py>(py: Python<'py>, dims: &[u64]) -> PyResult<Bound<'py, PyTuple>> {
    PyTuple::new(py, dims.iter().copied())
}

impl<'a, 'py> Tensors<'a, 'py> for TorchTensors<'a, 'py> {
    fn builtin(&self, _: &Builder<'a, 'py>, builtin: Builtin) -> PyResult<Bound<'py, PyAny>> {
        self.api.builtin(builtin)
    }

    fn size(&self, b: &Builder<'a, 'py>, dims: &[i64]) -> PyResult<Bound<'py, PyAny>> {
        self.api
            .size
            .call1((PyTuple::new(b.py, dims.iter().copied())?,))
    }

    fn device(&self, b: &Builder<'a, 'py>, device: &str) -> PyResult<Bound<'py, PyAny>> {
        (self.api.device.call1((device,)))
            .map_err(|e| wrap_build_error(b.py, e, "invalid device", b.location()))
    }

    fn layout(&self, _: &Builder<'a, 'py>, layout: Layout) -> PyResult<Bound<'py, PyAny>> {
        self.api.layout(layout)
    }

    fn storage(&self, b: &Builder<'a, 'py>, id: StorageId) -> PyResult<Bound<'py, PyAny>> {
        let checkpoint = b.checkpoint;
        let storage = (checkpoint.storages.get(id.index()))
            .ok_or_else(|| b.unsupported("unknown storage".into()))?;
        let dtype = self.api.dtype(storage.decl.dtype)?;
        let (untyped, _) = self.untyped_storage(b, id)?;
        // torch's legacy loader marks each storage it allocates (it then fills it
        // from the file); a view is a slice, and unmarked.
        let legacy_root = checkpoint.format == Format::Legacy
            && !matches!(storage.data, StorageData::View { .. });
        if legacy_root {
            untyped.setattr(pyo3::intern!(b.py, "_torch_load_uninitialized"), true)?;
        }
        b.helpers.call_method1("typed_storage", (untyped, dtype))
    }

    fn tensor(&self, b: &Builder<'a, 'py>, id: TensorId) -> PyResult<Bound<'py, PyAny>> {
        let py = b.py;
        let t: &'a TensorNode = b.arena().tensor(id);
        let premade = (self.premade.borrow_mut().get_mut(id.index())).and_then(Option::take);
        let api = &self.api;
        let tensor = match &t.kind {
            TensorKind::Dense(d) => {
                let out = match premade {
                    Some(out) => out,
                    None => {
                        let (storage, device) = self.untyped_storage(b, d.storage)?;
                        let out = match device {
                            None => api.empty(d.dtype)?,
                            Some(device) => api.empty_on(d.dtype, &device)?,
                        };
                        out.call_method1(
                            pyo3::intern!(py, "set_"),
                            (
                                storage,
                                d.offset,
                                self.dims(py, &d.shape)?,
                                self.dims(py, &d.stride)?,
                            ),
                        )?;
                        out
                    }
                };
                if t.conj || t.neg {
                    let md = PyDict::new(py);
                    if t.conj {
                        md.set_item("conj", true)?;
                    }
                    if t.neg {
                        md.set_item("neg", true)?;
                    }
                    b.helpers.call_method1("set_tensor_metadata", (&out, md))?;
                }
                if let Some(fake) = &self.fake {
                    fake.call1((&out,))?;
                }
                out
            }
            TensorKind::Empty { dtype } => api.empty(*dtype)?,
            TensorKind::Meta {
                dtype,
                shape,
                stride,
            } => {
                let dtype = api.dtype(*dtype)?;
                b.helpers.call_method1(
                    "meta_tensor",
                    (dtype, tuple_of(py, shape)?, tuple_of(py, stride)?),
                )?
            }
            TensorKind::Quantized { dense, params } => {
                let (storage, _) = self.untyped_storage(b, dense.storage)?;
                let dtype = api.dtype(dense.dtype)?;
                let qparams = match params {
                    QParams::PerTensor {
                        qscheme,
                        scale,
                        zero_point,
                    } => PyTuple::new(
                        py,
                        [
                            api.torch.getattr(qscheme.name())?,
                            scale.into_pyobject(py)?.into_any(),
                            zero_point.into_pyobject(py)?.into_any(),
                        ],
                    )?,
                    QParams::PerChannel {
                        qscheme,
                        scales,
                        zero_points,
                        axis,
                    } => PyTuple::new(
                        py,
                        [
                            api.torch.getattr(qscheme.name())?,
                            b.built(*scales)?,
                            b.built(*zero_points)?,
                            axis.into_pyobject(py)?.into_any(),
                        ],
                    )?,
                };
                b.helpers.call_method1(
                    "qtensor",
                    (
                        storage,
                        dtype,
                        dense.offset,
                        tuple_of(py, &dense.shape)?,
                        tuple_of(py, &dense.stride)?,
                        qparams,
                    ),
                )?
            }
            TensorKind::Sparse {
                layout,
                parts,
                size,
                coalesced,
            } => {
                let layout = api.layout(*layout)?;
                let parts = parts
                    .iter()
                    .map(|p| b.built(*p))
                    .collect::<PyResult<Vec<_>>>()?;
                b.helpers.call_method1(
                    "sparse_tensor",
                    (
                        layout,
                        PyTuple::new(py, parts)?,
                        tuple_of(py, size)?,
                        *coalesced,
                    ),
                )?
            }
            TensorKind::Nested {
                buffer,
                sizes,
                strides,
                offsets,
            } => b.helpers.call_method1(
                "nested_tensor",
                (
                    b.built(*buffer)?,
                    b.built(*sizes)?,
                    b.built(*strides)?,
                    b.built(*offsets)?,
                ),
            )?,
            TensorKind::Parameter { data, state } => {
                let data = b.built(*data)?;
                let state = match state {
                    Some(s) => b.built(*s)?,
                    None => py.None().into_bound(py),
                };
                return b
                    .helpers
                    .call_method1("parameter", (data, t.requires_grad, state));
            }
            TensorKind::FromType { base, cls, state } => {
                return b.helpers.call_method1(
                    "from_type",
                    (b.built(*base)?, b.built(*cls)?, b.built(*state)?),
                );
            }
            TensorKind::TorchCall { func, args } => {
                let name = Builtin::Rebuild(*func).full_name();
                return b
                    .helpers
                    .call_method1("torch_call", (name, b.built(*args)?));
            }
        };
        if t.requires_grad {
            tensor.call_method1("requires_grad_", (true,))?;
        }
        Ok(tensor)
    }
}
