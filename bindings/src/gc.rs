//! Python's cyclic garbage collector, paused while a load creates its objects.
//!
//! A state dict of 50,000 tensors allocates a few hundred thousand tracked
//! objects in one go; every 700 of them CPython runs a collection that walks the
//! young generation, and older ones grow with the dict. None of that finds
//! garbage: what a load builds is reachable from its result until it returns.

use pyo3::prelude::*;

/// Re-enables the collector when dropped, if it was enabled before.
pub struct GcPause<'py> {
    gc: Option<Bound<'py, PyModule>>,
}

pub fn pause(py: Python<'_>) -> PyResult<GcPause<'_>> {
    let gc = py.import("gc")?;
    if !gc.call_method0("isenabled")?.is_truthy()? {
        return Ok(GcPause { gc: None });
    }
    gc.call_method0("disable")?;
    Ok(GcPause { gc: Some(gc) })
}

impl Drop for GcPause<'_> {
    fn drop(&mut self) {
        if let Some(gc) = self.gc.take() {
            // Enabling cannot fail; if it somehow did, there is no caller to tell.
            let _ = gc.call_method0("enable");
        }
    }
}
