//! `_core.load`: open and validate with the GIL released, give every storage its
//! memory (a view of the mapping, or a fresh allocation filled in parallel with
//! the GIL released), then build the objects in one pass.

#![allow(unsafe_code)]

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PySlice};

use crate::archive::source::{MapMode, Source};
use crate::bindings::build::{Backend, Builder, StorageObject};
use crate::bindings::errors::to_pyerr;
use crate::bindings::mapping::MappedFile;
use crate::bindings::numpy_api::{Buffer, NumpyApi};
use crate::bindings::torch_api::TorchApi;
use crate::checkpoint::{self, Checkpoint, Endianness, LoadOptions, StorageData};
use crate::fill::{self, FillJob};
use crate::limits::Limits;
use crate::pickle::globals::UserGlobals;
use crate::pickle::machine::StringEncoding;
use crate::torch::tensor::StorageId;

pub fn limits_from(overrides: Option<HashMap<String, u64>>) -> PyResult<Limits> {
    let mut limits = Limits::default();
    for (name, value) in overrides.unwrap_or_default() {
        if !limits.set(&name, value) {
            return Err(PyValueError::new_err(format!(
                "unknown limit {name:?}; known: {}",
                Limits::NAMES.join(", ")
            )));
        }
    }
    Ok(limits)
}

pub fn options_from(
    user_names: Vec<String>,
    limits: Option<HashMap<String, u64>>,
    encoding: &str,
    endianness: &str,
) -> PyResult<LoadOptions> {
    Ok(LoadOptions {
        limits: limits_from(limits)?,
        user_globals: UserGlobals::new(user_names),
        encoding: StringEncoding::from_name(encoding)
            .ok_or_else(|| PyValueError::new_err(format!("unsupported encoding {encoding:?}")))?,
        endianness: match endianness {
            "native" => Endianness::Native,
            "little" => Endianness::Little,
            "big" => Endianness::Big,
            other => {
                return Err(PyValueError::new_err(format!(
                    "unknown endianness {other:?}"
                )))
            }
        },
    })
}

/// The bytes of `source`: a path (mapped) or a bytes object (copied).
pub fn open_source(py: Python<'_>, source: &Bound<'_, PyAny>, mode: MapMode) -> PyResult<Source> {
    if let Ok(bytes) = source.cast::<PyBytes>() {
        return Ok(Source::from_vec(bytes.as_bytes().to_vec()));
    }
    let path: PathBuf = source.extract()?;
    py.detach(|| Source::open(&path, mode))
        .map_err(|e| to_pyerr(py, e))
}

#[pyfunction]
#[pyo3(signature = (source, *, backend, mmap=false, shared=false, user_names=Vec::new(), user_objects=Vec::new(), limits=None, encoding="utf-8", endianness="little", threads=None))]
#[allow(clippy::too_many_arguments)]
pub fn load<'py>(
    py: Python<'py>,
    source: &Bound<'py, PyAny>,
    backend: &str,
    mmap: bool,
    shared: bool,
    user_names: Vec<String>,
    user_objects: Vec<Bound<'py, PyAny>>,
    limits: Option<HashMap<String, u64>>,
    encoding: &str,
    endianness: &str,
    threads: Option<usize>,
) -> PyResult<Bound<'py, PyAny>> {
    if user_objects.len() != user_names.len() {
        return Err(PyValueError::new_err(
            "user_names and user_objects differ in length",
        ));
    }
    let options = options_from(user_names, limits, encoding, endianness)?;
    let mode = match (mmap, shared) {
        (false, _) => MapMode::ReadOnly,
        (true, false) => MapMode::Private,
        (true, true) => MapMode::Shared,
    };
    let raw = open_source(py, source, mode)?;
    let (mapped, source) = if mmap && raw.is_writable() {
        let (file, arc) = MappedFile::new(raw);
        (Some(Bound::new(py, file)?), arc)
    } else {
        (None, Arc::new(raw))
    };
    let checkpoint = py
        .detach(|| checkpoint::open(source, &options))
        .map_err(|e| to_pyerr(py, e))?;
    let backend = match backend {
        "torch" => Backend::Torch(TorchApi::new(py)?),
        "numpy" => Backend::Numpy(NumpyApi::new(py)?),
        other => return Err(PyValueError::new_err(format!("unknown backend {other:?}"))),
    };
    let (storages, jobs) = prepare_storages(py, &checkpoint, &backend, mapped.as_ref())?;
    let threads = threads.unwrap_or_else(fill::default_threads);
    py.detach(|| {
        let jobs = jobs
            .into_iter()
            .map(|(storage, ptr, len)| FillJob {
                storage,
                // SAFETY: each pointer is the start of a distinct allocation of `len`
                // bytes owned by a Python object in `storages`, which outlives this
                // call; nothing else can reach those objects until we return them.
                dst: unsafe { std::slice::from_raw_parts_mut(ptr as *mut u8, len) },
            })
            .collect();
        fill::fill(&checkpoint, jobs, threads)
    })
    .map_err(|e| to_pyerr(py, e))?;
    let helpers = py.import("tensorplay._build")?;
    Builder::new(py, &checkpoint, backend, storages, user_objects, helpers).build(checkpoint.root)
}

type Jobs = Vec<(StorageId, usize, usize)>;

/// Give every storage its Python object: a view of the mapping where the bytes can
/// be used in place, otherwise fresh memory that `fill` copies into.
fn prepare_storages<'py>(
    py: Python<'py>,
    checkpoint: &Checkpoint,
    backend: &Backend<'py>,
    mapped: Option<&Bound<'py, MappedFile>>,
) -> PyResult<(Vec<Option<StorageObject<'py>>>, Jobs)> {
    let mut objects: Vec<Option<StorageObject<'py>>> =
        Vec::with_capacity(checkpoint.storages.len());
    let mut jobs = Vec::new();
    let mut whole_torch: Option<Bound<'py, PyAny>> = None;
    for (i, storage) in checkpoint.storages.iter().enumerate() {
        let id = StorageId(i as u32);
        let nbytes = usize::try_from(storage.decl.nbytes)
            .map_err(|_| PyValueError::new_err("storage too large"))?;
        if let StorageData::View { root, offset } = storage.data {
            let offset = offset as usize;
            let object = match (backend, objects.get(root.index()).and_then(Option::as_ref)) {
                (Backend::Torch(_), Some(StorageObject::Torch(root))) => {
                    StorageObject::Torch(root.get_item(PySlice::new(
                        py,
                        offset as isize,
                        (offset + nbytes) as isize,
                        1,
                    ))?)
                }
                (Backend::Numpy(_), Some(StorageObject::Numpy(root))) => {
                    StorageObject::Numpy(Buffer {
                        base: root.base.clone(),
                        // SAFETY: the view was checked to lie inside its root storage.
                        ptr: unsafe { root.ptr.add(offset) },
                        writable: root.writable,
                    })
                }
                _ => return Err(PyValueError::new_err("a view storage precedes its root")),
            };
            objects.push(Some(object));
            continue;
        }
        let in_place = mapped.and_then(|m| checkpoint.mapped_range(id).map(|r| (m, r)));
        let object = match (backend, in_place) {
            (Backend::Torch(api), Some((file, (start, len)))) if len > 0 => {
                if whole_torch.is_none() {
                    let kwargs = pyo3::types::PyDict::new(py);
                    kwargs.set_item("dtype", api.dtype(crate::torch::dtype::DType::UInt8)?)?;
                    let whole = api
                        .torch
                        .getattr("frombuffer")?
                        .call((file,), Some(&kwargs))?;
                    whole_torch = Some(whole.call_method0("untyped_storage")?);
                }
                let whole = whole_torch
                    .as_ref()
                    .ok_or_else(|| PyValueError::new_err("mapping"))?;
                StorageObject::Torch(whole.get_item(PySlice::new(
                    py,
                    start as isize,
                    (start + len) as isize,
                    1,
                ))?)
            }
            (Backend::Numpy(_), Some((file, (start, _)))) => {
                let f = file.get();
                StorageObject::Numpy(Buffer {
                    base: file.clone().into_any(),
                    // SAFETY: `mapped_range` lies inside the mapping.
                    ptr: unsafe { f.ptr().add(start) },
                    writable: f.is_writable(),
                })
            }
            (Backend::Torch(api), _) => {
                let st = api.untyped_storage.call1((nbytes,))?;
                if nbytes > 0 {
                    let ptr: usize = st.call_method0("data_ptr")?.extract()?;
                    jobs.push((id, ptr, nbytes));
                }
                StorageObject::Torch(st)
            }
            (Backend::Numpy(api), _) => {
                let buf = api.alloc(nbytes);
                if nbytes > 0 {
                    jobs.push((id, buf.ptr as usize, nbytes));
                }
                StorageObject::Numpy(buf)
            }
        };
        objects.push(Some(object));
    }
    Ok((objects, jobs))
}
