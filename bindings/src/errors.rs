//! The exception classes, and the one place core errors become Python errors.
//! Every class subclasses `pickle.UnpicklingError`, as torch's weights-only errors
//! do (the malformed and unsupported ones `RuntimeError` too, as torch's archive
//! errors), and is declared under `tensorplay._core` so instances can be pickled.

use pyo3::exceptions::{PyOSError, PyValueError};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyTuple, PyType};

use tensorplay::error::{code, Error, ErrorClass, ErrorKind, KindSpec, Location, Refusal, KINDS};
use tensorplay::limits::Limit;

/// The exception class of each `ErrorClass` but `Os` (Python's own), and their base.
pub struct Classes {
    pub base: Py<PyType>,
    unsafe_: Py<PyType>,
    malformed: Py<PyType>,
    limit: Py<PyType>,
    unsupported: Py<PyType>,
}

impl Classes {
    /// The class an error of `class` is raised as; None for Python's own `OSError`.
    pub fn of(&self, class: ErrorClass) -> Option<&Py<PyType>> {
        match class {
            ErrorClass::Unsafe => Some(&self.unsafe_),
            ErrorClass::Malformed => Some(&self.malformed),
            ErrorClass::Limit => Some(&self.limit),
            ErrorClass::Unsupported => Some(&self.unsupported),
            ErrorClass::Os => None,
        }
    }
}

static CLASSES: PyOnceLock<Classes> = PyOnceLock::new();

fn new_class(
    py: Python<'_>,
    name: &str,
    doc: &str,
    base: &Bound<'_, PyType>,
) -> PyResult<Py<PyType>> {
    let qualified = format!("tensorplay._core.{name}");
    PyErr::new_type(
        py,
        &std::ffi::CString::new(qualified)?,
        Some(&std::ffi::CString::new(doc)?),
        Some(base),
        None,
    )
}

pub fn classes(py: Python<'_>) -> PyResult<&Classes> {
    CLASSES.get_or_try_init(py, || {
        // `pickle.UnpicklingError` is the C accelerator's class, re-exported: taken
        // from `_pickle`, a scan's process does not import pickle.py (a millisecond).
        let module = py.import("_pickle").or_else(|_| py.import("pickle"))?;
        let unpickling = module.getattr("UnpicklingError")?.cast_into::<PyType>()?;
        let base = new_class(
            py,
            "CheckpointError",
            "A checkpoint tensorplay refuses to load: bad, unsafe or beyond the limits. Subclasses pickle.UnpicklingError.",
            &unpickling,
        )?;
        let sub = |class: ErrorClass| -> PyResult<Py<PyType>> {
            new_class(py, class.name(), class.doc(), base.bind(py))
        };
        // torch raises RuntimeError for a broken archive or an unsupported file,
        // so code that catches that keeps working.
        let runtime_too = |class: ErrorClass| -> PyResult<Py<PyType>> {
            let attributes = pyo3::types::PyDict::new(py);
            attributes.set_item("__module__", "tensorplay._core")?;
            attributes.set_item(
                "__doc__",
                format!("{} Also a RuntimeError, as torch's error for it is.", class.doc()),
            )?;
            let bases = (base.bind(py), py.get_type::<pyo3::exceptions::PyRuntimeError>());
            Ok(py.get_type::<PyType>().call1((class.name(), bases, attributes))?.cast_into::<PyType>()?.unbind())
        };
        Ok(Classes {
            unsafe_: sub(ErrorClass::Unsafe)?,
            malformed: runtime_too(ErrorClass::Malformed)?,
            limit: sub(ErrorClass::Limit)?,
            unsupported: runtime_too(ErrorClass::Unsupported)?,
            base,
        })
    })
}

pub fn register(module: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = module.py();
    let c = classes(py)?;
    module.add("CheckpointError", c.base.bind(py))?;
    for class in ErrorClass::ALL {
        if let Some(made) = c.of(class) {
            module.add(class.name(), made.bind(py))?;
        }
    }
    // The table of kinds, for the Python layer, the type stubs and the documentation.
    let kinds: Vec<(&str, &str, &str, bool)> = KINDS
        .iter()
        .map(|k| (k.code, k.class.name(), k.summary, made_by_error(k)))
        .collect();
    module.add("ERROR_KINDS", kinds)?;
    module.add("ERROR_ATTRIBUTES", ERROR_ATTRIBUTES.to_vec())?;
    Ok(())
}

const RERUN: &str = "Re-running `tensorplay.load` with `weights_only` set to `False` will likely succeed, but it can \
                     result in arbitrary code execution. Do it only if you got the file from a trusted source.";

/// torch's message shapes for a weights-only refusal, naming tensorplay's remedies.
fn unsafe_message(refusal: &Refusal, location: &str) -> String {
    match refusal {
        Refusal::UnsupportedGlobal { .. } => format!(
            "Weights only load failed. This file can still be loaded, to do so you have two options, do those steps \
             only if you trust the source of the checkpoint. \n\t(1) {RERUN}\n\t(2) Alternatively, to load with \
             `weights_only=True` please check the recommended steps in the following error message.\n\t\
             WeightsUnpickler error: {refusal}{location}"
        ),
        // torch suggests weights_only=False here too; for a global that runs
        // code, that advice would run it.
        Refusal::BlockedGlobal { .. } => format!(
            "Weights only load failed. {refusal}{location}\n\nThe file names a global that runs code or touches \
             the system: treat it as hostile, and load it with no mode that runs its pickle."
        ),
        Refusal::UnsafeFile(_) => format!("unsafe file: {refusal}{location}"),
        _ => format!("Weights only load failed. {RERUN}\nWeightsUnpickler error: {refusal}{location}"),
    }
}

/// The OSError Python itself would raise, `errno`, `strerror` and `filename`
/// set (so `OSError(errno, ...)` picks FileNotFoundError, IsADirectoryError...);
/// without a file name the message says which step failed.
fn os_error(
    py: Python<'_>,
    message: &str,
    source: &std::io::Error,
    path: Option<&std::path::Path>,
) -> PyErr {
    let errno = source.raw_os_error().or(match source.kind() {
        std::io::ErrorKind::NotFound => Some(libc::ENOENT),
        std::io::ErrorKind::PermissionDenied => Some(libc::EACCES),
        std::io::ErrorKind::IsADirectory => Some(libc::EISDIR),
        std::io::ErrorKind::InvalidInput => Some(libc::EINVAL),
        _ => None,
    });
    let Some(errno) = errno else {
        return PyOSError::new_err(format!("{message}: {source}"));
    };
    let strerror = py
        .import("os")
        .and_then(|os| os.call_method1("strerror", (errno,)))
        .and_then(|s| s.extract::<String>())
        .unwrap_or_else(|_| source.to_string());
    match path {
        Some(path) => PyOSError::new_err((errno, strerror, path.as_os_str().to_os_string())),
        None => PyOSError::new_err((errno, format!("{message}: {strerror}"))),
    }
}

pub fn to_pyerr(py: Python<'_>, err: Error) -> PyErr {
    let message = match err.kind() {
        ErrorKind::Io {
            message,
            source,
            path,
        } => return os_error(py, message, source, path.as_deref()),
        ErrorKind::Unsafe(refusal) => unsafe_message(refusal, &location_of(&err)),
        _ => err.to_string(),
    };
    raise_as(py, &err, message)
}

/// The attributes [`describe`] sets on every exception of the core, in the order
/// it makes their values; `_core.ERROR_ATTRIBUTES` for the package's own errors.
pub const ERROR_ATTRIBUTES: [&str; 8] = [
    "kind", "reason", "location", "entry", "offset", "opcode", "limit", "maximum",
];

/// Copy what the error says onto the exception, for programs: `kind`, `reason`
/// (what was wrong), `location` (where, as the message writes it), `entry`,
/// `offset`, `opcode`, and for a limit `limit` and `maximum`; `None` where unknown.
fn describe(py: Python<'_>, pyerr: &PyErr, err: &Error) -> PyResult<()> {
    let value = pyerr.value(py);
    let location = err.location().cloned().unwrap_or_default();
    let (limit, maximum) = match err.kind() {
        ErrorKind::Limit { limit, max } => (Some(limit.name()), Some(*max)),
        _ => (None, None),
    };
    let values = [
        err.kind().code().into_pyobject(py)?.into_any(),
        err.reason().into_pyobject(py)?.into_any(),
        location.to_string().into_pyobject(py)?.into_any(),
        location.entry.clone().into_pyobject(py)?,
        location.offset.into_pyobject(py)?,
        location.opcode.map(|o| o.name).into_pyobject(py)?,
        limit.into_pyobject(py)?,
        maximum.into_pyobject(py)?,
    ];
    for (name, value_of) in ERROR_ATTRIBUTES.iter().zip(values) {
        value.setattr(*name, value_of)?;
    }
    // The global the load stopped on, as a scan's finding would give it
    // (`scanner.GlobalFinding`'s fields); `_refusal.complete` adds the file's others.
    if let ErrorKind::Unsafe(
        Refusal::UnsupportedGlobal { module, name } | Refusal::BlockedGlobal { module, name, .. },
    ) = err.kind()
    {
        let found = (
            format!("{module}.{name}"),
            tensorplay::torch::policy::is_dangerous(module, name),
            location.entry.unwrap_or_default(),
            location.offset.unwrap_or_default(),
            module,
            PyTuple::empty(py),
        );
        value.setattr("globals", PyTuple::new(py, [found.into_pyobject(py)?])?)?;
    }
    Ok(())
}

/// Whether [`error`] makes an error of this kind: from a reason, or a limit from its name.
fn made_by_error(kind: &KindSpec) -> bool {
    kind.from_reason.is_some() || kind.code == code::LIMIT
}

/// The exception the core would raise for an error of kind `kind` (a code of
/// `ErrorKind::code`): for the Python layer's own refusals, so that every
/// refusal has one message shape and the same attributes.
#[pyfunction]
#[pyo3(signature = (kind, reason, *, entry=None, offset=None, limit=None, maximum=None))]
pub fn error(
    py: Python<'_>,
    kind: &str,
    reason: String,
    entry: Option<String>,
    offset: Option<u64>,
    limit: Option<&str>,
    maximum: Option<u64>,
) -> PyResult<Py<PyAny>> {
    let location = Location {
        entry,
        offset,
        opcode: None,
    };
    let err = match KindSpec::of(kind).filter(|k| made_by_error(k)) {
        Some(spec) if spec.code == code::LIMIT => {
            let limit = limit
                .and_then(Limit::from_name)
                .ok_or_else(|| PyValueError::new_err(format!("unknown limit {limit:?}")))?;
            Error::limit(limit, maximum.unwrap_or_default(), location)
        }
        Some(KindSpec {
            from_reason: Some(make),
            ..
        }) => make(reason, location),
        _ => {
            let made: Vec<&str> = KINDS
                .iter()
                .filter(|k| made_by_error(k))
                .map(|k| k.code)
                .collect();
            return Err(PyValueError::new_err(format!(
                "error kind {kind:?} is not one `error` makes; it makes {}",
                made.join(", ")
            )));
        }
    };
    Ok(to_pyerr(py, err).into_value(py).into_any())
}

/// `_core.build_error`: [`wrap_build_error`] for the Python helpers of the builder.
#[pyfunction]
#[pyo3(name = "build_error")]
pub fn py_build_error(py: Python<'_>, what: &str, cause: Bound<'_, PyAny>) -> Py<PyAny> {
    let cause = PyErr::from_value(cause);
    wrap_build_error(py, cause, what, Location::default())
        .into_value(py)
        .into_any()
}

/// Wrap a Python exception raised while building objects: the file made us call
/// something that failed, so the file is what the caller must hear about.
pub fn wrap_build_error(py: Python<'_>, cause: PyErr, what: &str, location: Location) -> PyErr {
    let err = Error::pickle(format!("{what}: {cause}"), location);
    let message = format!(
        "malformed checkpoint: {}{}",
        err.reason(),
        location_of(&err)
    );
    with_cause(py, raise_as(py, &err, message), cause)
}

/// Wrap torch's refusal to place a storage where the file says it was saved (a
/// device this process lacks): the file is fine, the machine cannot hold it.
pub fn wrap_placement_error(py: Python<'_>, cause: PyErr, what: &str) -> PyErr {
    let message = format!("{what}: {cause}");
    let err = Error::unsupported(message.clone(), Location::default());
    with_cause(py, raise_as(py, &err, message), cause)
}

/// The exception of `err`'s class, with its attributes, saying `message`: for
/// errors whose message is not the core's `Display` of them.
pub fn raise_as(py: Python<'_>, err: &Error, message: String) -> PyErr {
    let class = match classes(py) {
        Ok(c) => c.of(err.kind().spec().class),
        Err(e) => return e,
    };
    let Some(class) = class else {
        return PyOSError::new_err(message);
    };
    let raised = PyErr::from_type(class.bind(py).clone(), message);
    match describe(py, &raised, err) {
        Ok(()) => raised,
        Err(e) => e,
    }
}

/// Where `err` happened, as a message writes it (` [entry 'data.pkl', byte offset 2]`), or "".
pub fn location_of(err: &Error) -> String {
    err.location().map(ToString::to_string).unwrap_or_default()
}

fn with_cause(py: Python<'_>, err: PyErr, cause: PyErr) -> PyErr {
    err.set_cause(py, Some(cause));
    err
}
