//! Giving every storage its Python object: a view of the mapping where the bytes
//! can be used in place, fresh memory that `fill` copies into otherwise, meta
//! storages that read nothing, and torch's `map_location` applied to each.

#![allow(unsafe_code)]

use std::collections::HashMap;

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PySlice, PyTuple};

use crate::errors::wrap_placement_error;
use crate::mapping::MappedFile;
use crate::numpy_api::{Buffer, NumpyApi};
use crate::torch_api::TorchApi;
use tensorplay::checkpoint::{Checkpoint, StorageData};
use tensorplay::torch::DType;
use tensorplay::torch::TensorId;
use tensorplay::torch::{Dense, StorageId, TensorKind};

/// Where each storage's bytes are, as a Python object.
pub enum StorageObject<'py> {
    /// A torch `UntypedStorage`, and its device when it is not the CPU.
    Torch {
        storage: Bound<'py, PyAny>,
        device: Option<Bound<'py, PyAny>>,
    },
    /// A CPU storage made together with the first tensor that covers it exactly:
    /// one or two torch calls instead of three. Any other user reaches it through
    /// that tensor.
    TorchTensor(Bound<'py, PyAny>),
    /// Memory for numpy views.
    Numpy(Buffer<'py>),
}

impl<'py> StorageObject<'py> {
    /// The torch `UntypedStorage`, and its device when it is not the CPU.
    pub fn torch(&self) -> PyResult<Option<TorchStorage<'py>>> {
        Ok(match self {
            StorageObject::Torch { storage, device } => Some((storage.clone(), device.clone())),
            StorageObject::TorchTensor(tensor) => Some((
                tensor.call_method0(pyo3::intern!(tensor.py(), "untyped_storage"))?,
                None,
            )),
            StorageObject::Numpy(_) => None,
        })
    }
}

pub type TorchStorage<'py> = (Bound<'py, PyAny>, Option<Bound<'py, PyAny>>);

/// The storages of a load, and what is still to be done with them.
pub struct Prepared<'a, 'py> {
    /// By storage index; `None` for a legacy sub-storage until `resolve_views`.
    pub objects: Vec<Option<StorageObject<'py>>>,
    pub jobs: Vec<Job>,
    /// By tensor index: the tensors made together with their storage.
    pub premade: Vec<Option<Bound<'py, PyAny>>>,
    /// The shapes and strides those tensors were made with, for the builder.
    pub tuples: DimsTuples<'a, 'py>,
}

/// What a load does with storage bytes.
#[pyclass(
    eq,
    eq_int,
    hash,
    frozen,
    from_py_object,
    module = "tensorplay._core",
    name = "DataMode"
)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DataMode {
    /// Read them.
    #[pyo3(name = "READ")]
    Read,
    /// Allocate storages but leave them unread (torch's `skip_data`).
    #[pyo3(name = "SKIP")]
    Skip,
    /// Meta storages: no memory, no reads (`map_location='meta'`, fake tensors).
    #[pyo3(name = "META")]
    Meta,
}

/// A copy the loader still has to make: storage, destination address, length.
pub type Job = (StorageId, usize, usize);

fn slice<'py>(
    py: Python<'py>,
    obj: &Bound<'py, PyAny>,
    start: usize,
    len: usize,
) -> PyResult<Bound<'py, PyAny>> {
    obj.get_item(PySlice::new(py, start as isize, (start + len) as isize, 1))
}

fn nbytes(checkpoint: &Checkpoint, id: StorageId) -> PyResult<usize> {
    let s = checkpoint
        .storage(id)
        .ok_or_else(|| PyValueError::new_err("unknown storage"))?;
    usize::try_from(s.decl.nbytes)
        .map_err(|_| PyValueError::new_err("storage too large for this machine"))
}

/// For each storage, the first dense tensor that starts at its first byte and
/// ends at its last: the storage torch would allocate for that tensor alone.
fn exact_tensors(checkpoint: &Checkpoint) -> Vec<Option<(TensorId, &Dense)>> {
    let mut exact = vec![None; checkpoint.storages.len()];
    for (id, tensor) in checkpoint.arena.tensors() {
        let TensorKind::Dense(d) = &tensor.kind else {
            continue;
        };
        let Some(slot) = exact.get_mut(d.storage.index()) else {
            continue;
        };
        let nbytes = checkpoint.storage(d.storage).map(|s| s.decl.nbytes);
        if slot.is_none()
            && d.offset == 0
            && !d.dtype.is_quantized()
            && d.extent_bytes().is_some()
            && d.extent_bytes() == nbytes
        {
            *slot = Some((id, d));
        }
    }
    exact
}

/// A root storage (any but a legacy sub-storage view), as both backends meet it:
/// its size, and where it lies in the mapping when it can be used in place.
struct Root<'m, 'py> {
    id: StorageId,
    nbytes: usize,
    in_place: Option<(&'m Bound<'py, MappedFile>, (usize, usize))>,
}

/// The storages of `checkpoint`, in order: `None` for a legacy view (resolved
/// later, by `resolve_views`), else the root.
fn roots<'c, 'm, 'py>(
    checkpoint: &'c Checkpoint,
    mapped: Option<&'m Bound<'py, MappedFile>>,
    mode: DataMode,
) -> impl Iterator<Item = PyResult<Option<Root<'m, 'py>>>> + 'c
where
    'm: 'c,
{
    (checkpoint.storages.iter().enumerate()).map(move |(i, storage)| {
        let id = StorageId(i as u32);
        if matches!(storage.data, StorageData::View { .. }) {
            return Ok(None);
        }
        let in_place = mapped
            .filter(|_| mode == DataMode::Read)
            .and_then(|m| checkpoint.mapped_range(id).map(|r| (m, r)));
        Ok(Some(Root {
            id,
            nbytes: nbytes(checkpoint, id)?,
            in_place,
        }))
    })
}

/// Root storages (everything but legacy sub-storage views) for torch. With
/// `with_tensors`, a CPU storage that one of its tensors covers exactly is made
/// with that tensor (`empty_strided`, or `frombuffer` over the mapping), and the
/// builder uses that tensor.
pub fn torch_roots<'a, 'py>(
    py: Python<'py>,
    checkpoint: &'a Checkpoint,
    api: &TorchApi<'py>,
    mapped: Option<&Bound<'py, MappedFile>>,
    mode: DataMode,
    fake: bool,
    with_tensors: bool,
) -> PyResult<Prepared<'a, 'py>> {
    let mut objects = Vec::with_capacity(checkpoint.storages.len());
    let mut jobs = Vec::new();
    let with_tensors = with_tensors && mode != DataMode::Meta && !fake;
    let exact = if with_tensors {
        exact_tensors(checkpoint)
    } else {
        Vec::new()
    };
    let mut premade = Vec::new();
    let mut tuples = DimsTuples::default();
    let mut whole: Option<Bound<'py, PyAny>> = None;
    let meta = PyDict::new(py);
    meta.set_item("device", "meta")?;
    for root in roots(checkpoint, mapped, mode) {
        let Some(Root {
            id,
            nbytes: n,
            in_place,
        }) = root?
        else {
            objects.push(None);
            continue;
        };
        let location = checkpoint.storage(id).map(|s| &*s.decl.location);
        let exact_tensor =
            (exact.get(id.index()).copied().flatten()).filter(|_| location == Some("cpu"));
        if let Some((tensor_id, dense)) = exact_tensor {
            let shape = tuples.get(py, &dense.shape)?;
            let stride = tuples.get(py, &dense.stride)?;
            let tensor = match in_place {
                Some((file, range)) if range.1 > 0 => {
                    api.over_buffer(file.as_any(), dense.dtype, range, &shape, &stride)?
                }
                _ => {
                    let tensor = api
                        .empty_strided(dense.dtype, &shape, &stride)
                        .map_err(|e| cannot_allocate(n, e))?;
                    if n > 0 && mode == DataMode::Read {
                        let ptr: usize = tensor
                            .call_method0(pyo3::intern!(py, "data_ptr"))?
                            .extract()?;
                        jobs.push((id, ptr, n));
                    }
                    tensor
                }
            };
            if premade.len() <= tensor_id.index() {
                premade.resize(tensor_id.index() + 1, None);
            }
            if let Some(slot) = premade.get_mut(tensor_id.index()) {
                *slot = Some(tensor.clone());
            }
            objects.push(Some(StorageObject::TorchTensor(tensor)));
            continue;
        }
        let object = match in_place {
            _ if mode == DataMode::Meta => {
                let st = api.untyped_storage.call((n,), Some(&meta))?;
                // Where the bytes are, for tools that edit checkpoints in place.
                st.setattr("_checkpoint_offset", checkpoint.data_offset(id))?;
                if fake {
                    st.setattr("_fake_device", location)?;
                }
                StorageObject::Torch {
                    storage: st,
                    device: Some(api.device.call1(("meta",))?),
                }
            }
            Some((file, (start, len))) if len > 0 => {
                if whole.is_none() {
                    let kwargs = PyDict::new(py);
                    kwargs.set_item("dtype", api.dtype(DType::UInt8)?)?;
                    let tensor = api
                        .torch
                        .getattr("frombuffer")?
                        .call((file,), Some(&kwargs))?;
                    whole = Some(tensor.call_method0("untyped_storage")?);
                }
                let whole = whole
                    .as_ref()
                    .ok_or_else(|| PyValueError::new_err("mapping"))?;
                StorageObject::Torch {
                    storage: slice(py, whole, start, len)?,
                    device: None,
                }
            }
            _ => {
                let st = api
                    .untyped_storage
                    .call1((n,))
                    .map_err(|e| cannot_allocate(n, e))?;
                if n > 0 && mode == DataMode::Read {
                    let ptr: usize = st.call_method0(pyo3::intern!(py, "data_ptr"))?.extract()?;
                    jobs.push((id, ptr, n));
                }
                StorageObject::Torch {
                    storage: st,
                    device: None,
                }
            }
        };
        objects.push(Some(object));
    }
    Ok(Prepared {
        objects,
        jobs,
        premade,
        tuples,
    })
}

fn cannot_allocate(n: usize, e: PyErr) -> PyErr {
    pyo3::exceptions::PyMemoryError::new_err(format!(
        "cannot allocate {n} bytes for a storage: {e}"
    ))
}

/// Shapes and strides as tuples, made once each: a state dict repeats a few.
#[derive(Default)]
pub struct DimsTuples<'a, 'py>(HashMap<&'a [u64], Bound<'py, PyTuple>>);

impl<'a, 'py> DimsTuples<'a, 'py> {
    pub fn get(&mut self, py: Python<'py>, dims: &'a [u64]) -> PyResult<Bound<'py, PyTuple>> {
        if let Some(t) = self.0.get(dims) {
            return Ok(t.clone());
        }
        let t = PyTuple::new(py, dims.iter().copied())?;
        self.0.insert(dims, t.clone());
        Ok(t)
    }
}

/// Root storages for numpy.
pub fn numpy_roots<'a, 'py>(
    checkpoint: &'a Checkpoint,
    api: &NumpyApi<'py>,
    mapped: Option<&Bound<'py, MappedFile>>,
    mode: DataMode,
) -> PyResult<Prepared<'a, 'py>> {
    let mut objects = Vec::with_capacity(checkpoint.storages.len());
    let mut jobs = Vec::new();
    for root in roots(checkpoint, mapped, mode) {
        let Some(Root {
            id,
            nbytes: n,
            in_place,
        }) = root?
        else {
            objects.push(None);
            continue;
        };
        let buf = match in_place {
            Some((file, (start, _))) => {
                let f = file.get();
                let mapping = Buffer {
                    base: file.clone().into_any(),
                    // SAFETY: `mapped_range` lies inside the mapping.
                    ptr: unsafe { f.ptr().add(start) },
                    writable: f.is_writable(),
                };
                api.storage_array(&mapping, n)?
            }
            None => {
                let buf = api.alloc(n)?;
                if n > 0 && mode == DataMode::Read {
                    jobs.push((id, buf.ptr as usize, n));
                }
                buf
            }
        };
        objects.push(Some(StorageObject::Numpy(buf)));
    }
    Ok(Prepared {
        objects,
        jobs,
        premade: Vec::new(),
        tuples: DimsTuples::default(),
    })
}

/// Whose `restore_location` a load applies, and to which storages. Every
/// storage is built on the CPU first, as in `torch.load`.
#[pyclass(
    eq,
    eq_int,
    hash,
    frozen,
    from_py_object,
    module = "tensorplay._core",
    name = "Restore"
)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Restore {
    /// None: storages stay where they are built.
    #[pyo3(name = "STAY")]
    Stay,
    /// torch's default, to the device each storage was saved on, for the
    /// storages not saved on the CPU.
    #[pyo3(name = "SAVED")]
    Saved,
    /// torch's default for every storage, those saved on the CPU too: a
    /// registered package runs ahead of torch's CPU entry.
    #[pyo3(name = "SAVED_AND_CPU")]
    SavedAndCpu,
    /// The caller's `map_location`: every storage, and its errors are the caller's.
    #[pyo3(name = "MAPPED")]
    Mapped,
}

/// torch's `restore_location`, applied where it can change something.
pub fn relocate<'py>(
    checkpoint: &Checkpoint,
    objects: &mut [Option<StorageObject<'py>>],
    restore: &Bound<'py, PyAny>,
    restore_as: Restore,
) -> PyResult<()> {
    if restore_as == Restore::Stay {
        return Ok(());
    }
    for (i, slot) in objects.iter_mut().enumerate() {
        let Some(StorageObject::Torch { storage, device }) = slot else {
            continue;
        };
        let decl = checkpoint.storage(StorageId(i as u32)).map(|s| &s.decl);
        let location = decl.map_or("cpu", |d| &*d.location);
        let key = decl.map_or("?".into(), |d| d.key.to_string());
        if restore_as == Restore::Saved && location == "cpu" {
            continue;
        }
        let moved = restore
            .call1((storage.clone(), location))
            .map_err(|e| match restore_as {
                Restore::Stay | Restore::Mapped => e,
                Restore::Saved | Restore::SavedAndCpu => wrap_placement_error(
                    restore.py(),
                    e,
                    &format!("storage '{key}' was saved on {location:?}, which cannot be restored here (pass map_location)"),
                ),
            })?;
        let on = moved.getattr("device")?;
        *device = if on.getattr("type")?.extract::<String>()? == "cpu" {
            None
        } else {
            Some(on)
        };
        *storage = moved;
    }
    Ok(())
}

/// Legacy sub-storages become slices of their (already placed) roots.
pub fn resolve_views<'py>(
    py: Python<'py>,
    checkpoint: &Checkpoint,
    objects: &mut [Option<StorageObject<'py>>],
) -> PyResult<()> {
    for (i, storage) in checkpoint.storages.iter().enumerate() {
        let StorageData::View { root, offset } = storage.data else {
            continue;
        };
        let n = nbytes(checkpoint, StorageId(i as u32))?;
        let offset = offset as usize;
        let view = match objects.get(root.index()).and_then(Option::as_ref) {
            Some(StorageObject::Numpy(b)) => StorageObject::Numpy(Buffer {
                base: b.base.clone(),
                // SAFETY: the view was checked to lie inside its root storage.
                ptr: unsafe { b.ptr.add(offset) },
                writable: b.writable,
            }),
            Some(torch) => {
                let (storage, device) = torch
                    .torch()?
                    .ok_or_else(|| PyValueError::new_err("mixed backends"))?;
                StorageObject::Torch {
                    storage: slice(py, &storage, offset, n)?,
                    device,
                }
            }
            None => return Err(PyValueError::new_err("a view storage without its root")),
        };
        if let Some(slot) = objects.get_mut(i) {
            *slot = Some(view);
        }
    }
    Ok(())
}
