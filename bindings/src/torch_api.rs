//! The torch objects the builder calls, looked up once per load. Only names we
//! chose are ever looked up here; nothing named by a file is imported.

use std::collections::HashMap;

use pyo3::prelude::*;
use pyo3::types::{PyDict, PyTuple};

use tensorplay::torch::policy::Builtin;
use tensorplay::torch::DType;
use tensorplay::torch::Layout;

pub struct TorchApi<'py> {
    pub torch: Bound<'py, PyModule>,
    empty: Bound<'py, PyAny>,
    empty_strided: Bound<'py, PyAny>,
    frombuffer: Bound<'py, PyAny>,
    empty_args: Bound<'py, PyTuple>,
    empty_kwargs: HashMap<DType, Bound<'py, PyDict>>,
    dtypes: HashMap<DType, Bound<'py, PyAny>>,
    pub parameter: Bound<'py, PyAny>,
    pub size: Bound<'py, PyAny>,
    pub device: Bound<'py, PyAny>,
    pub untyped_storage: Bound<'py, PyAny>,
}

impl<'py> TorchApi<'py> {
    pub fn new(py: Python<'py>) -> PyResult<Self> {
        let torch = py.import("torch")?;
        let cpu = torch.getattr("device")?.call1(("cpu",))?;
        let mut dtypes = HashMap::new();
        let mut empty_kwargs = HashMap::new();
        for dtype in DType::ALL {
            // A torch build may lack the newest dtypes; those simply cannot be built.
            let Ok(d) = torch.getattr(dtype.name()) else {
                continue;
            };
            let kwargs = PyDict::new(py);
            kwargs.set_item("dtype", &d)?;
            kwargs.set_item("device", &cpu)?;
            dtypes.insert(*dtype, d);
            empty_kwargs.insert(*dtype, kwargs);
        }
        Ok(TorchApi {
            empty: torch.getattr("empty")?,
            empty_strided: torch.getattr("empty_strided")?,
            frombuffer: torch.getattr("frombuffer")?,
            empty_args: PyTuple::new(py, [0i64])?,
            empty_kwargs,
            dtypes,
            parameter: torch.getattr("nn")?.getattr("Parameter")?,
            size: torch.getattr("Size")?,
            device: torch.getattr("device")?,
            untyped_storage: torch.getattr("UntypedStorage")?,
            torch,
        })
    }

    pub fn dtype(&self, dtype: DType) -> PyResult<Bound<'py, PyAny>> {
        self.dtypes.get(&dtype).cloned().ok_or_else(|| {
            pyo3::exceptions::PyRuntimeError::new_err(format!(
                "this torch has no dtype torch.{}",
                dtype.name()
            ))
        })
    }

    /// A new empty CPU tensor of `dtype`, to `set_` onto a storage. The device is
    /// explicit so a changed default device cannot move it.
    pub fn empty(&self, dtype: DType) -> PyResult<Bound<'py, PyAny>> {
        self.empty
            .call(&self.empty_args, Some(self.cpu_kwargs(dtype)?))
    }

    /// A new CPU tensor of `dtype`, `shape` and `stride` on a storage of its own,
    /// exactly as large as the view needs.
    pub fn empty_strided(
        &self,
        dtype: DType,
        shape: &Bound<'py, PyTuple>,
        stride: &Bound<'py, PyTuple>,
    ) -> PyResult<Bound<'py, PyAny>> {
        self.empty_strided
            .call((shape, stride), Some(self.cpu_kwargs(dtype)?))
    }

    /// A CPU tensor of `dtype`, `shape` and `stride` over the `len` bytes of
    /// `buffer` from `start`, on a storage of exactly those bytes that keeps
    /// `buffer` alive. `len` is a whole number of elements.
    pub fn over_buffer(
        &self,
        buffer: &Bound<'py, PyAny>,
        dtype: DType,
        (start, len): (usize, usize),
        shape: &Bound<'py, PyTuple>,
        stride: &Bound<'py, PyTuple>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let py = self.torch.py();
        let kwargs = PyDict::new(py);
        kwargs.set_item(pyo3::intern!(py, "dtype"), self.dtype(dtype)?)?;
        kwargs.set_item(
            pyo3::intern!(py, "count"),
            len / dtype.itemsize().max(1) as usize,
        )?;
        kwargs.set_item(pyo3::intern!(py, "offset"), start)?;
        // In place: a view (`as_strided`) would be a tensor with a `_base`.
        self.frombuffer
            .call((buffer,), Some(&kwargs))?
            .call_method1(pyo3::intern!(py, "as_strided_"), (shape, stride))
    }

    fn cpu_kwargs(&self, dtype: DType) -> PyResult<&Bound<'py, PyDict>> {
        self.empty_kwargs.get(&dtype).ok_or_else(|| {
            pyo3::exceptions::PyRuntimeError::new_err(format!(
                "this torch has no dtype torch.{}",
                dtype.name()
            ))
        })
    }

    /// A new empty tensor of `dtype` on `device` (a storage that map_location moved).
    pub fn empty_on(
        &self,
        dtype: DType,
        device: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let kwargs = PyDict::new(self.torch.py());
        kwargs.set_item("dtype", self.dtype(dtype)?)?;
        kwargs.set_item("device", device)?;
        self.empty.call(&self.empty_args, Some(&kwargs))
    }

    pub fn layout(&self, layout: Layout) -> PyResult<Bound<'py, PyAny>> {
        self.torch.getattr(layout.name())
    }

    /// The object a built-in global names, for files that pickle the global itself.
    pub fn builtin(&self, b: Builtin) -> PyResult<Bound<'py, PyAny>> {
        let py = self.torch.py();
        match b {
            Builtin::Dtype(d) => self.dtype(d),
            Builtin::QScheme(q) => self.torch.getattr(q.name()),
            Builtin::Size => Ok(self.size.clone()),
            Builtin::Device => Ok(self.device.clone()),
            Builtin::Parameter => Ok(self.parameter.clone()),
            Builtin::Tensor => self.torch.getattr("Tensor"),
            Builtin::NumpyNdarray => py.import("numpy")?.getattr("ndarray"),
            Builtin::NumpyDtype => py.import("numpy")?.getattr("dtype"),
            // torch's weights-only loader stands a legacy storage class in with an
            // object that carries only its dtype.
            Builtin::StorageType { dtype, .. } => py
                .import("torch.serialization")?
                .getattr("StorageType")?
                .call1((dtype.legacy_storage_name().unwrap_or_default(),)),
            other => {
                let full = other.full_name();
                let (module, name) = full.rsplit_once('.').unwrap_or(("builtins", &full));
                let module = match module {
                    "builtins"
                    | "collections"
                    | "_codecs"
                    | "torch"
                    | "torch.cuda"
                    | "torch.sparse"
                    | "torch.cuda.sparse"
                    | "torch.storage"
                    | "torch._utils"
                    | "torch._tensor"
                    | "torch.serialization"
                    | "torch.nn.parameter" => py.import(module)?,
                    _ => {
                        return Err(pyo3::exceptions::PyRuntimeError::new_err(format!(
                            "no object for {full}"
                        )))
                    }
                };
                module.getattr(name)
            }
        }
    }
}
