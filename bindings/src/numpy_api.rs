//! numpy arrays over memory we own or map, made through numpy's C API so that a
//! tensor costs one call, not a Python-level constructor.

#![allow(unsafe_code)]

use std::cell::RefCell;
use std::collections::HashMap;
use std::os::raw::c_int;

use numpy::npyffi::{self, npy_intp, NPY_ARRAY_WRITEABLE, PY_ARRAY_API};
use numpy::{PyArray1, PyArrayDescr, PyArrayMethods};
use pyo3::prelude::*;

use crate::heap_memory::HeapMemory;
use tensorplay::torch::{DType, NumpyDType};

pub struct NumpyApi<'py> {
    py: Python<'py>,
    numpy: Bound<'py, PyModule>,
    descrs: RefCell<HashMap<DType, Bound<'py, PyArrayDescr>>>,
}

/// Memory a view can point into, and the object that keeps it alive.
#[derive(Clone)]
pub struct Buffer<'py> {
    pub base: Bound<'py, PyAny>,
    pub ptr: *mut u8,
    pub writable: bool,
}

impl<'py> NumpyApi<'py> {
    pub fn new(py: Python<'py>) -> PyResult<Self> {
        Ok(NumpyApi {
            py,
            numpy: py.import("numpy")?,
            descrs: RefCell::new(HashMap::new()),
        })
    }

    /// The numpy dtype of a torch dtype, or `None` when numpy cannot hold it.
    pub fn descr(&self, dtype: DType) -> PyResult<Option<Bound<'py, PyArrayDescr>>> {
        if let Some(d) = self.descrs.borrow().get(&dtype) {
            return Ok(Some(d.clone()));
        }
        let spec = match dtype.numpy() {
            None => return Ok(None),
            Some(NumpyDType::Native(s)) => s.into_pyobject(self.py)?.into_any(),
            Some(NumpyDType::MlDtypes(name)) => self.py.import("ml_dtypes")?.getattr(name)?,
        };
        let descr = self
            .numpy
            .getattr("dtype")?
            .call1((spec,))?
            .cast_into::<PyArrayDescr>()?;
        self.descrs.borrow_mut().insert(dtype, descr.clone());
        Ok(Some(descr))
    }

    /// Fresh memory for a storage of `n` bytes, about to be written, and where it
    /// starts. Allocation failure is a Python MemoryError, never a panic.
    ///
    /// numpy asks for transparent huge pages on arrays of 4 MiB and more, whatever
    /// the machine makes of them. Big storages get a heap block of our own
    /// instead, which an eager load's copy advises as `huge_pages` decides.
    pub fn alloc(&self, n: usize) -> PyResult<Buffer<'py>> {
        const NUMPY_ADVISES_FROM: usize = 4 << 20;
        let py = self.py;
        if n >= NUMPY_ADVISES_FROM {
            let memory = HeapMemory::new(n)?;
            let ptr = memory.ptr();
            let block = Buffer {
                base: Bound::new(py, memory)?.into_any(),
                ptr,
                writable: true,
            };
            return self.storage_array(&block, n);
        }
        let descr = self.uint8()?;
        let mut dims = [n as npy_intp];
        // SAFETY: dims outlives the call; NewFromDescr steals the descriptor reference
        // we hand it and returns null (with an exception set) when it cannot allocate.
        let array = unsafe {
            let ptr = PY_ARRAY_API.PyArray_NewFromDescr(
                py,
                npyffi::get_type_object(py, npyffi::NpyTypes::PyArray_Type),
                descr.clone().into_ptr() as *mut npyffi::PyArray_Descr,
                1,
                dims.as_mut_ptr(),
                std::ptr::null_mut(),
                std::ptr::null_mut(),
                0,
                std::ptr::null_mut(),
            );
            if ptr.is_null() {
                let cause = PyErr::fetch(py);
                return Err(pyo3::exceptions::PyMemoryError::new_err(format!(
                    "cannot allocate {n} bytes for a storage: {cause}"
                )));
            }
            Bound::from_owned_ptr(py, ptr)
        };
        let ptr = array.cast::<PyArray1<u8>>()?.data();
        Ok(Buffer {
            base: array,
            ptr,
            writable: true,
        })
    }

    /// The `n` bytes at `buf.ptr` as one uint8 array, which becomes the base of
    /// every array over them. Arrays over a mapping then show where their storage
    /// starts and ends, not just the whole mapping: `tensorplay.save` writes back
    /// the storage, with the views that shared it, and not the whole file.
    pub fn storage_array(&self, buf: &Buffer<'py>, n: usize) -> PyResult<Buffer<'py>> {
        let n = u64::try_from(n).map_err(|_| pyo3::exceptions::PyOverflowError::new_err(n))?;
        // SAFETY: the caller hands us memory of at least `n` bytes at `buf.ptr`.
        let array = unsafe { self.view(&self.uint8()?, buf, 0, &[n], &[1])? };
        Ok(Buffer {
            base: array,
            ptr: buf.ptr,
            writable: buf.writable,
        })
    }

    fn uint8(&self) -> PyResult<Bound<'py, PyArrayDescr>> {
        self.descr(DType::UInt8)?
            .ok_or_else(|| PyErr::new::<pyo3::exceptions::PyTypeError, _>("uint8"))
    }

    /// An array of `descr` over `buf.ptr + byte_offset`, with `buf.base` as its base.
    ///
    /// # Safety
    /// The caller has checked that `byte_offset` plus the extent of `shape`/`strides`
    /// lies inside the memory `buf` describes.
    pub unsafe fn view(
        &self,
        descr: &Bound<'py, PyArrayDescr>,
        buf: &Buffer<'py>,
        byte_offset: usize,
        shape: &[u64],
        strides_bytes: &[u64],
    ) -> PyResult<Bound<'py, PyAny>> {
        let mut dims: Vec<npy_intp> = shape.iter().map(|d| *d as npy_intp).collect();
        let mut strides: Vec<npy_intp> = strides_bytes.iter().map(|s| *s as npy_intp).collect();
        let flags: c_int = if buf.writable { NPY_ARRAY_WRITEABLE } else { 0 };
        let py = self.py;
        // SAFETY: dims and strides outlive the call; the descriptor reference is
        // stolen by NewFromDescr, so we hand it a new one; the data pointer is in
        // bounds per the caller's contract and kept alive by the base object.
        unsafe {
            let descr_ptr = descr.clone().into_ptr() as *mut npyffi::PyArray_Descr;
            let array = PY_ARRAY_API.PyArray_NewFromDescr(
                py,
                npyffi::get_type_object(py, npyffi::NpyTypes::PyArray_Type),
                descr_ptr,
                dims.len() as c_int,
                dims.as_mut_ptr(),
                strides.as_mut_ptr(),
                buf.ptr.add(byte_offset) as *mut std::ffi::c_void,
                flags,
                std::ptr::null_mut(),
            );
            if array.is_null() {
                return Err(PyErr::fetch(py));
            }
            let array = Bound::from_owned_ptr(py, array);
            let base = buf.base.clone().into_ptr();
            if PY_ARRAY_API.PyArray_SetBaseObject(
                py,
                array.as_ptr() as *mut npyffi::PyArrayObject,
                base,
            ) != 0
            {
                return Err(PyErr::fetch(py));
            }
            Ok(array)
        }
    }
}
