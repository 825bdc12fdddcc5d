//! `_core.loads`: one bare pickle (a TensorDict sidecar), run by the restricted VM
//! with the GIL released and built with the numpy backend's semantics. Nothing in
//! it may refer to a storage.

use std::collections::HashMap;

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

use crate::bindings::build::{Backend, Builder};
use crate::bindings::errors::to_pyerr;
use crate::bindings::load::options_from;
use crate::bindings::numpy_api::NumpyApi;
use crate::raw;

/// Decode the pickle `data` under the weights-only rules; `name` is the file it
/// came from, for error messages.
#[pyfunction]
#[pyo3(signature = (data, *, name="<pickle>", user_names=Vec::new(), user_objects=Vec::new(), limits=None, encoding="utf-8"))]
pub fn loads<'py>(
    py: Python<'py>,
    data: &[u8],
    name: &str,
    user_names: Vec<String>,
    user_objects: Vec<Bound<'py, PyAny>>,
    limits: Option<HashMap<String, u64>>,
    encoding: &str,
) -> PyResult<Bound<'py, PyAny>> {
    if user_objects.len() != user_names.len() {
        return Err(PyValueError::new_err(
            "user_names and user_objects differ in length",
        ));
    }
    let options = options_from(user_names, limits, encoding, "little")?;
    let checkpoint = py
        .detach(|| raw::open_pickle(data, name, &options))
        .map_err(|e| to_pyerr(py, e))?;
    let backend = Backend::Numpy(NumpyApi::new(py)?);
    let helpers = py.import("tensorplay._build")?;
    let builder = Builder::new(py, &checkpoint, backend, Vec::new(), user_objects, helpers);
    builder.build(checkpoint.root)
}
