//! `_core._tar_model`, for tests only: the model of CPython's `tarfile`
//! (`archive::tar`) laid bare, so `tests/test_tar_model.py` can hold it to
//! `tarfile` itself.

use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyString};

use tensorplay::archive::tar::{self, Content, Failure, Member};
use tensorplay::limits::Limits;

/// A member: `(name, linkname, type, offset, offset_data, size, sparse,
/// extractfile, extract)`, the last two being what `extractfile(m).read()`
/// and `extract(m)` give (bytes, or the name of what they raise), `None` for a
/// member without data (links included).
type MemberRow<'py> = (
    Bound<'py, PyBytes>,
    Bound<'py, PyBytes>,
    Bound<'py, PyBytes>,
    u64,
    u64,
    i128,
    Option<Vec<(i128, i128)>>,
    Option<Bound<'py, PyAny>>,
    Option<Bound<'py, PyAny>>,
);

/// `(opens, members, error)`: whether `tarfile.open(mode="r:")` succeeds, the
/// members `getmembers()` lists, and what `open` or `getmembers` raises (an
/// exception's name, or `"limit: ..."` where the model stops).
#[pyfunction]
#[pyo3(signature = (data, *, max_members=Limits::default().max_zip_entries, max_content=1 << 20))]
pub fn _tar_model<'py>(
    py: Python<'py>,
    data: &[u8],
    max_members: u64,
    max_content: u64,
) -> PyResult<(bool, Vec<MemberRow<'py>>, Option<String>)> {
    let archive = match tar::open(
        data,
        &Limits {
            max_zip_entries: max_members,
            ..Limits::default()
        },
    ) {
        Ok(archive) => archive,
        Err(failure) => return Ok((false, Vec::new(), Some(failure_name(&failure)))),
    };
    let members = (archive.members.iter())
        .map(|m| member_row(py, m, data, max_content))
        .collect::<PyResult<_>>()?;
    Ok((true, members, archive.failure.as_ref().map(failure_name)))
}

fn member_row<'py>(
    py: Python<'py>,
    m: &Member,
    data: &[u8],
    max_content: u64,
) -> PyResult<MemberRow<'py>> {
    let content = |c: Content<'_>| -> Bound<'py, PyAny> {
        match c.failure {
            None => PyBytes::new(py, &c.bytes).into_any(),
            Some(f) => PyString::new(py, &failure_name(&f)).into_any(),
        }
    };
    let (file, extracted) = if m.has_data() {
        (
            Some(content(m.file_content(data, max_content))),
            Some(content(m.extracted_content(data, max_content))),
        )
    } else {
        (None, None)
    };
    Ok((
        PyBytes::new(py, &m.name),
        PyBytes::new(py, &m.linkname),
        PyBytes::new(py, &[m.kind]),
        m.offset,
        m.offset_data,
        m.size,
        m.sparse.clone(),
        file,
        extracted,
    ))
}

fn failure_name(failure: &Failure) -> String {
    match failure {
        Failure::ReadError(_) => "ReadError".to_owned(),
        Failure::Raises(e) => e.name().to_owned(),
        Failure::Limit(why) => format!("limit: {why}"),
    }
}
