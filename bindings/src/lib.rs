//! The Python extension `tensorplay._core` over the core crate `tensorplay`: the
//! only pyo3 code. The core knows nothing of Python; this crate turns its
//! checkpoints, scans and errors into Python objects and back.

// As in the core: input can never panic the extension.
#![cfg_attr(
    not(test),
    deny(
        clippy::unwrap_used,
        clippy::expect_used,
        clippy::indexing_slicing,
        clippy::panic
    )
)]

use pyo3::prelude::*;
use pyo3::types::PyDict;

mod archive;
mod build;
mod dcp;
mod errors;
mod gc;
mod heap_memory;
mod huge_pages;
mod inspect;
mod load;
mod load_options;
mod mapping;
mod npy_model;
mod numpy_api;
mod options;
mod pickle;
mod rust_heap;
mod save;
mod scan;
mod scan_result;
mod storages;
mod tar_model;
mod tensors;
mod torch_api;

use tensorplay::limits::{Limit, Limits};

/// The default value of every limit, by name.
#[pyfunction]
fn default_limits(py: Python<'_>) -> PyResult<Bound<'_, PyDict>> {
    let d = PyDict::new(py);
    let defaults = Limits::default();
    for limit in Limit::ALL {
        d.set_item(limit.name(), defaults.get(limit))?;
    }
    Ok(d)
}

/// torch's dtypes, by name: `(itemsize, numpy_spec, from_ml_dtypes, legacy_storage)`,
/// where `numpy_spec` is a numpy type string or an ml_dtypes name (`None` where
/// numpy has no dtype) and `legacy_storage` the legacy storage class (`FloatStorage`).
#[pyfunction]
fn dtypes(py: Python<'_>) -> PyResult<Bound<'_, PyDict>> {
    use tensorplay::torch::{DType, NumpyDType};
    let d = PyDict::new(py);
    for dtype in DType::ALL {
        let (spec, ml) = match dtype.numpy() {
            Some(NumpyDType::Native(spec)) => (Some(spec), false),
            Some(NumpyDType::MlDtypes(name)) => (Some(name), true),
            None => (None, false),
        };
        let row = (dtype.itemsize(), spec, ml, dtype.legacy_storage_name());
        d.set_item(dtype.name(), row)?;
    }
    Ok(d)
}

/// The denylist, family by family: `(name, why, sources, modules, names)`.
#[pyfunction]
fn denylist() -> Vec<DenylistRow> {
    use tensorplay::torch::policy::FAMILIES;
    (FAMILIES.iter())
        .map(|f| {
            (
                f.name,
                f.why,
                f.sources,
                f.modules.to_vec(),
                f.names.to_vec(),
            )
        })
        .collect()
}

/// The real readers the scanner models: `(name, reader, version, reads)`.
#[pyfunction]
fn reader_models() -> Vec<(&'static str, &'static str, &'static str, &'static str)> {
    (tensorplay::scan::readers::MODELS.iter())
        .map(|m| (m.name, m.reader, m.version, m.reads))
        .collect()
}

/// The globals a file named `file_name` may name beyond the allowlist (a
/// distributed checkpoint's `.metadata`: its metadata classes).
#[pyfunction]
fn allowed_in_file(file_name: &str) -> Vec<&'static str> {
    tensorplay::torch::policy::allowed_in_file(file_name).to_vec()
}

/// What in a torch.export program's JSON torch runs as Python: `(JSON path,
/// what torch does with it)` each. A MalformedCheckpointError names `entry`
/// when the JSON cannot be read to its end.
#[pyfunction]
fn export_program_hazards(
    py: Python<'_>,
    json: &[u8],
    entry: &str,
) -> PyResult<Vec<(String, &'static str)>> {
    match tensorplay::torch::export_program::hazards(json) {
        Ok(hazards) => Ok(hazards.into_iter().map(|h| (h.at, h.why)).collect()),
        Err(why) => Err(errors::to_pyerr(
            py,
            tensorplay::error::Error::archive(
                format!("a torch.export program that cannot be read to its end: {why}"),
                tensorplay::error::Location::entry(entry),
            ),
        )),
    }
}

/// Whether `torch.export.load` deserializes the member `name` as a program, in a
/// zip whose torch.export root folder is `root` ("" for none).
#[pyfunction]
fn is_export_program(root: &str, name: &str) -> bool {
    let root = (!root.is_empty()).then_some(root.trim_end_matches('/').as_bytes());
    tensorplay::torch::records::is_export_program(root, name.as_bytes())
}

/// Whether `module.name` is on the denylist of names that run code, touch the
/// system or unpickle nested data: what no allowlist may lift (`--allow` refuses
/// it) and a scan marks dangerous.
#[pyfunction]
fn is_dangerous(module: &str, name: &str) -> bool {
    tensorplay::torch::policy::is_dangerous(module, name)
}

type DenylistRow = (
    &'static str,
    &'static str,
    &'static str,
    Vec<&'static str>,
    Vec<&'static str>,
);

#[pymodule(name = "_core")]
fn tensorplay_core(m: &Bound<'_, PyModule>) -> PyResult<()> {
    rust_heap::keep_usable_after_fork();
    errors::register(m)?;
    m.add_class::<mapping::MappedFile>()?;
    m.add_class::<heap_memory::HeapMemory>()?;
    m.add_class::<scan_result::ScanResult>()?;
    m.add_class::<scan_result::ScanFinding>()?;
    m.add_class::<scan_result::ScanProblem>()?;
    m.add_class::<load_options::LoadOptions>()?;
    m.add_class::<load_options::Placement>()?;
    m.add_class::<load_options::MapMode>()?;
    m.add_class::<storages::DataMode>()?;
    m.add_class::<storages::Restore>()?;
    m.add_function(wrap_pyfunction!(load::load, m)?)?;
    m.add_function(wrap_pyfunction!(default_limits, m)?)?;
    m.add_function(wrap_pyfunction!(huge_pages::huge_pages, m)?)?;
    m.add_function(wrap_pyfunction!(dtypes, m)?)?;
    m.add_function(wrap_pyfunction!(denylist, m)?)?;
    m.add_function(wrap_pyfunction!(allowed_in_file, m)?)?;
    m.add_function(wrap_pyfunction!(is_dangerous, m)?)?;
    m.add_function(wrap_pyfunction!(export_program_hazards, m)?)?;
    m.add_function(wrap_pyfunction!(is_export_program, m)?)?;
    m.add_function(wrap_pyfunction!(scan::scan, m)?)?;
    m.add_function(wrap_pyfunction!(scan::scan_spans, m)?)?;
    m.add_function(wrap_pyfunction!(scan::scan_waves, m)?)?;
    m.add_function(wrap_pyfunction!(scan::scan_spans_waves, m)?)?;
    m.add_function(wrap_pyfunction!(scan::globals_outside_allowlist_waves, m)?)?;
    m.add_function(wrap_pyfunction!(reader_models, m)?)?;
    m.add_function(wrap_pyfunction!(save::plan_archive, m)?)?;
    m.add_function(wrap_pyfunction!(inspect::inspect, m)?)?;
    m.add_function(wrap_pyfunction!(scan::globals_outside_allowlist, m)?)?;
    m.add_function(wrap_pyfunction!(scan::is_tensordict_leaf, m)?)?;
    m.add_function(wrap_pyfunction!(pickle::loads, m)?)?;
    m.add_function(wrap_pyfunction!(archive::zip_entries, m)?)?;
    m.add_function(wrap_pyfunction!(archive::is_storage_record, m)?)?;
    m.add_function(wrap_pyfunction!(archive::archive_kind, m)?)?;
    m.add_function(wrap_pyfunction!(archive::pt2_record_kind, m)?)?;
    m.add_function(wrap_pyfunction!(archive::torchscript_module_lists, m)?)?;
    m.add_function(wrap_pyfunction!(archive::inflate_entries, m)?)?;
    m.add_function(wrap_pyfunction!(archive::decode_stream, m)?)?;
    m.add_function(wrap_pyfunction!(dcp::dcp_chunks, m)?)?;
    m.add_function(wrap_pyfunction!(dcp::read_ranges, m)?)?;
    m.add_function(wrap_pyfunction!(tar_model::_tar_model, m)?)?;
    m.add_function(wrap_pyfunction!(errors::error, m)?)?;
    m.add_function(wrap_pyfunction!(errors::py_build_error, m)?)?;
    m.add_function(wrap_pyfunction!(npy_model::npy_header_model, m)?)?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    // What a scan by ranges of a file far away reads first, in one round trip:
    // the end records (their size tells the file's) and the first block.
    m.add("FIRST_TAIL", tensorplay::archive::zip::END_RECORDS_LEN)?;
    m.add(
        "RUNS_CODE_KINDS",
        tensorplay::scan::problem_kind::RUNS_CODE.to_vec(),
    )?;
    m.add("FIRST_BLOCK", tensorplay::archive::tar::BLOCK)?;
    Ok(())
}
