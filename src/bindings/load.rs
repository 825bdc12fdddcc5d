//! `_core.load`: open and validate with the GIL released, give every storage its
//! memory (a view of the mapping, or a fresh allocation filled in parallel with
//! the GIL released), then build the objects in one pass.

#![allow(unsafe_code)]

use std::cell::RefCell;
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyInt};

use crate::archive::source::{HeldBytes, MapMode, Source};
use crate::bindings::build::{Backend, Builder};
use crate::bindings::errors::to_pyerr;
use crate::bindings::mapping::MappedFile;
use crate::bindings::numpy_api::NumpyApi;
use crate::bindings::storages::{self, DataMode, Placement};
use crate::bindings::torch_api::TorchApi;
use crate::checkpoint::{self, Endianness, Format, LoadOptions};
use crate::fill::{self, FillJob};
use crate::limits::{Limit, Limits};
use crate::pickle::machine::StringEncoding;
use crate::torch::policy::UserGlobals;

pub fn limits_from(overrides: Option<HashMap<String, u64>>) -> PyResult<Limits> {
    let mut limits = Limits::default();
    for (name, value) in overrides.into_iter().flatten() {
        let limit = Limit::from_name(&name).ok_or_else(|| {
            let known: Vec<&str> = Limit::ALL.iter().map(|l| l.name()).collect();
            PyValueError::new_err(format!(
                "unknown limit {name:?}; known: {}",
                known.join(", ")
            ))
        })?;
        limits.set(limit, value);
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

/// A Python bytes object, read in place: its contents are immutable and live as
/// long as the reference held here.
struct PythonBytes {
    _owner: Py<PyBytes>,
    start: *const u8,
    len: usize,
}

// SAFETY: the pointer is into an immutable bytes object that `_owner` keeps
// alive; reading it from any thread, with or without the GIL, is sound.
unsafe impl Send for PythonBytes {}
// SAFETY: as for Send: shared reads of immutable memory.
unsafe impl Sync for PythonBytes {}

impl HeldBytes for PythonBytes {
    fn bytes(&self) -> &[u8] {
        // SAFETY: `start` and `len` describe the bytes object's buffer, which
        // neither moves nor changes while `_owner` holds it.
        unsafe { std::slice::from_raw_parts(self.start, self.len) }
    }
}

/// The bytes of `source`: a path (mapped), the descriptor of a regular file a
/// file object holds (mapped read-only), or a bytes object (read in place).
pub fn open_source(py: Python<'_>, source: &Bound<'_, PyAny>, mode: MapMode) -> PyResult<Source> {
    if let Ok(bytes) = source.cast::<PyBytes>() {
        let data = bytes.as_bytes();
        return Ok(Source::Held(Box::new(PythonBytes {
            start: data.as_ptr(),
            len: data.len(),
            _owner: bytes.clone().unbind(),
        })));
    }
    if let Ok(fd) = source.cast::<PyInt>() {
        let fd: std::os::fd::RawFd = fd.extract()?;
        // SAFETY: the caller's file object owns the descriptor and keeps it open
        // for the whole call; it is only borrowed long enough to duplicate it.
        let file = unsafe { std::os::fd::BorrowedFd::borrow_raw(fd) }.try_clone_to_owned()?;
        return py
            .detach(|| Source::open_file(std::fs::File::from(file)))
            .map_err(|e| to_pyerr(py, e));
    }
    let path: PathBuf = source.extract()?;
    py.detach(|| Source::open(&path, mode))
        .map_err(|e| to_pyerr(py, e))
}

/// Give the heap blocks just freed back to the system: glibc keeps them for
/// reuse, but the Python objects of a load come from other allocators. Called
/// when the pickle's scaffolding (most of the VM's arena) goes, and when the
/// parsed checkpoint goes after the objects are built.
fn return_freed_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only returns free heap memory to the system; it touches
    // no memory that is in use.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// Load a checkpoint. `data` is "read", "skip" (allocate, leave unread) or "meta";
/// `restore(storage, location)` is torch's restore_location: the caller's mapping,
/// called for every storage, when `restore_all`; else torch's default placement,
/// called for the storages not saved on the CPU, and for those too when
/// `restore_cpu` (a package registered ahead of torch's CPU entry).
#[pyfunction]
#[pyo3(signature = (source, *, backend, mmap=false, shared=false, user_names=Vec::new(), user_objects=Vec::new(), limits=None, encoding="utf-8", endianness="little", threads=None, data="read", restore=None, restore_all=false, restore_cpu=false, fake=None))]
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
    data: &str,
    restore: Option<Bound<'py, PyAny>>,
    restore_all: bool,
    restore_cpu: bool,
    fake: Option<Bound<'py, PyAny>>,
) -> PyResult<Bound<'py, PyAny>> {
    if user_objects.len() != user_names.len() {
        return Err(PyValueError::new_err(
            "user_names and user_objects differ in length",
        ));
    }
    let mode = match data {
        "read" => DataMode::Read,
        "skip" => DataMode::Skip,
        "meta" => DataMode::Meta,
        other => {
            return Err(PyValueError::new_err(format!(
                "unknown data mode {other:?}"
            )))
        }
    };
    let options = options_from(user_names, limits, encoding, endianness)?;
    let map_mode = match (mmap, shared) {
        (false, _) => MapMode::ReadOnly,
        (true, false) => MapMode::Private,
        (true, true) => MapMode::Shared,
    };
    let raw = open_source(py, source, map_mode)?;
    let (mapped, source) = if mmap && raw.is_writable() {
        let (file, arc) = MappedFile::new(raw);
        (Some(Bound::new(py, file)?), arc)
    } else {
        (None, Arc::new(raw))
    };
    let checkpoint = py
        .detach(|| {
            let checkpoint = checkpoint::open(source, &options);
            return_freed_memory();
            checkpoint
        })
        .map_err(|e| to_pyerr(py, e))?;
    let backend = match backend {
        "torch" => Backend::Torch(TorchApi::new(py)?),
        "numpy" => Backend::Numpy(NumpyApi::new(py)?),
        other => return Err(PyValueError::new_err(format!("unknown backend {other:?}"))),
    };
    let _paused = crate::bindings::gc::pause(py)?;
    // A storage made with its tensor must stay where it is made (the CPU), and
    // legacy files mark each storage they allocate: both need storages of their own.
    let storages_stay = restore.is_none() || !(restore_all || restore_cpu);
    let with_tensors = storages_stay && checkpoint.format != Format::Legacy;
    let storages::Prepared {
        mut objects,
        jobs,
        premade,
        tuples,
    } = match &backend {
        Backend::Torch(api) => storages::torch_roots(
            py,
            &checkpoint,
            api,
            mapped.as_ref(),
            mode,
            fake.is_some(),
            with_tensors,
        )?,
        Backend::Numpy(api) => storages::numpy_roots(&checkpoint, api, mapped.as_ref(), mode)?,
    };
    let threads = threads.unwrap_or_else(crate::limits::default_threads);
    py.detach(|| {
        let jobs = jobs
            .into_iter()
            .map(|(storage, ptr, len)| FillJob {
                storage,
                // SAFETY: each pointer is the start of a distinct allocation of `len`
                // bytes owned by a Python object in `objects`, which outlives this
                // call; nothing else can reach those objects until we return them.
                dst: unsafe { std::slice::from_raw_parts_mut(ptr as *mut u8, len) },
            })
            .collect();
        fill::fill(&checkpoint, jobs, threads)
    })
    .map_err(|e| to_pyerr(py, e))?;
    if let Some(restore) = restore.filter(|_| mode != DataMode::Meta) {
        let placement = match (restore_all, restore_cpu) {
            (true, _) => Placement::Mapped,
            (false, true) => Placement::Saved { cpu_too: true },
            (false, false) => Placement::Saved { cpu_too: false },
        };
        storages::relocate(&checkpoint, &mut objects, &restore, placement)?;
    }
    storages::resolve_views(py, &checkpoint, &mut objects)?;
    let helpers = py.import("tensorplay._build")?;
    let mut builder = Builder::new(py, &checkpoint, backend, objects, user_objects, helpers);
    builder.fake = fake;
    builder.premade = RefCell::new(premade);
    builder.dims_tuples = RefCell::new(tuples);
    let loaded = builder.build(checkpoint.root);
    // The checkpoint's parsed form lies below the objects just built, where the
    // heap cannot shrink on its own: 10 MiB kept for 50,000 tensors without this.
    py.detach(move || {
        drop(checkpoint);
        return_freed_memory();
    });
    loaded
}
