//! `_core.plan_archive`: CRCs of the payloads (GIL released) and the byte layout of
//! a checkpoint archive, as segments the Python writer streams to the file.

#![allow(unsafe_code)]

use pyo3::buffer::PyBuffer;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList, PyTuple};

use tensorplay::save::zip_writer::{plan, Segment};
use tensorplay::save::{checkpoint_records, crc32, StorageRecord};

/// Plan `root/...` for `pickle` and one storage per buffer. Returns a list whose
/// items are bytes (write them), an int (write buffer i) or `("hole", n)`.
#[pyfunction]
#[pyo3(signature = (root, pickle, buffers, *, alignment=64, compute_crc32=true, byteorder_last=false, reserved=false))]
#[allow(clippy::too_many_arguments)]
pub fn plan_archive<'py>(
    py: Python<'py>,
    root: &str,
    pickle: Vec<u8>,
    buffers: Vec<Bound<'py, PyAny>>,
    alignment: u64,
    compute_crc32: bool,
    byteorder_last: bool,
    reserved: bool,
) -> PyResult<Bound<'py, PyList>> {
    if alignment == 0 || alignment > 0xffff {
        return Err(PyValueError::new_err(
            "storage_alignment must be between 1 and 65535",
        ));
    }
    let views = buffers
        .iter()
        .map(PyBuffer::<u8>::get)
        .collect::<PyResult<Vec<_>>>()?;
    let spans: Vec<(usize, usize)> = views
        .iter()
        .map(|b| (b.buf_ptr() as usize, b.len_bytes()))
        .collect();
    let storages: Vec<StorageRecord> = py.detach(|| {
        spans
            .iter()
            .enumerate()
            .map(|(index, (ptr, len))| {
                let crc = if compute_crc32 && !reserved {
                    // SAFETY: each span is a contiguous buffer kept alive and unchanged by
                    // its PyBuffer in `views` for the length of this call.
                    crc32(unsafe { std::slice::from_raw_parts(*ptr as *const u8, *len) })
                } else {
                    0
                };
                StorageRecord {
                    len: *len as u64,
                    index,
                    crc32: crc,
                    reserved,
                }
            })
            .collect()
    });
    drop(views);
    let records = checkpoint_records(pickle, &storages, alignment, byteorder_last);
    let (segments, _) = plan(root, &records, alignment, compute_crc32);
    let out = PyList::empty(py);
    for segment in segments {
        match segment {
            Segment::Bytes(b) => out.append(PyBytes::new(py, &b))?,
            Segment::Buffer(i) => out.append(i)?,
            Segment::Hole(n) => out.append(PyTuple::new(
                py,
                [
                    ("hole").into_pyobject(py)?.into_any(),
                    n.into_pyobject(py)?.into_any(),
                ],
            )?)?,
        }
    }
    Ok(out)
}
