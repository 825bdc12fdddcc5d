//! The crate's public API: open a checkpoint from a path or bytes without running
//! anything from it, walk its values, read each tensor's dtype, shape, stride and
//! bytes; scan a file for what a load would import.
//!
//! ```no_run
//! let checkpoint = tensorplay::open("model.pt")?;
//! for (name, tensor) in checkpoint.tensors() {
//!     let bytes = tensor.bytes()?;
//!     println!("{name}: {} {:?}, {} bytes", tensor.dtype(), tensor.shape(), bytes.len());
//! }
//! # Ok::<(), tensorplay::Error>(())
//! ```

use std::borrow::Cow;
use std::path::Path;
use std::sync::Arc;

use crate::archive::source::{MapMode, Source};
use crate::checkpoint::{self, LoadOptions, StorageData};
use crate::error::{Error, Location};
use crate::limits::Limits;
use crate::scan::{self, ScanOptions};
use crate::torch::policy::{allowed_in_file, UnknownGlobals, UserGlobals};
use crate::torch::{Arena, Torch};
use crate::torch::{Dense, TensorKind};
use crate::value::{Node, NodeId};

/// How a checkpoint is read.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// The resource limits every opcode and allocation is charged against.
    pub limits: Limits,
    /// Globals to allow on top of torch's weights-only allowlist, as
    /// `module.name` (`collections.OrderedDict` is allowed already).
    pub allow: Vec<String>,
    /// Read a global outside the allowlist as a stub (a placeholder holding what
    /// the pickle gave it) instead of refusing the file; nothing is imported or
    /// called either way.
    pub stubs: bool,
}

impl Options {
    fn load_options(&self) -> LoadOptions {
        LoadOptions {
            limits: self.limits,
            user_globals: UserGlobals::new(self.allow.iter().cloned()),
            unknown_globals: if self.stubs {
                UnknownGlobals::Stub
            } else {
                UnknownGlobals::Refuse
            },
            ..LoadOptions::default()
        }
    }
}

/// Open the checkpoint at `path` (`torch.save`'s zip or legacy format) with the
/// default [`Options`]: the file is mapped, its pickle is run by the safe VM and
/// every storage is checked against the file before this returns.
pub fn open(path: impl AsRef<Path>) -> Result<Checkpoint, Error> {
    open_with(path, &Options::default())
}

/// [`open`] with options.
pub fn open_with(path: impl AsRef<Path>, options: &Options) -> Result<Checkpoint, Error> {
    // A pipe or FIFO is read to its end, at most as much as may be inflated.
    let most = options.limits.max_inflated_bytes;
    let source = Source::open(path.as_ref(), MapMode::ReadOnly, most)?;
    Checkpoint::over(source, options)
}

/// Open a checkpoint held in memory.
pub fn open_bytes(bytes: Vec<u8>, options: &Options) -> Result<Checkpoint, Error> {
    Checkpoint::over(Source::from_vec(bytes), options)
}

/// An opened checkpoint: its values, and the bytes of its tensors.
pub struct Checkpoint {
    inner: checkpoint::Checkpoint,
}

impl Checkpoint {
    fn over(source: Source, options: &Options) -> Result<Checkpoint, Error> {
        let inner = checkpoint::open(Arc::new(source), &options.load_options())?;
        Ok(Checkpoint { inner })
    }

    /// `"zip"` (what `torch.save` writes since torch 1.6) or `"legacy"`.
    pub fn format(&self) -> &'static str {
        match self.inner.format {
            checkpoint::Format::Zip => "zip",
            checkpoint::Format::Legacy => "legacy",
        }
    }

    /// The object the pickle returns (for most files a state dict).
    pub fn root(&self) -> Value<'_> {
        Value {
            checkpoint: self,
            id: self.inner.root,
        }
    }

    /// Every tensor reachable through dicts, lists and tuples from the root,
    /// depth first, named by its path as a state dict names it: keys and indices
    /// joined by `.` (`encoder.layers.0.weight`; `0.1` for a list of tuples).
    pub fn tensors(&self) -> Vec<(String, Tensor<'_>)> {
        let mut found = Vec::new();
        let mut pending = vec![(String::new(), self.root())];
        while let Some((name, value)) = pending.pop() {
            let children: Vec<(String, Value<'_>)> = match value.kind() {
                Kind::Tensor(tensor) => {
                    found.push((name, tensor));
                    continue;
                }
                Kind::Dict(items) => (items.into_iter())
                    .filter_map(|(key, value)| Some((key.key_text()?, value)))
                    .collect(),
                Kind::List(items) | Kind::Tuple(items) => (items.into_iter().enumerate())
                    .map(|(i, value)| (i.to_string(), value))
                    .collect(),
                _ => continue,
            };
            let joined = |key: String| {
                if name.is_empty() {
                    key
                } else {
                    format!("{name}.{key}")
                }
            };
            // Reversed onto the stack, so they come off in the file's order.
            pending.extend(children.into_iter().rev().map(|(k, v)| (joined(k), v)));
        }
        found
    }

    fn arena(&self) -> &Arena {
        &self.inner.arena
    }
}

/// One value of a checkpoint; [`Value::kind`] says what it is.
#[derive(Clone, Copy)]
pub struct Value<'c> {
    checkpoint: &'c Checkpoint,
    id: NodeId,
}

/// What a [`Value`] is.
pub enum Kind<'c> {
    /// `None`.
    None,
    /// A bool.
    Bool(bool),
    /// An int that fits in 64 bits.
    Int(i64),
    /// A float.
    Float(f64),
    /// Text (lone surrogates, which pickle allows, are replaced).
    Str(Cow<'c, str>),
    /// `bytes` or `bytearray`.
    Bytes(&'c [u8]),
    /// A tuple's items.
    Tuple(Vec<Value<'c>>),
    /// A list's items.
    List(Vec<Value<'c>>),
    /// A dict's (or `OrderedDict`'s) items, in order.
    Dict(Vec<(Value<'c>, Value<'c>)>),
    /// A dense tensor or an `nn.Parameter` (the Parameter's tensor).
    Tensor(Tensor<'c>),
    /// Anything else (an object, a stub, a quantized or sparse tensor, a storage,
    /// a big int...): the name of its kind.
    Other(&'static str),
}

impl<'c> Value<'c> {
    /// What this value is.
    pub fn kind(&self) -> Kind<'c> {
        let checkpoint = self.checkpoint;
        let arena = checkpoint.arena();
        let value = |id: NodeId| Value { checkpoint, id };
        let values = |ids: &[NodeId]| ids.iter().map(|&id| value(id)).collect();
        match arena.get(self.id) {
            Node::None => Kind::None,
            Node::Bool(b) => Kind::Bool(*b),
            Node::Int(i) => Kind::Int(*i),
            Node::Float(f) => Kind::Float(*f),
            Node::Str(_) => Kind::Str(String::from_utf8_lossy(
                arena.str(self.id).unwrap_or_default(),
            )),
            Node::Bytes(_) | Node::ByteArray(_) => {
                Kind::Bytes(arena.bytes(self.id).unwrap_or_default())
            }
            Node::Tuple(items) => Kind::Tuple(values(arena.items(*items))),
            Node::List(items) => Kind::List(values(items)),
            Node::Dict(_, dict) => Kind::Dict(
                (arena.dict(*dict).items.iter())
                    .map(|&(k, v)| (value(k), value(v)))
                    .collect(),
            ),
            Node::Domain(Torch::Tensor(id)) => {
                let node = arena.tensor(*id);
                match Tensor::of(checkpoint, &node.kind, node.requires_grad) {
                    Some(tensor) => Kind::Tensor(tensor),
                    None => Kind::Other(node.kind_name()),
                }
            }
            other => Kind::Other(other.kind_name()),
        }
    }

    /// A dict key as a state dict's name part: text, or an int's digits.
    fn key_text(&self) -> Option<String> {
        match self.kind() {
            Kind::Str(text) => Some(text.into_owned()),
            Kind::Int(i) => Some(i.to_string()),
            _ => None,
        }
    }
}

/// A dense tensor of a checkpoint: what describes it, and its bytes.
#[derive(Clone, Copy)]
pub struct Tensor<'c> {
    checkpoint: &'c Checkpoint,
    dense: &'c Dense,
    requires_grad: bool,
    parameter: bool,
}

impl<'c> Tensor<'c> {
    fn of(checkpoint: &'c Checkpoint, kind: &'c TensorKind, requires_grad: bool) -> Option<Self> {
        match kind {
            TensorKind::Dense(dense) => Some(Tensor {
                checkpoint,
                dense,
                requires_grad,
                parameter: false,
            }),
            TensorKind::Parameter { data, .. } => {
                let arena = checkpoint.arena();
                let Some(Torch::Tensor(id)) = arena.torch(*data) else {
                    return None;
                };
                let TensorKind::Dense(dense) = &arena.tensor(*id).kind else {
                    return None;
                };
                Some(Tensor {
                    checkpoint,
                    dense,
                    requires_grad,
                    parameter: true,
                })
            }
            _ => None,
        }
    }

    /// torch's name of the element type, without `torch.` (`float32`, `bfloat16`).
    pub fn dtype(&self) -> &'static str {
        self.dense.dtype.name()
    }

    /// Bytes per element.
    pub fn itemsize(&self) -> u64 {
        self.dense.dtype.itemsize()
    }

    /// The size of each dimension.
    pub fn shape(&self) -> &'c [u64] {
        &self.dense.shape
    }

    /// The step, in elements, between neighbours along each dimension.
    pub fn stride(&self) -> &'c [u64] {
        &self.dense.stride
    }

    /// Where the tensor starts in its storage, in elements.
    pub fn storage_offset(&self) -> u64 {
        self.dense.offset
    }

    /// Whether the checkpoint saved it with `requires_grad`.
    pub fn requires_grad(&self) -> bool {
        self.requires_grad
    }

    /// Whether it was saved as an `nn.Parameter`.
    pub fn is_parameter(&self) -> bool {
        self.parameter
    }

    /// The tensor's elements in row-major order, in the byte order of this
    /// machine: borrowed from the mapped file when the tensor is contiguous and
    /// stored as is, copied otherwise (compressed, byte-swapped or strided).
    pub fn bytes(&self) -> Result<Cow<'c, [u8]>, Error> {
        let storage = self.storage_bytes()?;
        let itemsize = self.itemsize();
        let fail = || {
            Error::tensor(
                "tensor lies outside its storage",
                Location::entry(&self.checkpoint.inner.pickle_entry),
            )
        };
        let numel = self.dense.numel().ok_or_else(fail)?;
        let nbytes = numel.checked_mul(itemsize).ok_or_else(fail)?;
        let start = self.dense.offset.checked_mul(itemsize).ok_or_else(fail)?;
        if self.is_contiguous() {
            let range = to_usize(start)?..to_usize(start.checked_add(nbytes).ok_or_else(fail)?)?;
            return Ok(match storage {
                Cow::Borrowed(all) => Cow::Borrowed(all.get(range).ok_or_else(fail)?),
                // The copy made for this tensor, cut to it in place.
                Cow::Owned(mut all) => {
                    if range.end > all.len() || range.start > range.end {
                        return Err(fail());
                    }
                    all.truncate(range.end);
                    all.drain(..range.start);
                    Cow::Owned(all)
                }
            });
        }
        let mut out = Vec::with_capacity(to_usize(nbytes)?);
        let item = to_usize(itemsize)?;
        for_each_element(self.shape(), self.stride(), |element| {
            let at = (element.checked_add(self.dense.offset))
                .and_then(|e| e.checked_mul(itemsize))
                .and_then(|e| usize::try_from(e).ok())
                .ok_or_else(fail)?;
            let bytes = storage.get(at..at.checked_add(item).ok_or_else(fail)?);
            out.extend_from_slice(bytes.ok_or_else(fail)?);
            Ok(())
        })?;
        Ok(Cow::Owned(out))
    }

    fn is_contiguous(&self) -> bool {
        let mut expected = 1u64;
        for (&size, &stride) in self.shape().iter().zip(self.stride()).rev() {
            if size != 1 && stride != expected {
                return false;
            }
            expected = expected.saturating_mul(size);
        }
        true
    }

    /// The whole storage the tensor views.
    fn storage_bytes(&self) -> Result<Cow<'c, [u8]>, Error> {
        let inner = &self.checkpoint.inner;
        let fail = |what: &str| Error::tensor(what, Location::entry(&inner.pickle_entry));
        let mut id = self.dense.storage;
        let mut skip = 0u64;
        if let Some(StorageData::View { root, offset }) = inner.storage(id).map(|s| &s.data) {
            (id, skip) = (*root, *offset);
        }
        let storage = inner.storage(id).ok_or_else(|| fail("unknown storage"))?;
        let whole: Cow<'c, [u8]> = match inner.mapped_range(id) {
            Some((start, len)) => Cow::Borrowed(
                (inner.source.bytes())
                    .get(
                        start
                            ..start
                                .checked_add(len)
                                .ok_or_else(|| fail("storage overflows"))?,
                    )
                    .ok_or_else(|| fail("storage data lies outside the file"))?,
            ),
            None => {
                let mut bytes = vec![0; to_usize(storage.decl.nbytes)?];
                inner.read_storage(id, &mut bytes)?;
                Cow::Owned(bytes)
            }
        };
        let skip = to_usize(skip)?;
        Ok(match whole {
            Cow::Borrowed(all) => Cow::Borrowed(all.get(skip..).unwrap_or_default()),
            Cow::Owned(mut all) => {
                all.drain(..skip.min(all.len()));
                Cow::Owned(all)
            }
        })
    }
}

fn to_usize(n: u64) -> Result<usize, Error> {
    usize::try_from(n).map_err(|_| {
        Error::tensor(
            "tensor is larger than this machine's memory",
            Location::default(),
        )
    })
}

/// Calls `visit` with each element's offset (in elements, from the tensor's
/// start) in row-major order.
fn for_each_element(
    shape: &[u64],
    stride: &[u64],
    mut visit: impl FnMut(u64) -> Result<(), Error>,
) -> Result<(), Error> {
    if shape.contains(&0) {
        return Ok(());
    }
    let mut index = vec![0u64; shape.len()];
    loop {
        let offset = (index.iter().zip(stride))
            .try_fold(0u64, |acc, (&i, &s)| acc.checked_add(i.checked_mul(s)?));
        visit(
            offset.ok_or_else(|| Error::tensor("tensor offsets overflow", Location::default()))?,
        )?;
        // The next index: the last dimension moves fastest.
        let mut dim = shape.len();
        loop {
            let Some(d) = dim.checked_sub(1) else {
                return Ok(());
            };
            dim = d;
            let (Some(i), Some(&size)) = (index.get_mut(d), shape.get(d)) else {
                return Ok(());
            };
            *i += 1;
            if *i < size {
                break;
            }
            *i = 0;
        }
    }
}

/// What a scan of one file found: its verdict, the globals a load would
/// import, and what could not be read.
#[derive(Debug, Clone)]
pub struct ScanReport {
    /// `"clean"`, `"unsafe"`, `"unreadable"` or `"skipped"` (no model and no
    /// pickle: text, an image). A file read only in part is never clean.
    pub verdict: &'static str,
    /// Each global outside the allowlist: `module.name`, where it was found
    /// (entry and byte offset), and whether it is known to run code.
    pub findings: Vec<ScanFinding>,
    /// Why (part of) the file could not be read, one line each.
    pub problems: Vec<String>,
}

/// A global outside the allowlist that a pickle of the file imports.
#[derive(Debug, Clone)]
pub struct ScanFinding {
    /// `module.name`.
    pub global: String,
    /// The file, archive entry or pickle it is in.
    pub location: String,
    /// Its byte offset inside that location.
    pub offset: u64,
    /// On the denylist: it runs code or reaches the system (`os.system`,
    /// `builtins.eval`...).
    pub dangerous: bool,
}

/// Scan the file at `path` as `tensorplay scan` scans one file: every pickle in
/// it, inside archives and compressed streams, read to its end without
/// building anything; nothing is imported or run.
pub fn scan_file(path: impl AsRef<Path>) -> Result<ScanReport, Error> {
    let path = path.as_ref();
    let limits = Limits::default();
    let source = Source::open(path, MapMode::ReadOnly, limits.max_inflated_bytes)?;
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned());
    let by_name = name.as_deref().map_or(&[][..], allowed_in_file);
    let options = ScanOptions {
        limits,
        user_globals: UserGlobals::new(by_name.iter().map(|n| (*n).to_owned())),
        ..ScanOptions::default()
    };
    let report = scan::scan_file(source.bytes(), None, &options, name.as_deref());
    Ok(ScanReport {
        verdict: report.verdict().name(),
        findings: (report.findings.iter())
            .map(|f| ScanFinding {
                global: f.name.clone(),
                location: f.location.clone(),
                offset: f.offset,
                dangerous: f.dangerous,
            })
            .collect(),
        problems: report.problems.iter().map(|p| p.to_string()).collect(),
    })
}
