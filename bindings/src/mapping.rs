//! A mapped checkpoint file as a Python buffer. Tensors loaded with `mmap=True`
//! are views of it; it lives as long as any of them does.

#![allow(unsafe_code)]

use std::os::raw::c_int;
use std::sync::Arc;

use pyo3::exceptions::PyBufferError;
use pyo3::ffi;
use pyo3::prelude::*;

use tensorplay::archive::source::Source;

#[pyclass(frozen, module = "tensorplay._core", name = "MappedFile")]
pub struct MappedFile {
    // Keeps the mapping alive; `ptr` points into it.
    _source: Arc<Source>,
    ptr: usize,
    len: usize,
    writable: bool,
}

impl MappedFile {
    /// Wrap a source; writable only when its mapping is (private or shared).
    pub fn new(mut source: Source) -> (Self, Arc<Source>) {
        let writable_ptr = source.writable_ptr();
        let len = source.bytes().len();
        let (ptr, writable) = match writable_ptr {
            Some(p) => (p as usize, true),
            None => (source.bytes().as_ptr() as usize, false),
        };
        let source = Arc::new(source);
        (
            MappedFile {
                _source: source.clone(),
                ptr,
                len,
                writable,
            },
            source,
        )
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_writable(&self) -> bool {
        self.writable
    }

    pub fn ptr(&self) -> *mut u8 {
        self.ptr as *mut u8
    }
}

#[pymethods]
impl MappedFile {
    fn __len__(&self) -> usize {
        self.len
    }

    /// # Safety
    /// Called by CPython with a valid `view`; the buffer stays valid while the view
    /// holds its reference to this object, which owns the mapping.
    unsafe fn __getbuffer__(
        slf: Bound<'_, Self>,
        view: *mut ffi::Py_buffer,
        flags: c_int,
    ) -> PyResult<()> {
        let this = slf.get();
        if flags & ffi::PyBUF_WRITABLE != 0 && !this.writable {
            return Err(PyBufferError::new_err("the mapping is read-only"));
        }
        let len =
            isize::try_from(this.len).map_err(|_| PyBufferError::new_err("mapping too large"))?;
        let readonly = c_int::from(!this.writable);
        // SAFETY: `view` is valid per the protocol; the pointer and length describe the
        // mapping owned by `slf`, which PyBuffer_FillInfo keeps alive via `view.obj`.
        let rc = unsafe {
            ffi::PyBuffer_FillInfo(view, slf.as_ptr(), this.ptr as *mut _, len, readonly, flags)
        };
        if rc != 0 {
            return Err(PyErr::fetch(slf.py()));
        }
        Ok(())
    }

    unsafe fn __releasebuffer__(&self, _view: *mut ffi::Py_buffer) {}
}
