//! `_core.zip_entries` and `_core.inflate_entries`: the strict zip index of an
//! archive, and its compressed entries decoded in parallel with the GIL released,
//! each into a fresh writable numpy buffer of exactly the size the caller expects.
//! `_core.decode_stream`: bytes in a whole-stream compression format, decoded.
//! `_core.torchscript_module_lists`: a TorchScript archive's module classes'
//! parameter and buffer names.
//! The archive is named by an open file descriptor (so it is the very file the
//! caller checked and mapped), a path, or a bytes object.

#![allow(unsafe_code)]

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList};

use crate::errors::to_pyerr;
use crate::load::open_source;
use crate::numpy_api::NumpyApi;
use crate::options::LimitOverrides;
use tensorplay::archive::decompress::{self, Job};
use tensorplay::archive::method::Method;
use tensorplay::archive::source::{MapMode, Source};
use tensorplay::archive::streams::{Compression, StreamError};
use tensorplay::archive::zip;
use tensorplay::error::{check_limit, Error, Location};
use tensorplay::limits::{Limit, Limits};
use tensorplay::torch::records;

/// Map a file descriptor the caller keeps open, read-only.
#[cfg(unix)]
fn map_fd(fd: i32) -> Result<Source, Error> {
    use std::os::fd::BorrowedFd;
    let describe = |what: &str, e: std::io::Error| Error::io(format!("cannot {what} fd {fd}"), e);
    if fd < 0 {
        return Err(describe(
            "use",
            std::io::Error::new(std::io::ErrorKind::InvalidInput, "negative descriptor"),
        ));
    }
    // SAFETY: the descriptor belongs to the caller, who keeps it open for this call;
    // it is duplicated at once, and only the duplicate is used.
    let owned = unsafe { BorrowedFd::borrow_raw(fd) }
        .try_clone_to_owned()
        .map_err(|e| describe("duplicate", e))?;
    let file = std::fs::File::from(owned);
    let meta = file.metadata().map_err(|e| describe("stat", e))?;
    if !meta.is_file() {
        return Err(describe(
            "map",
            std::io::Error::new(std::io::ErrorKind::InvalidInput, "not a regular file"),
        ));
    }
    if meta.len() == 0 {
        return Ok(Source::Empty);
    }
    Source::map_file(file).map_err(|e| describe("map", e))
}

/// The archive's bytes: an open descriptor, a path or a bytes object.
fn archive_source(py: Python<'_>, source: &Bound<'_, PyAny>, limits: &Limits) -> PyResult<Source> {
    #[cfg(unix)]
    if let Ok(fd) = source.extract::<i32>() {
        return py.detach(|| map_fd(fd)).map_err(|e| to_pyerr(py, e));
    }
    open_source(py, source, MapMode::ReadOnly, limits.max_inflated_bytes)
}

/// What the zip `source` is for by its entries' names (`"torchscript"`, `"pt2"`,
/// `"pt2_zip"`, `"aoti"`, `"torch_package"`, `"mobile_bytecode"`), or `None`: a
/// checkpoint, another zip, or no zip at all.
#[pyfunction]
#[pyo3(signature = (source, *, limits=LimitOverrides::default()))]
pub fn archive_kind<'py>(
    py: Python<'py>,
    source: &Bound<'py, PyAny>,
    limits: LimitOverrides,
) -> PyResult<Option<&'static str>> {
    let limits = limits.0;
    let data = archive_source(py, source, &limits)?;
    let kind = py.detach(|| {
        let index = zip::read_index(data.bytes(), limits.max_zip_entries).ok()?;
        records::ArchiveKind::of(index.entries.iter().map(|e| &e.name[..]))
    });
    Ok(kind.map(records::ArchiveKind::name))
}

/// Whether entry `name` of a torch zip whose first entry is `first` holds a
/// storage's bytes (`<root>/data/...`, as a load finds them).
#[pyfunction]
pub fn is_storage_record(first: &[u8], name: &[u8]) -> bool {
    records::root_of(first)
        .and_then(|root| records::record_of(root, name))
        .is_some_and(records::is_storage_record)
}

/// How `torch.export.load` reads the record `path_name` that the config of a
/// `.pt2`'s `folder` (`data/weights/` or `data/constants/`) lists with
/// `use_pickle`: `"raw"`, `"pickled"`, `"opaque"`, `"torchbind"` or `"unknown"`.
#[pyfunction]
pub fn pt2_record_kind(folder: &str, path_name: &str, use_pickle: bool) -> &'static str {
    records::Pt2Record::of(folder, path_name, Some(use_pickle)).name()
}

/// Every entry of the archive, validated as a load validates an archive (no
/// duplicate names, overlaps, encryption, or local headers that disagree), as
/// dicts: `name` (bytes), `method`, `flags`, `crc32`, `compressed_size`, `size`,
/// `data_offset`, plus the file's `length`.
#[pyfunction]
#[pyo3(signature = (source, *, limits=LimitOverrides::default()))]
pub fn zip_entries<'py>(
    py: Python<'py>,
    source: &Bound<'py, PyAny>,
    limits: LimitOverrides,
) -> PyResult<Bound<'py, PyList>> {
    let limits = limits.0;
    let data = archive_source(py, source, &limits)?;
    let index = py
        .detach(|| zip::read_index(data.bytes(), limits.max_zip_entries))
        .map_err(|e| to_pyerr(py, e))?;
    let out = PyList::empty(py);
    for e in &index.entries {
        let d = PyDict::new(py);
        d.set_item("name", PyBytes::new(py, &e.name))?;
        d.set_item("method", e.method.code())?;
        d.set_item("flags", e.flags)?;
        d.set_item("crc32", e.crc32)?;
        d.set_item("compressed_size", e.compressed_size)?;
        d.set_item("size", e.uncompressed_size)?;
        d.set_item("data_offset", e.data_offset)?;
        d.set_item("length", data.bytes().len())?;
        out.append(d)?;
    }
    Ok(out)
}

/// `{class: (parameters, buffers)}` for every module class of the TorchScript
/// archive `source`, from the two lines of its `code/` records that list them.
#[pyfunction]
#[pyo3(signature = (source, *, limits=LimitOverrides::default()))]
pub fn torchscript_module_lists<'py>(
    py: Python<'py>,
    source: &Bound<'py, PyAny>,
    limits: LimitOverrides,
) -> PyResult<Bound<'py, PyDict>> {
    let limits = limits.0;
    let data = archive_source(py, source, &limits)?;
    let lists = py
        .detach(|| tensorplay::checkpoint::torchscript_module_lists(data.bytes(), &limits))
        .map_err(|e| to_pyerr(py, e))?;
    let out = PyDict::new(py);
    for m in lists {
        out.set_item(m.class, (m.parameters, m.buffers))?;
    }
    Ok(out)
}

/// One requested entry: `(data_offset, compressed_size, expected_size, method,
/// flags, name)`, with `method` and `flags` as the index gives them.
type Request = (u64, u64, u64, u16, u16, String);

/// The raw payload of a request, checked to lie inside the archive.
fn payload<'d>(data: &'d [u8], request: &Request) -> Result<&'d [u8], Error> {
    let (offset, stored_size, _, method, flags, name) = request;
    let payload = zip::Payload {
        offset: *offset,
        stored_size: *stored_size,
        method: Method::from_code(*method),
        flags: *flags,
    };
    payload.stored(data, || name.clone())
}

/// Decode the given entries of the archive, on up to `threads` threads with the
/// GIL released. Each comes back as a writable uint8 numpy array of exactly its
/// expected size; an entry that decodes to any other size is an error naming it.
#[pyfunction]
#[pyo3(signature = (source, entries, threads=1, *, limits=LimitOverrides::default()))]
pub fn inflate_entries<'py>(
    py: Python<'py>,
    source: &Bound<'py, PyAny>,
    entries: Vec<Request>,
    threads: usize,
    limits: LimitOverrides,
) -> PyResult<Bound<'py, PyList>> {
    let limits = limits.0;
    let data = archive_source(py, source, &limits)?;
    let mut total = 0u64;
    for request in &entries {
        let (_, compressed, expected, method, _, name) = request;
        decompress::check_entry(Method::from_code(*method), *compressed, *expected, name)
            .map_err(|e| to_pyerr(py, e))?;
        payload(data.bytes(), request).map_err(|e| to_pyerr(py, e))?;
        total = total.saturating_add(*expected);
        check_limit(
            Limit::InflatedBytes,
            total,
            limits.max_inflated_bytes,
            || Location::entry(name),
        )
        .map_err(|e| to_pyerr(py, e))?;
    }
    let api = NumpyApi::new(py)?;
    let mut buffers = Vec::with_capacity(entries.len());
    for (_, _, expected, _, _, name) in &entries {
        let len = usize::try_from(*expected).map_err(|_| {
            PyValueError::new_err(format!("entry '{name}' is too large for this machine"))
        })?;
        let buffer = api.alloc(len)?;
        buffers.push((buffer.base, buffer.ptr as usize, len));
    }
    let targets: Vec<(usize, usize)> = buffers.iter().map(|(_, ptr, len)| (*ptr, *len)).collect();
    py.detach(|| {
        let mut jobs = Vec::with_capacity(entries.len());
        for (request, (ptr, len)) in entries.iter().zip(targets) {
            let out: &mut [u8] = if len == 0 {
                &mut []
            } else {
                // SAFETY: each pointer starts a distinct numpy allocation of `len`
                // bytes, owned by an array in `buffers` that outlives this call and
                // that no other code can reach before we return it.
                unsafe { std::slice::from_raw_parts_mut(ptr as *mut u8, len) }
            };
            jobs.push(Job {
                method: Method::from_code(request.3),
                flags: request.4,
                compressed: payload(data.bytes(), request)?,
                out,
                entry: request.5.clone(),
            });
        }
        decompress::decompress_all(jobs, threads)
    })
    .map_err(|e| to_pyerr(py, e))?;
    PyList::new(py, buffers.into_iter().map(|(base, _, _)| base))
}

/// `source` (bytes or another buffer), one stream in the compression format
/// `compression` names (`"zstd"`, `"gzip"`, ...), decoded with the GIL released
/// into at most `max_inflated_bytes`: what a DCP writer's stream transforms
/// wrap an item in. `name` says where the stream is, for errors.
#[pyfunction]
#[pyo3(signature = (source, compression, *, name, limits=LimitOverrides::default()))]
pub fn decode_stream<'py>(
    py: Python<'py>,
    source: &Bound<'py, PyAny>,
    compression: &str,
    name: &str,
    limits: LimitOverrides,
) -> PyResult<Bound<'py, PyBytes>> {
    let limits = limits.0;
    let Some(format) = Compression::named(compression) else {
        return Err(PyValueError::new_err(format!(
            "unknown compression {compression:?}"
        )));
    };
    let data = archive_source(py, source, &limits)?;
    let cap = limits.max_inflated_bytes;
    let decoded = py
        .detach(|| format.decode(data.bytes(), cap))
        .map_err(|e| {
            let at = Location::entry(name);
            let err = match e {
                StreamError::TooLarge(_) => Error::limit(Limit::InflatedBytes, cap, at),
                StreamError::Corrupt(why) => {
                    Error::archive(format!("cannot decode its {compression} stream: {why}"), at)
                }
            };
            to_pyerr(py, err)
        })?;
    Ok(PyBytes::new(py, &decoded))
}
