//! `_core.loads`: one bare pickle (a TensorDict sidecar, a distributed checkpoint's
//! `.metadata`), run by the restricted VM with the GIL released and built with
//! either backend's semantics. Nothing in it may refer to a storage.

use pyo3::prelude::*;

use crate::build::Builder;
use crate::errors::to_pyerr;
use crate::load::{let_go_of, open_source, return_freed_memory, worth_returning};
use crate::numpy_api::NumpyApi;
use crate::options::{
    check_user_globals, load_options, unknown_globals, Backend, Encoding, LimitOverrides,
};
use crate::storages::DimsTuples;
use crate::tensors::{NumpyTensors, Tensors, TorchTensors};
use crate::torch_api::TorchApi;
use tensorplay::archive::source::MapMode;
use tensorplay::checkpoint::{Endianness, Trailing};
use tensorplay::raw;

/// Decode the pickle `data` (bytes or a buffer, or the path of a file that
/// holds only it, opened as `load` opens one)
/// under the weights-only rules; `name` is the file it came from, for error
/// messages. With `stream`, bytes after its STOP are left alone and the result
/// is `(object, bytes the pickle took)`. torch's values (dtypes, sizes,
/// layouts) are torch's objects with the torch backend, names and tuples with
/// numpy's. A file's bytes are let go once the VM has run, before the objects
/// are built, and a big pickle's parsed form once they are, as `load` does
/// (a distributed checkpoint's `.metadata` is one).
#[pyfunction]
#[pyo3(signature = (data, *, name="<pickle>", backend=Backend::Numpy, user_names=Vec::new(), user_objects=Vec::new(), limits=LimitOverrides::default(), encoding=Encoding::default(), stub=false, stream=false))]
#[allow(clippy::too_many_arguments)]
pub fn loads<'py>(
    py: Python<'py>,
    data: &Bound<'py, PyAny>,
    name: &str,
    backend: Backend,
    user_names: Vec<String>,
    user_objects: Vec<Bound<'py, PyAny>>,
    limits: LimitOverrides,
    encoding: Encoding,
    stub: bool,
    stream: bool,
) -> PyResult<Bound<'py, PyAny>> {
    check_user_globals(&user_names, &user_objects)?;
    let mut options = load_options(user_names, limits, encoding, Endianness::Little);
    options.unknown_globals = unknown_globals(stub);
    if stream {
        options.trailing = Trailing::Left;
    }
    let source = open_source(
        py,
        data,
        MapMode::ReadOnly,
        options.limits.max_inflated_bytes,
    )?;
    let opened = py.detach(|| raw::open_pickle(source.bytes(), name, &options));
    // The bytes go before the objects are built: a Python bytes object's
    // reference is dropped with the GIL held, and a stream's copy before the trim.
    drop(source);
    if worth_returning(&opened) {
        py.detach(return_freed_memory);
    }
    let checkpoint = opened.map_err(|e| to_pyerr(py, e))?;
    let tensors: Box<dyn Tensors> = match backend {
        Backend::Numpy => Box::new(NumpyTensors::new(NumpyApi::new(py)?, Vec::new())),
        Backend::Torch => Box::new(TorchTensors::new(
            TorchApi::new(py)?,
            Vec::new(),
            Vec::new(),
            DimsTuples::default(),
            None,
        )),
    };
    let helpers = py.import("tensorplay._build")?;
    let loaded = Builder::new(&checkpoint, tensors, user_objects, helpers).build(checkpoint.root);
    let end = checkpoint.end;
    let_go_of(py, checkpoint);
    if stream {
        return Ok((loaded?, end).into_pyobject(py)?.into_any());
    }
    loaded
}
