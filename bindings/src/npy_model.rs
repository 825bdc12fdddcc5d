//! `_core._npy_header_model`: the scanner's model of numpy's `.npy` header
//! reading, for the test that holds it to numpy itself.

use pyo3::prelude::*;

/// `(outcome, pickle_offset)`: `"object"` (numpy unpickles from
/// `pickle_offset`), `"plain"`, `"refused"` or `"unsure"`; the offset is where
/// the header ends, `None` when it is not all there.
#[pyfunction(name = "_npy_header_model")]
pub fn npy_header_model(data: &[u8]) -> (&'static str, Option<usize>) {
    let header = tensorplay::archive::npy::read_header(data);
    (header.outcome.name(), header.data_offset)
}
