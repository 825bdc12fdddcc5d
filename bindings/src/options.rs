//! The typed arguments of `_core`'s functions. A name or a dict from Python
//! becomes an enum or a struct here, at the boundary, and anything else is a
//! `ValueError` naming what is accepted: nothing past this point compares strings.

use std::collections::HashMap;

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

use tensorplay::checkpoint::{Endianness, LoadOptions, Trailing};
use tensorplay::limits::{Limit, Limits};
use tensorplay::pickle::machine::StringEncoding;
use tensorplay::torch::policy::{UnknownGlobals, UserGlobals};

/// Which objects a load builds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Torch,
    Numpy,
}

/// `FromPyObject` for an enum named by strings.
macro_rules! named {
    ($ty:ty, $what:literal, { $($name:literal => $value:expr),+ $(,)? }) => {
        impl<'a, 'py> FromPyObject<'a, 'py> for $ty {
            type Error = PyErr;

            fn extract(obj: Borrowed<'a, 'py, PyAny>) -> PyResult<Self> {
                let name: String = obj.extract()?;
                match name.as_str() {
                    $($name => Ok($value),)+
                    other => Err(PyValueError::new_err(format!(
                        concat!("unknown ", $what, " {:?}; known: {}"),
                        other,
                        [$($name),+].join(", ")
                    ))),
                }
            }
        }
    };
}

named!(Backend, "backend", { "torch" => Backend::Torch, "numpy" => Backend::Numpy });
/// The core's byte order, named from Python (the core knows no Python).
#[derive(Debug, Clone, Copy)]
pub struct ByteOrder(pub Endianness);

named!(ByteOrder, "endianness", {
    "native" => ByteOrder(Endianness::Native),
    "little" => ByteOrder(Endianness::Little),
    "big" => ByteOrder(Endianness::Big),
});

/// pickle's `encoding` argument, with the aliases Python's codecs accept.
pub struct Encoding(pub StringEncoding);

impl<'a, 'py> FromPyObject<'a, 'py> for Encoding {
    type Error = PyErr;

    fn extract(obj: Borrowed<'a, 'py, PyAny>) -> PyResult<Self> {
        let name: String = obj.extract()?;
        StringEncoding::from_name(&name)
            .map(Encoding)
            .ok_or_else(|| PyValueError::new_err(format!("unsupported encoding {name:?}")))
    }
}

impl Default for Encoding {
    fn default() -> Self {
        Encoding(StringEncoding::Utf8)
    }
}

/// The limits, with a dict of `{name: value}` overrides applied.
#[derive(Default)]
pub struct LimitOverrides(pub Limits);

impl<'a, 'py> FromPyObject<'a, 'py> for LimitOverrides {
    type Error = PyErr;

    fn extract(obj: Borrowed<'a, 'py, PyAny>) -> PyResult<Self> {
        let mut limits = Limits::default();
        if obj.is_none() {
            return Ok(LimitOverrides(limits));
        }
        let overrides: HashMap<String, u64> = obj.extract()?;
        for (name, value) in overrides {
            let limit = Limit::from_name(&name).ok_or_else(|| {
                let known: Vec<&str> = Limit::ALL.iter().map(|l| l.name()).collect();
                PyValueError::new_err(format!(
                    "unknown limit {name:?}; known: {}",
                    known.join(", ")
                ))
            })?;
            limits.set(limit, value);
        }
        Ok(LimitOverrides(limits))
    }
}

/// What a global outside the allowlist becomes: `stub=True` asks for stubs.
pub fn unknown_globals(stub: bool) -> UnknownGlobals {
    if stub {
        UnknownGlobals::Stub
    } else {
        UnknownGlobals::Refuse
    }
}

/// The options of a load, from its typed arguments.
pub fn load_options(
    user_names: Vec<String>,
    limits: LimitOverrides,
    encoding: Encoding,
    endianness: Endianness,
) -> LoadOptions {
    LoadOptions {
        limits: limits.0,
        user_globals: UserGlobals::new(user_names),
        encoding: encoding.0,
        endianness,
        trailing: Trailing::Refused,
        unknown_globals: UnknownGlobals::Refuse,
    }
}

/// The user's allowlist comes as names and the objects they name, in order.
pub fn check_user_globals<T>(names: &[String], objects: &[T]) -> PyResult<()> {
    if names.len() == objects.len() {
        Ok(())
    } else {
        Err(PyValueError::new_err(
            "user_names and user_objects differ in length",
        ))
    }
}
