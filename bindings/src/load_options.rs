//! `_core.load`'s options as typed Python objects: how the file is mapped
//! (`MapMode`), what storages get (`DataMode`), where they go (`Restore`, with
//! the callable it calls, in a `Placement`), and the rest of a load
//! (`LoadOptions`). Each is checked once, where Python makes it: a placement
//! that calls nothing with a restore that needs a call, or the reverse, cannot
//! be made.

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

use crate::options::{
    check_user_globals, load_options, unknown_globals, Backend, ByteOrder, Encoding, LimitOverrides,
};
use crate::storages::{DataMode, Restore};
use tensorplay::archive::source;
use tensorplay::checkpoint::{self, Endianness};

/// How a load maps a file it opens by path.
#[pyclass(
    eq,
    eq_int,
    hash,
    frozen,
    from_py_object,
    module = "tensorplay._core",
    name = "MapMode"
)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MapMode {
    /// Read-only: storages get copies of their bytes.
    #[pyo3(name = "READ_ONLY")]
    ReadOnly,
    /// A private writable mapping the storages are views of (`mmap=True`).
    #[pyo3(name = "PRIVATE")]
    Private,
    /// A shared writable mapping: writes reach the file (`MAP_SHARED`).
    #[pyo3(name = "SHARED")]
    Shared,
}

impl From<MapMode> for source::MapMode {
    fn from(mode: MapMode) -> Self {
        match mode {
            MapMode::ReadOnly => source::MapMode::ReadOnly,
            MapMode::Private => source::MapMode::Private,
            MapMode::Shared => source::MapMode::Shared,
        }
    }
}

/// What storages get and where they go: `restore_location` is called as
/// `restore_location(storage, location)` (torch's `restore_location`) for the
/// storages `restore` names, and only with a `restore` other than `STAY`;
/// `fake(tensor)` is called for each tensor of a load of meta storages.
#[pyclass(frozen, get_all, module = "tensorplay._core", name = "Placement")]
pub struct Placement {
    pub data: DataMode,
    pub restore: Restore,
    pub restore_location: Option<Py<PyAny>>,
    pub fake: Option<Py<PyAny>>,
}

#[pymethods]
impl Placement {
    #[new]
    #[pyo3(signature = (data=DataMode::Read, restore=Restore::Stay, restore_location=None, fake=None))]
    fn new(
        data: DataMode,
        restore: Restore,
        restore_location: Option<Py<PyAny>>,
        fake: Option<Py<PyAny>>,
    ) -> PyResult<Self> {
        match (restore, &restore_location) {
            (Restore::Stay, Some(_)) => {
                return Err(PyValueError::new_err(
                    "a restore_location is called only with a restore other than Restore.STAY",
                ))
            }
            (Restore::Saved | Restore::SavedAndCpu | Restore::Mapped, None) => {
                return Err(PyValueError::new_err(
                    "a restore other than Restore.STAY needs the restore_location it calls",
                ))
            }
            _ => {}
        }
        if data == DataMode::Meta && restore != Restore::Stay {
            return Err(PyValueError::new_err(
                "meta storages stay where they are: DataMode.META takes Restore.STAY",
            ));
        }
        if fake.is_some() && data != DataMode::Meta {
            return Err(PyValueError::new_err(
                "fake tensors are made of meta storages: fake needs DataMode.META",
            ));
        }
        Ok(Placement {
            data,
            restore,
            restore_location,
            fake,
        })
    }
}

impl Placement {
    /// Storages built on the CPU, read, left there.
    fn cpu(py: Python<'_>) -> PyResult<Py<Placement>> {
        Py::new(
            py,
            Placement::new(DataMode::Read, Restore::Stay, None, None)?,
        )
    }
}

/// Everything a load is asked besides its source: the backend, the mapping,
/// the user's allowlist (its names and the objects they name, in order), the
/// limits, how pickled strings and numbers read, the copy threads, whether a
/// global outside the allowlist becomes a stub, and the storages' placement.
#[pyclass(frozen, module = "tensorplay._core", name = "LoadOptions")]
pub struct LoadOptions {
    pub backend: Backend,
    #[pyo3(get)]
    pub map: MapMode,
    /// The objects the allowlist's names name, in the order of its names.
    pub user_objects: Vec<Py<PyAny>>,
    /// What the core is asked: the allowlist's names, the limits, how strings and
    /// numbers read, and what a global outside the allowlist becomes.
    pub core: checkpoint::LoadOptions,
    pub threads: Option<usize>,
    #[pyo3(get)]
    pub placement: Py<Placement>,
}

#[pymethods]
impl LoadOptions {
    #[new]
    #[pyo3(signature = (*, backend, map=MapMode::ReadOnly, user_names=Vec::new(), user_objects=Vec::new(), limits=LimitOverrides::default(), encoding=Encoding::default(), endianness=ByteOrder(Endianness::Little), threads=None, stub=false, placement=None))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        backend: Backend,
        map: MapMode,
        user_names: Vec<String>,
        user_objects: Vec<Py<PyAny>>,
        limits: LimitOverrides,
        encoding: Encoding,
        endianness: ByteOrder,
        threads: Option<usize>,
        stub: bool,
        placement: Option<Py<Placement>>,
    ) -> PyResult<Self> {
        check_user_globals(&user_names, &user_objects)?;
        let placement = match placement {
            Some(p) => p,
            None => Placement::cpu(py)?,
        };
        if backend == Backend::Numpy && placement.get().uses_torch() {
            return Err(PyValueError::new_err(
                "a placement that calls restore_location or fake needs the torch backend",
            ));
        }
        let mut core = load_options(user_names, limits, encoding, endianness.0);
        core.unknown_globals = unknown_globals(stub);
        Ok(LoadOptions {
            backend,
            map,
            user_objects,
            core,
            threads,
            placement,
        })
    }
}

impl Placement {
    /// Whether this placement calls torch's functions on what the load builds.
    fn uses_torch(&self) -> bool {
        self.restore_location.is_some() || self.fake.is_some()
    }
}
