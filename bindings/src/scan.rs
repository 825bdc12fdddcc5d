//! `_core.scan` and `_core.unsafe_globals`: the scanner, with the GIL released.

use std::path::{Path, PathBuf};

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyTuple};

use crate::errors::to_pyerr;
use crate::load::open_source;
use crate::options::LimitOverrides;
use crate::scan_result::{scan_result, ScanResult};
use tensorplay::archive::source::{read_exact_at, MapMode};
use tensorplay::archive::streams::Compression;
use tensorplay::archive::zip::{read_entries_by_reading, Pieces, TAIL_READ};
use tensorplay::scan::{
    scan_file, scan_pickles_by_reading, scan_pickles_in_waves, scan_spans as scan_spans_of,
    scan_spans_in_waves, unsafe_globals as find_unsafe_globals, unsafe_globals_by_reading,
    unsafe_globals_in_waves, Report, ScanOptions, Span, Wave,
};
use tensorplay::torch::policy::{allowed_in_file, UserGlobals};

/// The scan's options for the file at `path` (None for the bytes of a file):
/// the user's allowlist, and what the file's name allows beyond it (a
/// distributed checkpoint's `.metadata`).
fn options(path: Option<&Path>, user_names: Vec<String>, limits: LimitOverrides) -> ScanOptions {
    let by_name = file_name(path).map_or(&[][..], |name| allowed_in_file(&name));
    let names = user_names
        .into_iter()
        .chain(by_name.iter().map(|n| (*n).to_owned()));
    ScanOptions {
        limits: limits.0,
        user_globals: UserGlobals::new(names),
        pickles_only: false,
        list_allowlisted: false,
        byte_zero_only: false,
    }
}

/// The path `source` names, None for the bytes of a file.
fn path_of(source: &Bound<'_, PyAny>) -> Option<PathBuf> {
    match source.cast::<PyBytes>() {
        Ok(_) => None,
        Err(_) => source.extract().ok(),
    }
}

fn file_name(path: Option<&Path>) -> Option<String> {
    Some(path?.file_name()?.to_string_lossy().into_owned())
}

/// Scan a path or a bytes object; returns a `ScanResult`.
/// `list_globals` lists the globals inside the allowlist too; `byte_zero_only`
/// reads the file only as a pickle from byte 0 (see `ScanOptions`).
#[pyfunction]
#[pyo3(signature = (source, user_names=Vec::new(), limits=LimitOverrides::default(), pickles_only=false, list_globals=false, byte_zero_only=false, name=None))]
#[allow(clippy::too_many_arguments)]
pub fn scan<'py>(
    py: Python<'py>,
    source: &Bound<'py, PyAny>,
    user_names: Vec<String>,
    limits: LimitOverrides,
    pickles_only: bool,
    list_globals: bool,
    byte_zero_only: bool,
    name: Option<String>,
) -> PyResult<Bound<'py, ScanResult>> {
    let path = path_of(source);
    // The bytes of a file far away are named by their URL's last part.
    let named = path.clone().or_else(|| name.map(PathBuf::from));
    let options = ScanOptions {
        pickles_only,
        list_allowlisted: list_globals,
        byte_zero_only,
        ..options(named.as_deref(), user_names, limits)
    };
    if byte_zero_only {
        let data = open_source(
            py,
            source,
            MapMode::ReadOnly,
            options.limits.max_inflated_bytes,
        )?;
        let report = py.detach(|| scan_file(data.bytes(), None, &options, None));
        return scan_result(py, &report);
    }
    let mut held = None;
    if let Some(path) = path.as_deref().filter(|_| pickles_only) {
        match py.detach(|| scan_by_reading(path, &options)) {
            Reading::Settled(report) => return scan_result(py, &report),
            Reading::Unsettled(file) => held = file,
        }
    }
    let data = open_source(
        py,
        source,
        MapMode::ReadOnly,
        options.limits.max_inflated_bytes,
    )?;
    drop(held);
    // The file's name: bytes that are no model count against a name that says model.
    let name = file_name(named.as_deref());
    let report = py.detach(|| {
        let bytes = data.bytes();
        let name = name.as_deref();
        if pickles_only {
            // Only the directory and the pickles are read: every local header
            // read in advance would be wasted.
            return scan_file(bytes, None, &options, name);
        }
        let read_at = |offset: u64, n: usize| {
            let mut buf = vec![0u8; n];
            data.read_into(offset, &mut buf)?.ok()?;
            Some(buf)
        };
        let entries = bytes
            .starts_with(b"PK\x03\x04")
            .then(|| {
                read_entries_by_reading(
                    bytes.len() as u64,
                    &read_at,
                    options.limits.max_zip_entries,
                )
            })
            .flatten();
        scan_file(bytes, entries, &options, name)
    });
    scan_result(py, &report)
}

/// Scan spans of one file, each `(offset, length, label, transforms)`, as files
/// of their own (the bytes a DCP `.metadata` points `torch.load` at, once the
/// compressions `transforms` names are undone), on all cores with the GIL
/// released: one report (a `ScanResult`), each finding and problem placed
/// under its span's label.
#[pyfunction]
#[pyo3(signature = (source, spans, user_names=Vec::new(), limits=LimitOverrides::default(), pickles_only=false, list_globals=false))]
pub fn scan_spans<'py>(
    py: Python<'py>,
    source: &Bound<'py, PyAny>,
    spans: Vec<(u64, u64, String, Vec<String>)>,
    user_names: Vec<String>,
    limits: LimitOverrides,
    pickles_only: bool,
    list_globals: bool,
) -> PyResult<Bound<'py, ScanResult>> {
    let options = ScanOptions {
        pickles_only,
        list_allowlisted: list_globals,
        ..options(None, user_names, limits)
    };
    let spans = parsed_spans(spans)?;
    let data = open_source(
        py,
        source,
        MapMode::ReadOnly,
        options.limits.max_inflated_bytes,
    )?;
    let threads = tensorplay::limits::default_threads();
    let report = py.detach(|| scan_spans_of(data.bytes(), &spans, &options, threads));
    scan_result(py, &report)
}

/// One run of the pickles-only scan of a remote file of `length` bytes against
/// the ranges fetched so far (`held`, `(offset, bytes)`), named `name` (the last
/// part of its URL: a name allows what it allows a local file). Returns
/// `("report", report)` (a `ScanResult`) once every byte the scan read was
/// held, `("fetch", [(offset, length), ...])` for the next wave of ranges, or
/// `("whole", None)` when it needs the whole file (then scanned as bytes, as
/// the local scan maps the file).
#[pyfunction]
#[pyo3(signature = (length, held, name=None, user_names=Vec::new(), limits=LimitOverrides::default(), list_globals=false))]
pub fn scan_waves<'py>(
    py: Python<'py>,
    length: u64,
    held: Vec<(u64, Bound<'py, PyBytes>)>,
    name: Option<String>,
    user_names: Vec<String>,
    limits: LimitOverrides,
    list_globals: bool,
) -> PyResult<Bound<'py, PyTuple>> {
    let options = ScanOptions {
        pickles_only: true,
        list_allowlisted: list_globals,
        ..options(name.as_deref().map(Path::new), user_names, limits)
    };
    let pieces = held_pieces(length, held)?;
    match py.detach(|| scan_pickles_in_waves(length, &pieces, &options)) {
        Wave::Settled(report) => ("report", scan_result(py, &report)?).into_pyobject(py),
        wave => unsettled(py, wave),
    }
}

/// `unsafe_globals` of a remote file, as `scan_waves` reads it: `("globals",
/// [name, ...])`, `("fetch", ranges)` or `("whole", None)` (then
/// `unsafe_globals` of its bytes).
#[pyfunction]
#[pyo3(name = "unsafe_globals_waves", signature = (length, held, name=None, user_names=Vec::new(), limits=LimitOverrides::default()))]
pub fn globals_outside_allowlist_waves<'py>(
    py: Python<'py>,
    length: u64,
    held: Vec<(u64, Bound<'py, PyBytes>)>,
    name: Option<String>,
    user_names: Vec<String>,
    limits: LimitOverrides,
) -> PyResult<Bound<'py, PyTuple>> {
    let options = options(name.as_deref().map(Path::new), user_names, limits);
    let pieces = held_pieces(length, held)?;
    match py.detach(|| unsafe_globals_in_waves(length, &pieces, &options)) {
        Wave::Settled(names) => ("globals", names).into_pyobject(py),
        wave => unsettled(py, wave),
    }
}

/// `scan_spans` of a remote file of `length` bytes, as `scan_waves` reads
/// one: `("report", report)`, or `("fetch", ranges)` for the next wave. A span
/// that needs no transform is read by ranges where they settle it; else whole.
#[pyfunction]
#[pyo3(signature = (length, held, spans, user_names=Vec::new(), limits=LimitOverrides::default(), pickles_only=true, list_globals=false))]
#[allow(clippy::too_many_arguments)]
pub fn scan_spans_waves<'py>(
    py: Python<'py>,
    length: u64,
    held: Vec<(u64, Bound<'py, PyBytes>)>,
    spans: Vec<(u64, u64, String, Vec<String>)>,
    user_names: Vec<String>,
    limits: LimitOverrides,
    pickles_only: bool,
    list_globals: bool,
) -> PyResult<Bound<'py, PyTuple>> {
    let options = ScanOptions {
        pickles_only,
        list_allowlisted: list_globals,
        ..options(None, user_names, limits)
    };
    let spans = parsed_spans(spans)?;
    let pieces = held_pieces(length, held)?;
    match py.detach(|| scan_spans_in_waves(length, &pieces, &spans, &options)) {
        Wave::Settled(report) => ("report", scan_result(py, &report)?).into_pyobject(py),
        wave => unsettled(py, wave),
    }
}

/// Spans as `_pointers` gives them: `(offset, length, label, transforms)`.
fn parsed_spans(spans: Vec<(u64, u64, String, Vec<String>)>) -> PyResult<Vec<Span>> {
    let mut parsed = Vec::with_capacity(spans.len());
    for (offset, length, label, transforms) in spans {
        let transforms = (transforms.iter())
            .map(|name| {
                Compression::named(name)
                    .ok_or_else(|| PyValueError::new_err(format!("unknown compression {name:?}")))
            })
            .collect::<PyResult<Vec<_>>>()?;
        parsed.push(Span {
            offset,
            length,
            transforms,
            label,
        });
    }
    Ok(parsed)
}

fn unsettled<'py, T>(py: Python<'py>, wave: Wave<T>) -> PyResult<Bound<'py, PyTuple>> {
    match wave {
        Wave::Fetch(ranges) => ("fetch", ranges).into_pyobject(py),
        _ => ("whole", py.None()).into_pyobject(py),
    }
}

/// The ranges a remote file's caller holds, checked to lie in its `length` bytes.
fn held_pieces(length: u64, held: Vec<(u64, Bound<'_, PyBytes>)>) -> PyResult<Pieces> {
    let len = usize::try_from(length).map_err(|_| {
        PyValueError::new_err(format!(
            "a file of {length} bytes is too large to scan here"
        ))
    })?;
    let mut pieces = Pieces::new(len);
    for (offset, bytes) in held {
        let bytes = bytes.as_bytes().to_vec();
        let start = usize::try_from(offset).ok();
        let fits = start
            .and_then(|o| o.checked_add(bytes.len()))
            .is_some_and(|end| end <= len);
        match start {
            Some(start) if fits => pieces.add(start, bytes),
            _ => {
                return Err(PyValueError::new_err(format!(
                    "a range of {} bytes at {offset} lies outside a file of {length} bytes",
                    bytes.len()
                )))
            }
        }
    }
    Ok(pieces)
}

/// The globals of a checkpoint's pickles that the allowlist does not cover.
#[pyfunction]
#[pyo3(name = "unsafe_globals", signature = (source, user_names=Vec::new(), limits=LimitOverrides::default(), name=None))]
pub fn globals_outside_allowlist(
    py: Python<'_>,
    source: &Bound<'_, PyAny>,
    user_names: Vec<String>,
    limits: LimitOverrides,
    name: Option<String>,
) -> PyResult<Vec<String>> {
    let path = path_of(source);
    // The bytes of a file far away are named by their URL's last part.
    let named = path.clone().or_else(|| name.map(PathBuf::from));
    let options = options(named.as_deref(), user_names, limits);
    let mut held = None;
    if let Some(path) = path {
        match py.detach(|| globals_by_reading(&path, &options)) {
            Reading::Settled(names) => return Ok(names),
            Reading::Unsettled(file) => held = file,
        }
    }
    let data = open_source(
        py,
        source,
        MapMode::ReadOnly,
        options.limits.max_inflated_bytes,
    )?;
    drop(held);
    py.detach(|| find_unsafe_globals(data.bytes(), &options))
        .map_err(|e| to_pyerr(py, e))
}

/// The answer for a zip checkpoint from a few reads of the file, when they settle
/// it; see `scan::unsafe_globals_by_reading`.
fn globals_by_reading(path: &Path, options: &ScanOptions) -> Reading<Vec<String>> {
    with_reads(path, |len, read_at| {
        unsafe_globals_by_reading(len, read_at, TAIL_READ, options)
    })
}

/// A pickles-only report from a few reads of the file, when they settle it; see
/// `scan::scan_pickles_by_reading`.
fn scan_by_reading(path: &Path, options: &ScanOptions) -> Reading<Report> {
    with_reads(path, |len, read_at| {
        scan_pickles_by_reading(len, read_at, TAIL_READ, options)
    })
}

/// What a few reads of a path settled.
enum Reading<T> {
    Settled(T),
    /// Left to a reading of the whole file; a file that is not regular (a FIFO,
    /// a pipe) comes back open, to be held until the caller has opened it again.
    Unsettled(Option<std::fs::File>),
}

/// `f` with the length of the regular file at `path` and a reader of its bytes.
fn with_reads<T>(
    path: &Path,
    f: impl FnOnce(u64, &dyn Fn(u64, usize) -> Option<Vec<u8>>) -> Option<T>,
) -> Reading<T> {
    use std::os::unix::fs::OpenOptionsExt;
    // Opened without waiting for a writer, as a plain open of a FIFO would. Its
    // writer, let in by this open, gets the pipe's end closed only once the
    // caller's stream holds another: closing it first would break the pipe.
    let opened = (std::fs::OpenOptions::new().read(true))
        .custom_flags(libc::O_NONBLOCK)
        .open(path);
    let Ok(file) = opened else {
        return Reading::Unsettled(None);
    };
    let len = match file.metadata() {
        Ok(meta) if meta.is_file() => meta.len(),
        Ok(_) => return Reading::Unsettled(Some(file)),
        Err(_) => return Reading::Unsettled(None),
    };
    let read_at = |offset: u64, n: usize| read_exact_at(&file, offset, n);
    f(len, &read_at).map_or(Reading::Unsettled(None), Reading::Settled)
}

/// Whether `name` (a path relative to an archive or a folder whose names are
/// `siblings`) is a TensorDict leaf: raw tensor bytes that no reader unpickles.
#[pyfunction]
pub fn is_tensordict_leaf(name: &str, siblings: &Bound<'_, PyAny>) -> PyResult<bool> {
    let mut failed = None;
    let leaf = tensorplay::scan::is_tensordict_leaf(name, |n| {
        siblings.contains(n).unwrap_or_else(|e| {
            failed = Some(e);
            false
        })
    });
    failed.map_or(Ok(leaf), Err)
}
