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
use crate::mapping::MappedFile;
use crate::numpy_api::NumpyApi;
use crate::options::{load_options, unknown_globals, Backend, ByteOrder, Encoding, LimitOverrides};
use crate::storages::{self, DataMode, Placement};
use crate::tensors::{NumpyTensors, Tensors, TorchTensors};
use crate::torch_api::TorchApi;
use tensorplay::archive::source::{HeldBytes, MapMode, Source};
use tensorplay::checkpoint::{self, Checkpoint, Endianness, Format, Trailing};
use tensorplay::fill::{self, FillJob};

/// The user's allowlist comes as names and the objects they name, in order.
pub fn check_user_globals(names: &[String], objects: &[Bound<'_, PyAny>]) -> PyResult<()> {
    if names.len() == objects.len() {
        Ok(())
    } else {
        Err(PyValueError::new_err(
            "user_names and user_objects differ in length",
        ))
    }
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
    mode: MapMode,
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

/// Load a checkpoint. `data` is "read", "skip" (allocate, leave unread) or "meta";
/// `restore(storage, location)` is torch's restore_location: the caller's mapping,
/// called for every storage, when `restore_all`; else torch's default placement,
/// called for the storages not saved on the CPU, and for those too when
/// `restore_cpu` (a package registered ahead of torch's CPU entry). With `stream`,
/// `source` is a stream read from its current position: bytes after the
/// checkpoint are left alone, and the result is `(object, bytes the checkpoint
/// took)`, for the caller to put the stream's position right after it. With
/// `stub`, a global outside the allowlist (never a blocked one) becomes
/// `_build.stub(module, name)` instead of a refusal.
#[pyfunction]
#[pyo3(signature = (source, *, backend, mmap=false, shared=false, user_names=Vec::new(), user_objects=Vec::new(), limits=LimitOverrides::default(), encoding=Encoding::default(), endianness=ByteOrder(Endianness::Little), threads=None, data=DataMode::Read, restore=None, restore_all=false, restore_cpu=false, fake=None, stream=false, stub=false))]
#[allow(clippy::too_many_arguments)]
pub fn load<'py>(
    py: Python<'py>,
    source: &Bound<'py, PyAny>,
    backend: Backend,
    mmap: bool,
    shared: bool,
    user_names: Vec<String>,
    user_objects: Vec<Bound<'py, PyAny>>,
    limits: LimitOverrides,
    encoding: Encoding,
    endianness: ByteOrder,
    threads: Option<usize>,
    data: DataMode,
    restore: Option<Bound<'py, PyAny>>,
    restore_all: bool,
    restore_cpu: bool,
    fake: Option<Bound<'py, PyAny>>,
    stream: bool,
    stub: bool,
) -> PyResult<Bound<'py, PyAny>> {
    check_user_globals(&user_names, &user_objects)?;
    let mode = data;
    let mut options = load_options(user_names, limits, encoding, endianness.0);
    options.unknown_globals = unknown_globals(stub);
    if stream {
        options.trailing = Trailing::Left;
    }
    let map_mode = match (mmap, shared) {
        (false, _) => MapMode::ReadOnly,
        (true, false) => MapMode::Private,
        (true, true) => MapMode::Shared,
    };
    let raw = open_source(py, source, map_mode, options.limits.max_inflated_bytes)?;
    let (mapped, source) = if mmap && raw.is_writable() {
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
    let api = match backend {
        Backend::Torch => Api::Torch(TorchApi::new(py)?),
        Backend::Numpy => Api::Numpy(NumpyApi::new(py)?),
    };
    let _paused = crate::gc::pause(py)?;
    // A storage made with its tensor must stay where it is made (the CPU), and
    // legacy files mark each storage they allocate: both need storages of their own.
    let storages_stay = restore.is_none() || !(restore_all || restore_cpu);
    let with_tensors = storages_stay && checkpoint.format != Format::Legacy;
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
            fake.is_some(),
            with_tensors,
        )?,
        Api::Numpy(api) => storages::numpy_roots(&checkpoint, api, mapped.as_ref(), mode)?,
    };
    let threads = threads.unwrap_or_else(tensorplay::limits::default_threads);
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
    if let Some(restore) = restore.filter(|_| mode != DataMode::Meta) {
        let placement = match (restore_all, restore_cpu) {
            (true, _) => Placement::Mapped,
            (false, true) => Placement::Saved { cpu_too: true },
            (false, false) => Placement::Saved { cpu_too: false },
        };
        storages::relocate(&checkpoint, &mut objects, &restore, placement)?;
    }
    storages::resolve_views(py, &checkpoint, &mut objects)?;
    let tensors: Box<dyn Tensors> = match api {
        Api::Torch(api) => Box::new(TorchTensors::new(api, objects, premade, tuples, fake)),
        Api::Numpy(api) => Box::new(NumpyTensors::new(api, objects)),
    };
    let helpers = py.import("tensorplay._build")?;
    let builder = Builder::new(&checkpoint, tensors, user_objects, helpers);
    let loaded = builder.build(checkpoint.root);
    let end = checkpoint.end;
    let_go_of(py, checkpoint);
    if stream {
        return Ok((loaded?, end).into_pyobject(py)?.into_any());
    }
    loaded
}
