//! What `_core`'s scans return, as typed records read by name: the core's
//! `Report`, `Finding` and `Problem`, for the package to make the public
//! `scanner.ScanReport`, `scanner.GlobalFinding` and `scanner.Problem` from.

use pyo3::prelude::*;
use pyo3::types::PyTuple;

use tensorplay::scan::{Finding, Problem, Report};

/// One file's scan.
#[pyclass(frozen, get_all, module = "tensorplay._core", name = "ScanResult")]
pub struct ScanResult {
    format: &'static str,
    verdict: &'static str,
    /// The globals outside the allowlist: a tuple of `ScanFinding`.
    findings: Py<PyTuple>,
    /// A tuple of `ScanProblem`.
    problems: Py<PyTuple>,
    pickles: u32,
    /// The globals inside the allowlist when the scan listed them, else None.
    allowlisted: Option<Py<PyTuple>>,
    skipped_because: Option<&'static str>,
}

/// A global a pickle names.
#[pyclass(frozen, get_all, module = "tensorplay._core", name = "ScanFinding")]
pub struct ScanFinding {
    name: String,
    dangerous: bool,
    location: String,
    offset: u64,
    module: String,
    wrappers: Py<PyTuple>,
}

/// Why (part of) a file could not be read.
#[pyclass(frozen, get_all, module = "tensorplay._core", name = "ScanProblem")]
pub struct ScanProblem {
    kind: &'static str,
    location: String,
    reason: String,
}

#[pymethods]
impl ScanResult {
    fn __repr__(&self) -> String {
        format!(
            "ScanResult(format={:?}, verdict={:?}, pickles={})",
            self.format, self.verdict, self.pickles
        )
    }
}

#[pymethods]
impl ScanFinding {
    fn __repr__(&self) -> String {
        format!(
            "ScanFinding(name={:?}, dangerous={}, location={:?}, offset={})",
            self.name,
            if self.dangerous { "True" } else { "False" },
            self.location,
            self.offset
        )
    }
}

#[pymethods]
impl ScanProblem {
    fn __repr__(&self) -> String {
        format!(
            "ScanProblem(kind={:?}, location={:?}, reason={:?})",
            self.kind, self.location, self.reason
        )
    }
}

fn findings(py: Python<'_>, found: &[Finding]) -> PyResult<Py<PyTuple>> {
    let records = found.iter().map(|f| {
        let module = f.name.get(..f.module_len).unwrap_or(&f.name);
        Py::new(
            py,
            ScanFinding {
                name: f.name.clone(),
                dangerous: f.dangerous,
                location: f.location.clone(),
                offset: f.offset,
                module: module.to_owned(),
                wrappers: PyTuple::new(py, &f.wrappers)?.unbind(),
            },
        )
    });
    Ok(PyTuple::new(py, records.collect::<PyResult<Vec<_>>>()?)?.unbind())
}

fn problem(py: Python<'_>, p: &Problem) -> PyResult<Py<ScanProblem>> {
    Py::new(
        py,
        ScanProblem {
            kind: p.kind,
            location: p.location.clone(),
            reason: p.reason.clone(),
        },
    )
}

/// The report, as Python reads it.
pub fn scan_result<'py>(py: Python<'py>, report: &Report) -> PyResult<Bound<'py, ScanResult>> {
    let problems = (report.problems.iter())
        .map(|p| problem(py, p))
        .collect::<PyResult<Vec<_>>>()?;
    let allowlisted = report.allowlisted.as_deref().map(|a| findings(py, a));
    Bound::new(
        py,
        ScanResult {
            format: report.format.name(),
            verdict: report.verdict().name(),
            findings: findings(py, &report.findings)?,
            problems: PyTuple::new(py, problems)?.unbind(),
            pickles: report.pickles,
            allowlisted: allowlisted.transpose()?,
            skipped_because: report.skipped_because,
        },
    )
}
