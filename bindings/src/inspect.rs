//! `_core.inspect`: a checkpoint's structure without reading any payload byte and
//! without torch. Values are built as the numpy backend builds them, and every
//! tensor becomes a description of where its bytes are.

use std::sync::Arc;

use pyo3::prelude::*;

use crate::build::Builder;
use crate::errors::to_pyerr;
use crate::load::open_source;
use crate::options::check_user_globals;
use crate::options::{load_options, unknown_globals, Encoding, LimitOverrides};
use crate::tensors::InspectTensors;
use tensorplay::archive::source::MapMode;
use tensorplay::checkpoint::{self, Endianness, Format};

/// The structure of a checkpoint: `(format, tree)` where every tensor is a `TensorInfo`.
#[pyfunction]
#[pyo3(signature = (source, *, user_names=Vec::new(), user_objects=Vec::new(), limits=LimitOverrides::default(), encoding=Encoding::default(), stub=false))]
pub fn inspect<'py>(
    py: Python<'py>,
    source: &Bound<'py, PyAny>,
    user_names: Vec<String>,
    user_objects: Vec<Bound<'py, PyAny>>,
    limits: LimitOverrides,
    encoding: Encoding,
    stub: bool,
) -> PyResult<(String, Bound<'py, PyAny>)> {
    check_user_globals(&user_names, &user_objects)?;
    let mut options = load_options(user_names, limits, encoding, Endianness::Little);
    options.unknown_globals = unknown_globals(stub);
    let max_stream = options.limits.max_inflated_bytes;
    let source = Arc::new(open_source(py, source, MapMode::ReadOnly, max_stream)?);
    let checkpoint = py
        .detach(|| checkpoint::open(source, &options))
        .map_err(|e| to_pyerr(py, e))?;
    let format = match checkpoint.format {
        Format::Zip => "torch-zip",
        Format::Legacy => "torch-legacy",
    };
    let helpers = py.import("tensorplay._build")?;
    let builder = Builder::new(&checkpoint, Box::new(InspectTensors), user_objects, helpers);
    Ok((format.to_owned(), builder.build(checkpoint.root)?))
}
