//! Fresh memory for a big numpy-backend storage: one block of the C heap,
//! owned by a Python object that the storage's arrays keep as their base.
//!
//! A block from plain `malloc` is what a service that loads file after file
//! wants: freed, it goes back to glibc's heap, and the next load's request of
//! the same size fits it exactly, in pages already faulted in. (A mapping of
//! its own is unmapped when freed, so every load faulted each 4 KiB page of
//! its storages in again; numpy's own allocator would advise huge pages on
//! arrays of 4 MiB and more whatever `huge_pages` decides.) Storages above
//! glibc's mmap threshold (32 MiB at most) still get a mapping from glibc,
//! as torch's do.

#![allow(unsafe_code)]

use pyo3::exceptions::PyMemoryError;
use pyo3::prelude::*;

#[pyclass(frozen, module = "tensorplay._core", name = "HeapMemory")]
pub struct HeapMemory {
    ptr: usize,
    len: usize,
}

impl HeapMemory {
    /// `len` uninitialised bytes (at least one allocated), or a MemoryError.
    pub fn new(len: usize) -> PyResult<Self> {
        // SAFETY: malloc of any size is sound; null (no memory) is checked.
        let ptr = unsafe { libc::malloc(len.max(1)) };
        if ptr.is_null() {
            return Err(PyMemoryError::new_err(format!(
                "cannot allocate {len} bytes for a storage"
            )));
        }
        Ok(HeapMemory {
            ptr: ptr as usize,
            len,
        })
    }

    pub fn ptr(&self) -> *mut u8 {
        self.ptr as *mut u8
    }
}

#[pymethods]
impl HeapMemory {
    fn __len__(&self) -> usize {
        self.len
    }
}

impl Drop for HeapMemory {
    fn drop(&mut self) {
        // SAFETY: `ptr` came from malloc in `new` and is freed only here; the
        // arrays over it hold this object, so none outlives the block.
        unsafe { libc::free(self.ptr as *mut libc::c_void) }
    }
}
