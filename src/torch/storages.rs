//! Persistent ids: `('storage', storage_type, key, location, numel)` in zip
//! checkpoints, plus a sixth `view_metadata` item in the legacy format. Storages are
//! cached by key: the first id with a key decides its dtype and size, as in torch.

use std::borrow::Cow;
use std::collections::HashSet;
use std::sync::Arc;

use crate::error::{check_limit, Error, Location};
use crate::limits::Limit;
use crate::torch::dtype::DType;
use crate::torch::policy::{Builtin, Global};
use crate::torch::storage_keys::{StorageKey, StorageKeys};
use crate::torch::tensor::{StorageDecl, StorageId};
use crate::torch::value::{Arena, Node, Torch};
use crate::value::NodeId;

/// Which persistent-id shape the pickle uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IdFormat {
    /// Zip checkpoints: 5-tuples.
    Zip,
    /// The legacy (pre-1.6) stream: 6-tuples ending in `view_metadata`.
    Legacy,
}

#[derive(Debug, Default)]
pub struct Storages {
    decls: Vec<StorageDecl>,
    by_key: StorageKeys,
    /// The location of the last storage declared: nearly all share one.
    last_location: Option<Arc<str>>,
    /// Legacy sub-storages: `(view storage, root storage, byte offset)`.
    views: Vec<(StorageId, StorageId, u64)>,
    view_ids: HashSet<StorageId>,
}

impl Storages {
    pub fn decls(&self) -> &[StorageDecl] {
        &self.decls
    }

    pub fn get(&self, id: StorageId) -> Option<&StorageDecl> {
        self.decls.get(id.index())
    }

    /// A copy of the declaration of storage `id` (known by `key`).
    fn declared(
        &self,
        id: StorageId,
        key: &StorageKey,
        at: &Location,
    ) -> Result<StorageDecl, Error> {
        (self.get(id).cloned())
            .ok_or_else(|| Error::tensor(format!("unknown storage '{key}'"), at.clone()))
    }

    pub fn get_mut(&mut self, id: StorageId) -> Option<&mut StorageDecl> {
        self.decls.get_mut(id.index())
    }

    pub fn views(&self) -> &[(StorageId, StorageId, u64)] {
        &self.views
    }

    pub fn is_view(&self, id: StorageId) -> bool {
        self.view_ids.contains(&id)
    }

    /// Room for `n` more storages.
    pub fn reserve(&mut self, n: usize) {
        self.decls.reserve(n);
        self.by_key.reserve(n);
    }

    /// Let the next pickle's keys name storages of their own: a TorchScript
    /// archive's `constants.pkl` numbers its storages from 0 again, in its own
    /// folder. Storage ids go on from where the last pickle left them.
    pub fn forget_keys(&mut self) {
        self.by_key = StorageKeys::default();
    }

    pub fn into_parts(self) -> (Vec<StorageDecl>, Vec<(StorageId, StorageId, u64)>) {
        (self.decls, self.views)
    }

    fn declare(
        &mut self,
        decl: StorageDecl,
        max_storages: u64,
        at: &Location,
    ) -> Result<StorageId, Error> {
        let key = decl.key.clone();
        let id = self.push_unnamed(decl, max_storages, at)?;
        self.by_key.insert(&key, id, self.decls.len());
        Ok(id)
    }

    /// A storage no later id can name: it keeps its key for messages only.
    fn push_unnamed(
        &mut self,
        decl: StorageDecl,
        max_storages: u64,
        at: &Location,
    ) -> Result<StorageId, Error> {
        check_limit(
            Limit::Storages,
            self.decls.len() as u64 + 1,
            max_storages,
            || at.clone(),
        )?;
        let id = StorageId(self.decls.len() as u32);
        self.decls.push(decl);
        Ok(id)
    }

    /// The location as a shared string, checked to be a device string when it
    /// differs from the last one.
    fn location(&mut self, arena: &Arena, node: &Node) -> Option<Arc<str>> {
        if let (Some(last), Node::Str(s)) = (&self.last_location, node) {
            if arena.payload(*s) == last.as_bytes() {
                return Some(last.clone());
            }
        }
        let location = match node {
            Node::Int(_) => None,
            other => text(arena, other),
        }?;
        match &self.last_location {
            Some(last) if **last == *location => Some(last.clone()),
            _ if !valid_device(&location) => None,
            _ => {
                let interned: Arc<str> = Arc::from(&*location);
                self.last_location = Some(interned.clone());
                Some(interned)
            }
        }
    }

    /// Interpret a persistent id; returns the storage it names.
    pub fn load(
        &mut self,
        arena: &Arena,
        pid: NodeId,
        format: IdFormat,
        max_storages: u64,
        at: &Location,
    ) -> Result<StorageId, Error> {
        let forbidden = |msg: String| Error::forbidden(msg, at.clone());
        let items = match arena.get(pid) {
            Node::Tuple(items) => arena.items(*items),
            Node::Int(_) => {
                return Err(forbidden(
                    "persistent_load id must be a ('storage', ...) tuple, got an int".into(),
                ))
            }
            other => {
                return Err(forbidden(format!(
                    "persistent_load id must be tuple or int, but got <class '{}'>",
                    other.kind_name()
                )));
            }
        };
        let tag = items.first().map(|id| arena.get(*id));
        let is_storage = match tag {
            Some(Node::Str(s)) | Some(Node::Bytes(s)) => arena.payload(*s) == b"storage",
            _ => false,
        };
        if !is_storage {
            let kind = tag.map_or("NoneType", Node::kind_name);
            return Err(forbidden(format!(
                "Only persistent_load of storage is allowed, but got <class '{kind}'>"
            )));
        }
        let expected = match format {
            IdFormat::Zip => 5,
            IdFormat::Legacy => 6,
        };
        if items.len() != expected {
            return Err(Error::tensor(
                format!(
                    "a storage persistent id has {expected} items, this one has {}",
                    items.len()
                ),
                at.clone(),
            ));
        }
        let item = |i: usize| items.get(i).map_or(&Node::Opaque, |id| arena.get(*id));
        let (dtype, typed) = match item(1) {
            Node::Domain(Torch::Global(Global::Builtin(Builtin::StorageType {
                dtype, ..
            }))) => (*dtype, true),
            Node::Domain(Torch::Global(Global::Builtin(Builtin::UntypedStorageClass))) => {
                (DType::UInt8, false)
            }
            other => {
                return Err(Error::tensor(
                    format!(
                        "the storage type of a persistent id must be a storage class, got {}",
                        other.kind_name()
                    ),
                    at.clone(),
                ))
            }
        };
        let key = storage_key(arena, item(2))
            .ok_or_else(|| Error::tensor("the storage key must be a str or an int", at.clone()))?;
        // As in torch, a key seen before names its storage, whatever else the id
        // says; only a legacy id's view metadata still makes a view of it. But
        // torch caches no empty storage (its data pointer is null): a zip
        // checkpoint's later id of one loads the record afresh, with its own
        // dtype and size.
        let mut afresh = false;
        if let Some(id) = self.by_key.get(&key) {
            let empty = self.get(id).is_some_and(|d| d.nbytes == 0);
            afresh = format == IdFormat::Zip && empty;
        }
        if let Some(id) = self.by_key.get(&key).filter(|_| !afresh) {
            return match (format, item(5)) {
                (IdFormat::Legacy, Node::Tuple(view)) => {
                    let root = self.declared(id, &key, at)?;
                    let decl = StorageDecl {
                        dtype,
                        typed,
                        ..root
                    };
                    self.legacy_view(arena, arena.items(*view), decl, max_storages, at)
                }
                // torch's legacy loader hands a later id of a storage that is still
                // empty (its data pointer is null) a fresh empty storage, which no
                // record fills: a tensor that grows it would hold uninitialised memory.
                (IdFormat::Legacy, _) if self.get(id).is_some_and(|d| d.nbytes == 0) => {
                    let root = self.declared(id, &key, at)?;
                    let decl = StorageDecl {
                        dtype,
                        typed,
                        view_itemsize: None,
                        view_alignment: 0,
                        ..root
                    };
                    self.push_unnamed(decl, max_storages, at)
                }
                _ => Ok(id),
            };
        }
        let location = self.location(arena, item(3)).ok_or_else(|| {
            Error::tensor("the storage location must be a device string", at.clone())
        })?;
        let numel = match item(4) {
            Node::Int(n) if *n >= 0 => *n as u64,
            Node::Bool(b) => u64::from(*b),
            _ => {
                return Err(Error::tensor(
                    "the storage size must be a non-negative int",
                    at.clone(),
                ))
            }
        };
        let nbytes = numel.checked_mul(dtype.itemsize()).ok_or_else(|| {
            Error::tensor(
                format!("storage '{key}' of {numel} elements overflows"),
                at.clone(),
            )
        })?;
        let decl = StorageDecl {
            key,
            dtype,
            nbytes,
            location,
            typed,
            view_itemsize: None,
            view_alignment: 0,
        };
        if afresh {
            return self.push_unnamed(decl, max_storages, at);
        }
        if format == IdFormat::Zip {
            return self.declare(decl, max_storages, at);
        }
        match item(5) {
            Node::None => self.declare(decl, max_storages, at),
            Node::Tuple(view) => {
                self.legacy_view(arena, arena.items(*view), decl, max_storages, at)
            }
            other => Err(Error::tensor(
                format!(
                    "legacy view metadata must be None or a tuple, got {}",
                    other.kind_name()
                ),
                at.clone(),
            )),
        }
    }

    /// A legacy id with `(view_key, offset, view_size)`: `view_key` names a slice of
    /// the root storage `decl`, in elements.
    fn legacy_view(
        &mut self,
        arena: &Arena,
        view: &[NodeId],
        root: StorageDecl,
        max_storages: u64,
        at: &Location,
    ) -> Result<StorageId, Error> {
        let bad = || {
            Error::tensor(
                "legacy view metadata must be (key, offset, size)",
                at.clone(),
            )
        };
        let [key, offset, size] = view else {
            return Err(bad());
        };
        let view_key = storage_key(arena, arena.get(*key)).ok_or_else(bad)?;
        let (Some(offset), Some(size)) = (arena.int(*offset), arena.int(*size)) else {
            return Err(bad());
        };
        let itemsize = root.dtype.itemsize();
        let root_id = match self.by_key.get(&root.key) {
            Some(id) => id,
            None => self.declare(root.clone(), max_storages, at)?,
        };
        if let Some(id) = self.by_key.get(&view_key) {
            return Ok(id);
        }
        let root_nbytes = self.get(root_id).map_or(0, |d| d.nbytes);
        let bytes = |elements: i128| elements.saturating_mul(i128::from(itemsize));
        let (byte_offset, nbytes) = python_slice(
            bytes(i128::from(offset)),
            bytes(i128::from(offset).saturating_add(i128::from(size))),
            root_nbytes,
        );
        let decl = StorageDecl {
            key: view_key,
            nbytes,
            ..root
        };
        let id = self.declare(decl, max_storages, at)?;
        self.views.push((id, root_id, byte_offset));
        self.view_ids.insert(id);
        Ok(id)
    }
}

/// `storage[start:stop]` of a storage of `len` bytes, as Python slices it: negative
/// bounds count from the end, and both are clamped to the storage, so a view
/// reaching past its root is cut short (or empty). Returns (offset, length).
fn python_slice(start: i128, stop: i128, len: u64) -> (u64, u64) {
    let len = i128::from(len);
    let clamp = |i: i128| {
        if i < 0 {
            i.saturating_add(len).max(0)
        } else {
            i.min(len)
        }
    };
    let (start, stop) = (clamp(start), clamp(stop));
    // Both lie in 0..=len, which came from a u64.
    let as_u64 = |i: i128| u64::try_from(i).unwrap_or(0);
    (as_u64(start), as_u64(stop.saturating_sub(start).max(0)))
}

/// A storage key: as [`text`], a torch-written number without reading it as text.
fn storage_key(arena: &Arena, node: &Node) -> Option<StorageKey> {
    if let Node::Str(s) | Node::Bytes(s) = node {
        if let Some(key) = StorageKey::number_in(arena.payload(*s)) {
            return Some(key);
        }
    }
    text(arena, node).map(|t| StorageKey::new(&t))
}

/// A key or location: str, ascii bytes (encoding='bytes'), or an int key (torch formats it with str).
fn text<'a>(arena: &'a Arena, node: &Node) -> Option<Cow<'a, str>> {
    match node {
        Node::Str(s) => std::str::from_utf8(arena.payload(*s))
            .ok()
            .map(Cow::Borrowed),
        Node::Bytes(b) if arena.payload(*b).is_ascii() => std::str::from_utf8(arena.payload(*b))
            .ok()
            .map(Cow::Borrowed),
        Node::Int(i) => Some(Cow::Owned(i.to_string())),
        _ => None,
    }
}

/// The device types torch.device parses (c10's `parse_type`), the private
/// backend under its own name.
const DEVICE_TYPES: &[&str] = &[
    "cpu",
    "cuda",
    "ipu",
    "xpu",
    "mkldnn",
    "opengl",
    "opencl",
    "ideep",
    "hip",
    "ve",
    "fpga",
    "maia",
    "xla",
    "lazy",
    "vulkan",
    "mps",
    "meta",
    "hpu",
    "mtia",
    "privateuseone",
];

/// `type[:index]` as torch.device parses it: one of its device types, an index
/// without leading zeros.
pub(crate) fn valid_device(device: &str) -> bool {
    let (kind, index) = match device.split_once(':') {
        Some((k, i)) => (k, Some(i)),
        None => (device, None),
    };
    let kind_ok = DEVICE_TYPES.contains(&kind);
    let index_ok = index.is_none_or(|i| {
        !i.is_empty()
            && i.len() <= 9
            && i.bytes().all(|b| b.is_ascii_digit())
            && (i == "0" || !i.starts_with('0'))
    });
    kind_ok && index_ok
}
