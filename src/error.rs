//! The one error type of the core: an [`ErrorKind`] saying what went wrong and a
//! [`Location`] saying where (the archive entry, the byte offset inside it and the
//! opcode), when it is known. `Display` is the message users read; the Python
//! bindings map each kind to one exception class and copy the fields onto it.

use std::fmt;
use std::path::{Path, PathBuf};

use crate::limits::Limit;

/// An opcode, with the name the pickle module gives it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Opcode {
    pub byte: u8,
    pub name: &'static str,
}

/// Where in the input an error was found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Location {
    /// The archive entry (for example `archive/data.pkl`), when the input is an archive.
    pub entry: Option<String>,
    /// Byte offset inside the entry (or inside the file for archive-level errors).
    pub offset: Option<u64>,
    /// The opcode being interpreted, for pickle errors.
    pub opcode: Option<Opcode>,
}

impl Location {
    /// A byte offset, with no entry.
    pub fn at(offset: u64) -> Self {
        Location {
            offset: Some(offset),
            ..Location::default()
        }
    }

    /// A pickle opcode at a byte offset.
    pub fn op(offset: u64, opcode: Opcode) -> Self {
        Location {
            entry: None,
            offset: Some(offset),
            opcode: Some(opcode),
        }
    }

    /// An archive entry, with no offset.
    pub fn entry(name: &str) -> Self {
        Location {
            entry: Some(name.to_owned()),
            ..Location::default()
        }
    }

    fn is_empty(&self) -> bool {
        self.entry.is_none() && self.offset.is_none() && self.opcode.is_none()
    }
}

impl fmt::Display for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_empty() {
            return Ok(());
        }
        let mut parts = Vec::new();
        if let Some(entry) = &self.entry {
            parts.push(format!("entry '{entry}'"));
        }
        if let Some(offset) = self.offset {
            parts.push(format!("byte offset {offset}"));
        }
        if let Some(op) = self.opcode {
            parts.push(format!("opcode {} (0x{:02x})", op.name, op.byte));
        }
        write!(f, " [{}]", parts.join(", "))
    }
}

/// Why a weights-only load refused the file: the file is well formed but asks for
/// something outside the allowlist.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// A GLOBAL that is neither in the built-in allowlist nor among the user's entries.
    UnsupportedGlobal {
        /// The global's module.
        module: String,
        /// Its name in the module.
        name: String,
    },
    /// A GLOBAL that stays blocked even when a user allowlists it; `blocked` is the
    /// module (or `builtins.name`) of the blocklist it falls under.
    BlockedGlobal {
        /// The global's module.
        module: String,
        /// Its name in the module.
        name: String,
        /// The blocked module (or `builtins.name`) it falls under.
        blocked: String,
    },
    /// An EXT1/EXT2/EXT4 extension code: it names a global through a registry we never consult.
    ExtensionCode {
        /// The code.
        code: u32,
    },
    /// Anything else the weights-only rules forbid (REDUCE on a non-callable, BUILD on a
    /// type that cannot be built, a persistent id that is not a storage, ...).
    Forbidden(String),
    /// A file the loader will not open for its own safety, whatever it holds: a
    /// symbolic link, a device, a name that would leave its folder.
    UnsafeFile(String),
}

impl Refusal {
    /// The `module.name` display form torch uses: a `builtins.` prefix is dropped.
    pub fn display_name(module: &str, name: &str) -> String {
        if module == "builtins" {
            name.to_owned()
        } else {
            format!("{module}.{name}")
        }
    }
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Refusal::UnsupportedGlobal { module, name } => {
                let p = Refusal::display_name(module, name);
                write!(
                    f,
                    "Unsupported global: GLOBAL {p} was not an allowed global by default. Please use \
                     `tensorplay.serialization.add_safe_globals([{p}])` or the \
                     `tensorplay.serialization.safe_globals([{p}])` context manager to allowlist this \
                     global if you trust this class/function."
                )
            }
            Refusal::BlockedGlobal {
                module,
                name,
                blocked,
            } => {
                let why = if blocked.contains('.') && module == "builtins" {
                    format!("which is blocked ({blocked})")
                } else {
                    format!("whose module {blocked} is blocked")
                };
                if module == "builtins" && name == "getattr" {
                    return write!(
                        f,
                        "Trying to load unsupported GLOBAL {module}.{name} {why}. \
                         It loads only when allowlisted, and then only as getattr(C, name) with C and \
                         C.name both allowlisted."
                    );
                }
                write!(
                    f,
                    "Trying to load unsupported GLOBAL {module}.{name} {why}. \
                     It cannot be allowlisted: tensorplay never imports it."
                )
            }
            Refusal::ExtensionCode { code } => write!(
                f,
                "Unsupported extension code {code}: EXT opcodes name globals through copyreg's \
                 registry, which tensorplay never consults"
            ),
            Refusal::Forbidden(msg) | Refusal::UnsafeFile(msg) => f.write_str(msg),
        }
    }
}

/// What went wrong. New kinds may be added: match with a wildcard arm.
#[derive(Debug)]
#[non_exhaustive]
pub enum ErrorKind {
    /// Reading the file failed; `path` is the file, when the caller named one
    /// (Python's `filename`).
    Io {
        /// What was being done.
        message: String,
        /// The system's error.
        source: std::io::Error,
        /// The file.
        path: Option<PathBuf>,
    },
    /// The zip container (or the legacy stream around the pickles) is malformed.
    Archive {
        /// What is wrong.
        reason: String,
    },
    /// The pickle stream is malformed: truncated, an unknown opcode, a stack underflow...
    Pickle {
        /// What is wrong.
        reason: String,
    },
    /// The pickle is well formed but asks for something weights-only loading forbids.
    Unsafe(Refusal),
    /// A resource limit was reached.
    Limit {
        /// Which limit.
        limit: Limit,
        /// Its value.
        max: u64,
    },
    /// A tensor or storage description that does not fit its data.
    Tensor {
        /// What is wrong.
        reason: String,
    },
    /// A valid file using something this build cannot load (a compression method, a version...).
    Unsupported {
        /// What is not supported.
        reason: String,
    },
}

/// The family of exception an error kind is raised as: in Python, one class
/// each (`Os` is Python's own `OSError`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorClass {
    /// Reading the file failed: Python's `OSError`, with `errno` and `filename`.
    Os,
    /// The file asks for something weights-only loading forbids.
    Unsafe,
    /// The file is corrupt or crafted.
    Malformed,
    /// The file needs more of a resource than the limits allow.
    Limit,
    /// A well-formed file using something this build cannot load.
    Unsupported,
}

impl ErrorClass {
    /// Every class, in the order the table of kinds lists them.
    pub const ALL: [ErrorClass; 5] = [
        ErrorClass::Os,
        ErrorClass::Unsafe,
        ErrorClass::Malformed,
        ErrorClass::Limit,
        ErrorClass::Unsupported,
    ];

    /// The exception class's name in Python.
    pub fn name(self) -> &'static str {
        match self {
            ErrorClass::Os => "OSError",
            ErrorClass::Unsafe => "UnsafeCheckpointError",
            ErrorClass::Malformed => "MalformedCheckpointError",
            ErrorClass::Limit => "LimitExceededError",
            ErrorClass::Unsupported => "UnsupportedCheckpointError",
        }
    }

    /// What an error of the class means, as the exception's docstring says it.
    pub fn doc(self) -> &'static str {
        match self {
            ErrorClass::Os => "Reading the file failed.",
            ErrorClass::Unsafe => {
                "The file asks for something weights-only loading forbids: a global outside the \
                 allowlist, or a call, build or persistent id the rules refuse."
            }
            ErrorClass::Malformed => {
                "The file is corrupt or crafted: a bad archive, a malformed pickle, or a tensor \
                 that does not fit its storage."
            }
            ErrorClass::Limit => {
                "The file needs more of a resource than the limits allow; raise the named limit \
                 if the file is trusted."
            }
            ErrorClass::Unsupported => {
                "A well-formed file using something tensorplay cannot load here (a compression \
                 method, a version, a tensor kind the backend cannot hold)."
            }
        }
    }
}

/// One kind of error, as programs see it: its stable code (an exception's
/// `.kind`, a scan problem's `kind`), the class it is raised as, what it means,
/// and how an error of it is made from a reason alone (the kinds the Python
/// layer raises itself).
#[derive(Debug, Clone, Copy)]
pub struct KindSpec {
    /// The stable code.
    pub code: &'static str,
    /// The class it is raised as.
    pub class: ErrorClass,
    /// What it means, in a sentence.
    pub summary: &'static str,
    /// An error of this kind with a reason and a location, when one makes sense.
    pub from_reason: Option<fn(String, Location) -> Error>,
}

/// The table of error kinds, once: it makes the [`code`] constants and
/// [`KINDS`]; the bindings, the `.pyi` types and the documentation's table are
/// made from [`KINDS`].
macro_rules! error_kinds {
    ($($konst:ident = $code:literal, $class:ident, $from:expr, $summary:literal;)+) => {
        /// The stable names of error kinds, for programs: an exception's `.kind`,
        /// and the kind of a scan's problem (which adds its own in `scan::report`).
        pub mod code {
            $(#[doc = $summary] pub const $konst: &str = $code;)+
        }

        /// Each kind's row, by its code's name.
        mod row {
            use super::*;
            $(pub(super) const $konst: KindSpec = KindSpec {
                code: code::$konst,
                class: ErrorClass::$class,
                summary: $summary,
                from_reason: $from,
            };)+
        }

        /// Every error kind, in the table's order.
        pub const KINDS: &[KindSpec] = &[$(row::$konst),+];
    };
}

error_kinds! {
    IO = "io", Os, None,
        "Reading the file failed (a missing file, a permission, a folder where a file was expected).";
    MALFORMED_ARCHIVE = "malformed_archive", Malformed, Some(Error::archive),
        "The container (zip, tar, legacy stream, safetensors header) is corrupt or crafted.";
    MALFORMED_PICKLE = "malformed_pickle", Malformed, Some(Error::pickle),
        "The pickle stream is malformed: truncated, an unknown opcode, a stack underflow.";
    TENSOR_BOUNDS = "tensor_bounds", Malformed, Some(Error::tensor),
        "A tensor or storage description that does not fit its data.";
    UNSAFE_GLOBAL = "unsafe_global", Unsafe, None,
        "A global outside the allowlist.";
    BLOCKED_GLOBAL = "blocked_global", Unsafe, None,
        "A global that runs code or touches the system: refused whatever the allowlist says.";
    EXTENSION_CODE = "extension_code", Unsafe, None,
        "An EXT opcode: a global named through copyreg's registry, which is never consulted.";
    FORBIDDEN = "forbidden", Unsafe, Some(Error::forbidden),
        "A call, build or persistent id the weights-only rules never allow.";
    UNSAFE_FILE = "unsafe_file", Unsafe, Some(|r, l| Error::refused(Refusal::UnsafeFile(r), l)),
        "A file not opened for the loader's own safety: a link, a device, a name leaving its folder.";
    LIMIT = "limit", Limit, None,
        "A resource limit was reached; `.limit` and `.maximum` name it.";
    UNSUPPORTED = "unsupported", Unsupported, Some(Error::unsupported),
        "A well-formed file using something this build cannot load.";
}

impl ErrorKind {
    /// The table's row for this kind.
    pub fn spec(&self) -> &'static KindSpec {
        match self {
            ErrorKind::Io { .. } => &row::IO,
            ErrorKind::Archive { .. } => &row::MALFORMED_ARCHIVE,
            ErrorKind::Pickle { .. } => &row::MALFORMED_PICKLE,
            ErrorKind::Unsafe(Refusal::UnsupportedGlobal { .. }) => &row::UNSAFE_GLOBAL,
            ErrorKind::Unsafe(Refusal::BlockedGlobal { .. }) => &row::BLOCKED_GLOBAL,
            ErrorKind::Unsafe(Refusal::ExtensionCode { .. }) => &row::EXTENSION_CODE,
            ErrorKind::Unsafe(Refusal::Forbidden(_)) => &row::FORBIDDEN,
            ErrorKind::Unsafe(Refusal::UnsafeFile(_)) => &row::UNSAFE_FILE,
            ErrorKind::Limit { .. } => &row::LIMIT,
            ErrorKind::Tensor { .. } => &row::TENSOR_BOUNDS,
            ErrorKind::Unsupported { .. } => &row::UNSUPPORTED,
        }
    }

    /// A stable name of the kind, for programs (`malformed_archive`, `limit`...).
    pub fn code(&self) -> &'static str {
        self.spec().code
    }
}

impl KindSpec {
    /// The row of the kind whose code is `code`.
    pub fn of(code: &str) -> Option<&'static KindSpec> {
        KINDS.iter().find(|k| k.code == code)
    }
}

/// An error of the core. Boxed, so a `Result` of a small value stays small on
/// the VM's hot paths, where errors are rare.
pub struct Error {
    inner: Box<Inner>,
}

struct Inner {
    kind: ErrorKind,
    location: Location,
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// An error of `kind` at `location`.
    pub fn new(kind: ErrorKind, location: Location) -> Self {
        Error {
            inner: Box::new(Inner { kind, location }),
        }
    }

    /// The container (zip, tar, legacy stream) is malformed.
    pub fn archive(reason: impl Into<String>, location: Location) -> Self {
        let reason = reason.into();
        Error::new(ErrorKind::Archive { reason }, location)
    }

    /// The pickle is malformed.
    pub fn pickle(reason: impl Into<String>, location: Location) -> Self {
        let reason = reason.into();
        Error::new(ErrorKind::Pickle { reason }, location)
    }

    /// A tensor or storage does not fit what describes it.
    pub fn tensor(reason: impl Into<String>, location: Location) -> Self {
        let reason = reason.into();
        Error::new(ErrorKind::Tensor { reason }, location)
    }

    /// Valid, but something this crate does not read.
    pub fn unsupported(reason: impl Into<String>, location: Location) -> Self {
        let reason = reason.into();
        Error::new(ErrorKind::Unsupported { reason }, location)
    }

    /// Refused by the weights-only rules (a global outside the allowlist...).
    pub fn refused(refusal: Refusal, location: Location) -> Self {
        Error::new(ErrorKind::Unsafe(refusal), location)
    }

    /// Something the rules never allow, whatever the allowlist.
    pub fn forbidden(reason: impl Into<String>, location: Location) -> Self {
        Error::refused(Refusal::Forbidden(reason.into()), location)
    }

    /// A named resource limit was reached.
    pub fn limit(limit: Limit, max: u64, location: Location) -> Self {
        Error::new(ErrorKind::Limit { limit, max }, location)
    }

    /// Reading failed.
    pub fn io(message: impl Into<String>, source: std::io::Error) -> Self {
        let message = message.into();
        Error::new(
            ErrorKind::Io {
                message,
                source,
                path: None,
            },
            Location::default(),
        )
    }

    /// An I/O error about the file at `path`.
    pub fn io_at(path: &Path, message: impl Into<String>, source: std::io::Error) -> Self {
        let message = message.into();
        Error::new(
            ErrorKind::Io {
                message,
                source,
                path: Some(path.to_owned()),
            },
            Location::default(),
        )
    }

    /// What went wrong.
    pub fn kind(&self) -> &ErrorKind {
        &self.inner.kind
    }

    /// What went wrong, taken out of the error.
    pub fn into_kind(self) -> ErrorKind {
        self.inner.kind
    }

    /// Whether a resource limit stopped the reading.
    pub fn is_limit(&self) -> bool {
        matches!(self.inner.kind, ErrorKind::Limit { .. })
    }

    /// Where it happened; an I/O error has no place in the input.
    pub fn location(&self) -> Option<&Location> {
        match self.inner.kind {
            ErrorKind::Io { .. } => None,
            _ => Some(&self.inner.location),
        }
    }

    /// Where it went wrong, to add to (an entry name known only higher up).
    pub fn location_mut(&mut self) -> Option<&mut Location> {
        match self.inner.kind {
            ErrorKind::Io { .. } => None,
            _ => Some(&mut self.inner.location),
        }
    }

    /// Attach the archive entry the error happened in, unless one is already set.
    pub fn in_entry(mut self, entry: &str) -> Self {
        if let Some(location) = self.location_mut() {
            if location.entry.is_none() {
                location.entry = Some(entry.to_owned());
            }
        }
        self
    }

    /// The message without the location suffix (used to build torch-shaped messages).
    pub fn reason(&self) -> String {
        match &self.inner.kind {
            ErrorKind::Io {
                message, source, ..
            } => format!("{message}: {source}"),
            ErrorKind::Archive { reason }
            | ErrorKind::Pickle { reason }
            | ErrorKind::Tensor { reason }
            | ErrorKind::Unsupported { reason } => reason.clone(),
            ErrorKind::Unsafe(refusal) => refusal.to_string(),
            ErrorKind::Limit { limit, max } => {
                format!("limit exceeded: {} (at most {max})", limit.name())
            }
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let location = &self.inner.location;
        match &self.inner.kind {
            ErrorKind::Io {
                message, source, ..
            } => write!(f, "{message}: {source}"),
            ErrorKind::Archive { reason } => write!(f, "malformed archive: {reason}{location}"),
            ErrorKind::Pickle { reason } => write!(f, "malformed pickle: {reason}{location}"),
            ErrorKind::Unsafe(refusal) => write!(f, "{refusal}{location}"),
            ErrorKind::Limit { limit, max } => write!(
                f,
                "limit exceeded: {} (at most {max}){location}; raise it through the limits \
                 argument if the file is trusted",
                limit.name()
            ),
            ErrorKind::Tensor { reason } => write!(f, "invalid tensor: {reason}{location}"),
            ErrorKind::Unsupported { reason } => write!(f, "unsupported: {reason}{location}"),
        }
    }
}

impl fmt::Debug for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Error")
            .field("kind", &self.inner.kind)
            .field("location", &self.inner.location)
            .finish()
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match &self.inner.kind {
            ErrorKind::Io { source, .. } => Some(source),
            _ => None,
        }
    }
}

/// Fail with a [`ErrorKind::Limit`] error when `value` exceeds `max`; the location
/// is made only then.
#[inline]
pub fn check_limit(
    limit: Limit,
    value: u64,
    max: u64,
    location: impl FnOnce() -> Location,
) -> Result<(), Error> {
    if value > max {
        Err(Error::limit(limit, max, location()))
    } else {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_code_is_one_row() {
        for (i, kind) in KINDS.iter().enumerate() {
            assert!(KINDS[..i].iter().all(|k| k.code != kind.code), "{}", kind.code);
            assert_eq!(KindSpec::of(kind.code).map(|k| k.code), Some(kind.code));
        }
        assert!(KindSpec::of("no_such_kind").is_none());
    }

    #[test]
    fn an_error_made_from_a_reason_is_of_its_row() {
        for kind in KINDS {
            if let Some(make) = kind.from_reason {
                let err = make("why".into(), Location::at(3));
                assert_eq!(err.kind().code(), kind.code);
                assert_eq!(err.kind().spec().class, kind.class);
                assert_eq!(err.location().and_then(|l| l.offset), Some(3));
            }
        }
    }

    #[test]
    fn each_class_is_named_once() {
        for (i, class) in ErrorClass::ALL.iter().enumerate() {
            assert!(ErrorClass::ALL[..i].iter().all(|c| c.name() != class.name()));
            assert!(KINDS.iter().any(|k| k.class == *class), "{class:?} has no kind");
        }
    }
}
