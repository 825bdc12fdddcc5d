//! The tensor chunks of one `.distcp` file, in two calls instead of two per chunk
//! (most of a 50,000-tensor folder's load). `_core.dcp_chunks`: each chunk is a
//! whole `torch.save` archive at a span of the file, opened and validated as a
//! load validates a checkpoint (its pickle run by the restricted VM), and a chunk
//! holding one dense tensor stored plainly is described. `_core.read_ranges`:
//! byte ranges of the file copied into the caller's buffers (memory torch or
//! numpy own), on all cores with the GIL released.
//!
//! The file's pages stay out of the process: a small chunk is parsed from a
//! `pread` copy, a big one through the map (its headers and pickle only), and
//! ranges are copied with `pread`, as an eager load copies storages.

#![allow(unsafe_code)]

use std::ops::Range;
use std::sync::Arc;

use pyo3::buffer::PyBuffer;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyList, PyTuple};

use crate::errors::to_pyerr;
use crate::load::open_source;
use crate::options::{load_options, Encoding, LimitOverrides};
use tensorplay::archive::source::{HeldBytes, MapMode, Source};
use tensorplay::checkpoint::{self, Checkpoint, Endianness, LoadOptions, StorageData};
use tensorplay::error::{Error, Location};
use tensorplay::parallel::run_by_size;
use tensorplay::torch::{Dense, TensorKind};
use tensorplay::torch::{Node, Torch};

/// Bytes of a span of another source, without a copy.
struct SpanOf {
    whole: Arc<Source>,
    range: Range<usize>,
}

impl HeldBytes for SpanOf {
    fn bytes(&self) -> &[u8] {
        self.whole
            .bytes()
            .get(self.range.clone())
            .unwrap_or_default()
    }

    fn read_file_at(&self, offset: u64, len: usize) -> Option<Vec<u8>> {
        let end = offset.checked_add(len as u64)?;
        if end > self.range.len() as u64 {
            return None;
        }
        let start = (self.range.start as u64).checked_add(offset)?;
        self.whole.read_file_at(start, len)
    }

    fn release_pages(&self) {
        self.whole.release_pages();
    }
}

/// A chunk up to this size is parsed from a copy: every page of a file of small
/// archives would otherwise be faulted into the process.
const PARSED_FROM_A_COPY: usize = 1 << 20;

/// A chunk's one dense tensor, with its storage's bytes where they lie in the file.
struct Plain {
    dense: Dense,
    data: Range<usize>,
}

/// The chunk's tensor when the archive holds exactly one dense tensor whose
/// storage is stored uncompressed in this machine's byte order.
fn plain(checkpoint: &Checkpoint, start: usize) -> Option<Plain> {
    let Node::Domain(Torch::Tensor(id)) = checkpoint.arena.get(checkpoint.root) else {
        return None;
    };
    let tensor = checkpoint.arena.tensor(*id);
    let TensorKind::Dense(dense) = &tensor.kind else {
        return None;
    };
    if tensor.conj || tensor.neg {
        return None;
    }
    let storage = checkpoint.storage(dense.storage)?;
    let StorageData::Stored { offset } = storage.data else {
        return None;
    };
    if storage.swap.is_some() {
        return None;
    }
    let from = start.checked_add(usize::try_from(offset).ok()?)?;
    let to = from.checked_add(usize::try_from(storage.decl.nbytes).ok()?)?;
    Some(Plain {
        dense: dense.clone(),
        data: from..to,
    })
}

/// For each `(offset, length)` span of `source` (a `.distcp` file's path), the
/// archive there validated as a load validates it, and, when it holds one dense
/// tensor stored plainly, `(dtype, shape, stride, storage_offset, data_offset,
/// nbytes)`: `data_offset` is where the storage's bytes start in the file. None
/// for any other chunk. `name` is the file, for errors.
#[pyfunction]
#[pyo3(signature = (source, spans, *, name, user_names=Vec::new(), limits=LimitOverrides::default()))]
pub fn dcp_chunks<'py>(
    py: Python<'py>,
    source: &Bound<'py, PyAny>,
    spans: Vec<(u64, u64)>,
    name: &str,
    user_names: Vec<String>,
    limits: LimitOverrides,
) -> PyResult<Bound<'py, PyList>> {
    let options = load_options(user_names, limits, Encoding::default(), Endianness::Little);
    let max_stream = options.limits.max_inflated_bytes;
    let whole = Arc::new(open_source(py, source, MapMode::ReadOnly, max_stream)?);
    // Each archive is parsed on its own: spread over the cores.
    let mut chunks: Vec<Option<Plain>> = spans.iter().map(|_| None).collect();
    let jobs: Vec<_> = spans.iter().zip(chunks.iter_mut()).collect();
    let size = |&(&(_, length), _): &(&(u64, u64), &mut Option<Plain>)| length as usize;
    let parse = |(&(offset, length), found): (&(u64, u64), &mut Option<Plain>)| {
        *found = chunk(&whole, offset, length, name, &options)?;
        Ok::<(), Error>(())
    };
    py.detach(|| run_by_size(jobs, tensorplay::limits::default_threads(), size, parse))
        .map_err(|e| to_pyerr(py, e))?;
    let out = PyList::empty(py);
    for chunk in &chunks {
        let Some(p) = chunk else {
            out.append(py.None())?;
            continue;
        };
        let d = &p.dense;
        out.append((
            d.dtype.name(),
            PyTuple::new(py, d.shape.iter().copied())?,
            PyTuple::new(py, d.stride.iter().copied())?,
            d.offset,
            p.data.start,
            p.data.len(),
        ))?;
    }
    Ok(out)
}

/// The archive at `offset` of `whole`, opened and validated, and its plain tensor.
fn chunk(
    whole: &Arc<Source>,
    offset: u64,
    length: u64,
    name: &str,
    options: &LoadOptions,
) -> Result<Option<Plain>, Error> {
    let here = format!("{name} at byte {offset}");
    let len = whole.bytes().len();
    let range = usize::try_from(offset)
        .ok()
        .zip(usize::try_from(length).ok())
        .and_then(|(o, l)| Some(o..o.checked_add(l)?))
        .filter(|r| r.end <= len && !r.is_empty())
        .ok_or_else(|| {
            Error::archive(
                format!("the chunk needs {length} bytes, the file has {len}"),
                Location::entry(&here),
            )
        })?;
    let start = range.start;
    let bytes = if range.len() <= PARSED_FROM_A_COPY {
        let mut copy = vec![0u8; range.len()];
        match whole.read_into(offset, &mut copy) {
            Some(Ok(())) => Source::Owned(copy),
            Some(Err(e)) => return Err(Error::io(format!("cannot read {here}"), e)),
            None => {
                return Err(Error::archive(
                    "cannot read the chunk",
                    Location::entry(&here),
                ))
            }
        }
    } else {
        Source::Held(Box::new(SpanOf {
            whole: whole.clone(),
            range,
        }))
    };
    let checkpoint = checkpoint::open(Arc::new(bytes), options).map_err(|e| e.in_entry(&here))?;
    Ok(plain(&checkpoint, start))
}

/// Copy each `(offset, target)`: as many bytes of `source` (a file's path) from
/// `offset` as `target` holds, into `target`, a writable contiguous buffer or a
/// contiguous CPU torch tensor, with `pread`, on `threads` threads (default: the
/// cores) with the GIL released. Targets that overlap are refused, or with
/// `in_order` copied one after another in the order given, as that many copies
/// would be (a planner may place two chunks in one tensor).
#[pyfunction]
#[pyo3(signature = (source, targets, *, name, threads=None, in_order=false, limits=LimitOverrides::default()))]
pub fn read_ranges<'py>(
    py: Python<'py>,
    source: &Bound<'py, PyAny>,
    targets: Vec<(u64, Bound<'py, PyAny>)>,
    name: &str,
    threads: Option<usize>,
    in_order: bool,
    limits: LimitOverrides,
) -> PyResult<()> {
    let whole = open_source(py, source, MapMode::ReadOnly, limits.0.max_inflated_bytes)?;
    let mut buffers = Vec::with_capacity(targets.len());
    let mut ranges: Vec<Target> = Vec::with_capacity(targets.len());
    // A tensor is asked first, so no failed buffer request (an exception made
    // and dropped) is paid per tensor; without torch imported there is none.
    let tensor_class = (py.import("sys")?.getattr("modules")?.get_item("torch").ok())
        .and_then(|torch| torch.getattr("Tensor").ok());
    for (offset, target) in &targets {
        let from = usize::try_from(*offset).unwrap_or(usize::MAX);
        let is_tensor = match &tensor_class {
            Some(class) => target.is_instance(class)?,
            None => false,
        };
        let (ptr, len) = if is_tensor {
            torch_memory(target)?
        } else if let Ok(buffer) = PyBuffer::<u8>::get(target) {
            if buffer.readonly() || !buffer.is_c_contiguous() {
                return Err(PyValueError::new_err(
                    "read_ranges needs writable contiguous buffers",
                ));
            }
            let at = (buffer.buf_ptr() as usize, buffer.len_bytes());
            buffers.push(buffer);
            at
        } else {
            return Err(not_a_target());
        };
        ranges.push(Target {
            from,
            address: ptr,
            len,
        });
    }
    let mut spans: Vec<(usize, usize)> = ranges.iter().map(|r| (r.address, r.len)).collect();
    spans.sort_unstable();
    let overlap = |w: &[(usize, usize)]| matches!(w, [a, b] if a.0.saturating_add(a.1) > b.0);
    let threads = if !spans.windows(2).any(overlap) {
        threads.unwrap_or_else(tensorplay::limits::default_threads)
    } else if in_order {
        1
    } else {
        return Err(PyValueError::new_err(
            "read_ranges needs buffers that do not overlap",
        ));
    };
    py.detach(|| copy_out(&whole, &ranges, threads))
        .map_err(|e| to_pyerr(py, e.in_entry(name)))?;
    drop(buffers);
    Ok(())
}

/// The memory of a contiguous CPU torch tensor: numpy's view of it would make
/// its storage one that can never be resized, as torch's own loads never do.
fn torch_memory(target: &Bound<'_, PyAny>) -> PyResult<(usize, usize)> {
    if !(target.getattr("is_cpu")?.is_truthy()?
        && target.call_method0("is_contiguous")?.is_truthy()?)
    {
        return Err(not_a_target());
    }
    Ok((
        target.call_method0("data_ptr")?.extract()?,
        target.getattr("nbytes")?.extract()?,
    ))
}

fn not_a_target() -> PyErr {
    PyValueError::new_err("read_ranges needs writable contiguous buffers or contiguous CPU tensors")
}

/// `len` bytes from `from` in the file, to be copied to `address`.
struct Target {
    from: usize,
    address: usize,
    len: usize,
}

/// Copy each target with `pread`, the copies spread over `threads` threads by
/// size (one thread: in the order given).
fn copy_out(whole: &Source, targets: &[Target], threads: usize) -> Result<(), Error> {
    let copy = |&Target { from, address, len }: &Target| -> Result<(), Error> {
        if len == 0 {
            return Ok(());
        }
        // SAFETY: each address starts `len` writable bytes of a buffer whose
        // export the caller holds for the whole call, or of a fresh tensor only
        // the caller reaches (so the memory stays alive and in place), and no two
        // of them overlap, or they are copied one at a time, in order.
        let dst = unsafe { std::slice::from_raw_parts_mut(address as *mut u8, len) };
        match whole.read_into(from as u64, dst) {
            Some(Ok(())) => Ok(()),
            Some(Err(e)) => Err(Error::io("cannot read a chunk's storage", e)),
            None => Err(Error::archive(
                "a chunk's storage lies outside the file",
                Location::at(from as u64),
            )),
        }
    };
    run_by_size(targets.iter().collect(), threads, |t| t.len, copy)
}
