//! The one error type of the core. Every variant says what went wrong and, where it
//! is known, where: the archive entry, the byte offset inside it and the opcode.
//! The Python bindings map each variant to one exception class.

use std::fmt;

use crate::pickle::opcodes::opcode_name;

/// Where in the input an error was found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Location {
    /// The archive entry (for example `archive/data.pkl`), when the input is an archive.
    pub entry: Option<String>,
    /// Byte offset inside the entry (or inside the file for archive-level errors).
    pub offset: Option<u64>,
    /// The opcode being interpreted, for pickle errors.
    pub opcode: Option<u8>,
}

impl Location {
    pub fn at(offset: u64) -> Self {
        Location {
            entry: None,
            offset: Some(offset),
            opcode: None,
        }
    }

    pub fn op(offset: u64, opcode: u8) -> Self {
        Location {
            entry: None,
            offset: Some(offset),
            opcode: Some(opcode),
        }
    }

    pub fn entry(name: &str) -> Self {
        Location {
            entry: Some(name.to_owned()),
            offset: None,
            opcode: None,
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
            parts.push(format!("opcode {} (0x{op:02x})", opcode_name(op)));
        }
        write!(f, " [{}]", parts.join(", "))
    }
}

/// Why a weights-only load refused the file: the file is well formed but asks for
/// something outside the allowlist.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// A GLOBAL that is neither in the built-in allowlist nor among the user's entries.
    UnsupportedGlobal { module: String, name: String },
    /// A GLOBAL whose module is blocked even when a user allowlists it.
    BlockedGlobal { module: String, name: String },
    /// An EXT1/EXT2/EXT4 extension code: it names a global through a registry we never consult.
    ExtensionCode { code: u32 },
    /// Anything else the weights-only rules forbid (REDUCE on a non-callable, BUILD on a
    /// type that cannot be built, a persistent id that is not a storage, ...).
    Forbidden(String),
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
            Refusal::BlockedGlobal { module, name } => {
                let blocked = crate::pickle::globals::blocked_reason(module, name)
                    .unwrap_or_else(|| module.clone());
                let why = if blocked.contains('.') && module == "builtins" {
                    format!("which is blocked ({blocked})")
                } else {
                    format!("whose module {blocked} is blocked")
                };
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
            Refusal::Forbidden(msg) => f.write_str(msg),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{message}: {source}")]
    Io {
        message: String,
        #[source]
        source: std::io::Error,
        /// The file it is about, when the caller named one (Python's `filename`).
        path: Option<std::path::PathBuf>,
    },

    /// The zip container (or the legacy stream around the pickles) is malformed.
    #[error("malformed archive: {reason}{location}")]
    Archive { reason: String, location: Location },

    /// The pickle stream is malformed: truncated, an unknown opcode, a stack underflow...
    #[error("malformed pickle: {reason}{location}")]
    Pickle { reason: String, location: Location },

    /// The pickle is well formed but asks for something weights-only loading forbids.
    #[error("{refusal}{location}")]
    Unsafe {
        refusal: Refusal,
        location: Location,
    },

    /// A resource limit was reached. `limit` is the field name in [`crate::Limits`].
    #[error("limit exceeded: {limit} (at most {max}){location}; raise it through the limits argument if the file is trusted")]
    Limit {
        limit: &'static str,
        max: u64,
        location: Location,
    },

    /// A tensor or storage description that does not fit its data.
    #[error("invalid tensor: {reason}{location}")]
    Tensor { reason: String, location: Location },

    /// A valid file using something this build cannot load (a compression method, a version...).
    #[error("unsupported: {reason}{location}")]
    Unsupported { reason: String, location: Location },
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    pub fn archive(reason: impl Into<String>, location: Location) -> Self {
        Error::Archive {
            reason: reason.into(),
            location,
        }
    }

    pub fn pickle(reason: impl Into<String>, location: Location) -> Self {
        Error::Pickle {
            reason: reason.into(),
            location,
        }
    }

    pub fn tensor(reason: impl Into<String>, location: Location) -> Self {
        Error::Tensor {
            reason: reason.into(),
            location,
        }
    }

    pub fn unsupported(reason: impl Into<String>, location: Location) -> Self {
        Error::Unsupported {
            reason: reason.into(),
            location,
        }
    }

    pub fn forbidden(reason: impl Into<String>, location: Location) -> Self {
        Error::Unsafe {
            refusal: Refusal::Forbidden(reason.into()),
            location,
        }
    }

    pub fn io(message: impl Into<String>, source: std::io::Error) -> Self {
        Error::Io {
            message: message.into(),
            source,
            path: None,
        }
    }

    /// An I/O error about the file at `path`.
    pub fn io_at(
        path: &std::path::Path,
        message: impl Into<String>,
        source: std::io::Error,
    ) -> Self {
        Error::Io {
            message: message.into(),
            source,
            path: Some(path.to_owned()),
        }
    }

    pub fn location_mut(&mut self) -> Option<&mut Location> {
        match self {
            Error::Io { .. } => None,
            Error::Archive { location, .. }
            | Error::Pickle { location, .. }
            | Error::Unsafe { location, .. }
            | Error::Limit { location, .. }
            | Error::Tensor { location, .. }
            | Error::Unsupported { location, .. } => Some(location),
        }
    }

    pub fn location(&self) -> Option<&Location> {
        match self {
            Error::Io { .. } => None,
            Error::Archive { location, .. }
            | Error::Pickle { location, .. }
            | Error::Unsafe { location, .. }
            | Error::Limit { location, .. }
            | Error::Tensor { location, .. }
            | Error::Unsupported { location, .. } => Some(location),
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
        match self {
            Error::Io {
                message, source, ..
            } => format!("{message}: {source}"),
            Error::Archive { reason, .. }
            | Error::Pickle { reason, .. }
            | Error::Tensor { reason, .. }
            | Error::Unsupported { reason, .. } => reason.clone(),
            Error::Unsafe { refusal, .. } => refusal.to_string(),
            Error::Limit { limit, max, .. } => format!("limit exceeded: {limit} (at most {max})"),
        }
    }
}
