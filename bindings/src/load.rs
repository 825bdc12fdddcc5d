//! `_core.load`: open and validate with the GIL released, give every storage its
//! memory (a view of the mapping, or a fresh allocation filled in parallel with
//! the GIL released), then build the objects in one pass.

#![allow(unsafe_code)]

use std::path::PathBuf;
use std::sync::Arc;

use pyo3::buffer::PyBuffer;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyInt, PyString};

use crate::build::Builder;
use crate::errors::to_pyerr;
use crate::huge_pages::HugePages;
use crate::load_options::{LoadOptions, MapMode};
use crate::mapping::MappedFile;
use crate::numpy_api::NumpyApi;
use crate::options::Backend;
use crate::storages::{self, Restore};
use crate::tensors::{NumpyTensors, Tensors, TorchTensors};
use crate::torch_api::TorchApi;
use tensorplay::archive::source::{self as core_source, HeldBytes, Source};
use tensorplay::checkpoint::{self, Checkpoint, Format, Trailing};
use tensorplay::fill::{self, FillJob};

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

/// A contiguous buffer another Python object exports (a memoryview of a map of a
/// file, as `tensorplay.dcp` hands over each item of a `.distcp` file), read in
/// place. The exporter cannot resize or close it while the export is held.
struct PythonBuffer {
    buffer: PyBuffer<u8>,
}

impl HeldBytes for PythonBuffer {
    fn bytes(&self) -> &[u8] {
        // SAFETY: a C-contiguous buffer of `len_bytes` bytes that the held export
        // keeps alive and in place; the core only reads it.
        unsafe {
            std::slice::from_raw_parts(self.buffer.buf_ptr() as *const u8, self.buffer.len_bytes())
        }
    }
}

/// The bytes of `source`: a path (mapped, or read to its end when it is a
/// stream, at most `max_stream_bytes`), the descriptor of a regular file a file
/// object holds (mapped read-only), or a bytes object or another contiguous
/// buffer (read in place).
pub fn open_source(
    py: Python<'_>,
    source: &Bound<'_, PyAny>,
    mode: core_source::MapMode,
    max_stream_bytes: u64,
) -> PyResult<Source> {
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
    if !source.is_instance_of::<PyString>() {
        if let Ok(buffer) = PyBuffer::<u8>::get(source) {
            if !buffer.is_c_contiguous() {
                return Err(PyValueError::new_err("a buffer to load must be contiguous"));
            }
            return Ok(Source::Held(Box::new(PythonBuffer { buffer })));
        }
    }
    let path: PathBuf = source.extract()?;
    py.detach(|| Source::open(&path, mode, max_stream_bytes))
        .map_err(|e| to_pyerr(py, e))
}

/// A parsed checkpoint of this many nodes (about 12,000 tensors) left enough
/// free heap behind to give back. Smaller ones keep it: glibc hands the same
/// blocks to the next allocations, and giving them back would cost a service
/// that loads file after file a page fault per 4 KiB of each next load's
/// storages (four times torch's time per load of a 4 MiB file).
const RETURN_FREED_FROM_NODES: usize = 100_000;

/// After a failed open, whatever it had built is freed and worth giving back.
pub(crate) fn worth_returning(opened: &Result<Checkpoint, tensorplay::error::Error>) -> bool {
    opened
        .as_ref()
        .map_or(true, |c| c.arena.len() >= RETURN_FREED_FROM_NODES)
}

/// Give the heap blocks just freed back to the system: glibc keeps them for
/// reuse, but the Python objects of a load come from other allocators. Called
/// when the pickle's scaffolding (most of the VM's arena) goes, and when the
/// parsed checkpoint goes after the objects are built, for big ones.
pub(crate) fn return_freed_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only returns free heap memory to the system; it touches
    // no memory that is in use.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// Drop a checkpoint whose objects are built. Its parsed form lies below the
/// objects just built, where the heap cannot shrink on its own (10 MiB kept
/// for 50,000 tensors): a big one's is given back.
pub(crate) fn let_go_of(py: Python<'_>, checkpoint: Checkpoint) {
    if checkpoint.arena.len() >= RETURN_FREED_FROM_NODES {
        py.detach(move || {
            drop(checkpoint);
            return_freed_memory();
        });
    }
}

/// Load a checkpoint as `options` ask (a `LoadOptions`). With `stream`,
/// `source` is a stream read from its current position: bytes after the
/// checkpoint are left alone, and the result is `(object, bytes the checkpoint
/// took)`, for the caller to put the stream's position right after it. With
/// `options.stub`, a global outside the allowlist (never a blocked one) becomes
/// `_build.stub(module, name)` instead of a refusal.
#[pyfunction]
#[pyo3(signature = (source, options, *, stream=false))]
pub fn load<'py>(
    py: Python<'py>,
    source: &Bound<'py, PyAny>,
    options: &Bound<'py, LoadOptions>,
    stream: bool,
) -> PyResult<Bound<'py, PyAny>> {
    let asked = options.get();
    let placement = asked.placement.get();
    let mode = placement.data;
    let mut options = asked.core.clone();
    if stream {
        options.trailing = Trailing::Left;
    }
    let map_mode = asked.map;
    let raw = open_source(
        py,
        source,
        map_mode.into(),
        options.limits.max_inflated_bytes,
    )?;
    let (mapped, source) = if map_mode != MapMode::ReadOnly && raw.is_writable() {
        let (file, arc) = MappedFile::new(raw);
        (Some(Bound::new(py, file)?), arc)
    } else {
        (None, Arc::new(raw))
    };
    let checkpoint = py
        .detach(|| {
            let checkpoint = checkpoint::open(source, &options);
            if worth_returning(&checkpoint) {
                return_freed_memory();
            }
            checkpoint
        })
        .map_err(|e| to_pyerr(py, e))?;
    enum Api<'py> {
        Torch(TorchApi<'py>),
        Numpy(NumpyApi<'py>),
    }
    let api = match asked.backend {
        Backend::Torch => Api::Torch(TorchApi::new(py)?),
        Backend::Numpy => Api::Numpy(NumpyApi::new(py)?),
    };
    let _paused = crate::gc::pause(py)?;
    // A storage made with its tensor must stay where it is made (the CPU), and
    // legacy files mark each storage they allocate: both need storages of their own.
    let cpu_storages_stay = matches!(placement.restore, Restore::Stay | Restore::Saved);
    let with_tensors = cpu_storages_stay && checkpoint.format != Format::Legacy;
    let storages::Prepared {
        mut objects,
        jobs,
        premade,
        tuples,
    } = match &api {
        Api::Torch(api) => storages::torch_roots(
            py,
            &checkpoint,
            api,
            mapped.as_ref(),
            mode,
            placement.fake.is_some(),
            with_tensors,
        )?,
        Api::Numpy(api) => storages::numpy_roots(&checkpoint, api, mapped.as_ref(), mode)?,
    };
    let threads = (asked.threads).unwrap_or_else(tensorplay::limits::default_threads);
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
        fill::fill(&checkpoint, jobs, threads, &HugePages::for_load())
    })
    .map_err(|e| to_pyerr(py, e))?;
    if let Some(restore) = &placement.restore_location {
        storages::relocate(
            &checkpoint,
            &mut objects,
            restore.bind(py),
            placement.restore,
        )?;
    }
    storages::resolve_views(py, &checkpoint, &mut objects)?;
    let tensors: Box<dyn Tensors> = match api {
        Api::Torch(api) => {
            let fake = placement.fake.as_ref().map(|f| f.bind(py).clone());
            Box::new(TorchTensors::new(api, objects, premade, tuples, fake))
        }
        Api::Numpy(api) => Box::new(NumpyTensors::new(api, objects)),
    };
    let helpers = py.import("tensorplay._build")?;
    let user_objects = (asked.user_objects.iter())
        .map(|o| o.bind(py).clone())
        .collect();
    let builder = Builder::new(&checkpoint, tensors, user_objects, helpers);
    let loaded = builder.build(checkpoint.root);
    let end = checkpoint.end;
    let_go_of(py, checkpoint);
    if stream {
        return Ok((loaded?, end).into_pyobject(py)?.into_any());
    }
    loaded
}
