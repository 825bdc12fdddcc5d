//! torch's weights-only rules as VM hooks: which globals resolve, what calling an
//! allowlisted callable builds, what BUILD may touch, and what a persistent id is.
//! With [`Refusals::Record`] the same rules run, but a refusal is recorded instead
//! of raised, so a scan reports exactly the globals a load would refuse.

use std::collections::HashMap;

use crate::error::{Error, Location, Refusal};
use crate::limits::{Limit, Limits};
use crate::pickle::decoder::Divergence;
use crate::pickle::machine::Hooks;
use crate::torch::args::Args;
use crate::torch::dtype::DType;
use crate::torch::module_ids;
use crate::torch::numpy;
use crate::torch::policy::{
    self, Builtin, FoundGlobal, Global, JitBuilder, Resolution, Stubs, UnknownGlobals, UserGlobals,
    COMPUTED_GLOBAL,
};
use crate::torch::rebuild;
use crate::torch::storages::{valid_device, IdFormat, Storages};
use crate::torch::tensor::{Layout, TensorKind, TensorNode};
use crate::torch::value::{Arena, Node, Torch};
use crate::value::{
    Constructor, DictClass, DictId, DictNode, Mutation, NodeId, ObjectNode, SetNode,
};

/// What the hooks do when the rules refuse something.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusals {
    /// Fail at the first refusal: a load.
    Raise,
    /// Build what can be built; record every refused global and go on: a scan.
    Record,
}

pub struct TorchHooks<'u> {
    pub refusals: Refusals,
    pub user: &'u UserGlobals,
    pub limits: Limits,
    pub storages: Storages,
    pub id_format: IdFormat,
    /// Why a persistent id is refused, where there is no storage it could name:
    /// the pickles of a legacy file other than its object's (torch loads them with
    /// no persistent_load), and pickles outside any checkpoint.
    no_storages: Option<&'static str>,
    pub found: Vec<FoundGlobal>,
    /// The globals inside the allowlist, when a scan lists them.
    pub allowed: Option<Vec<FoundGlobal>>,
    /// With refusals recorded: the bytes handed to a refused callable, by node
    /// (once each), with where the call was. `pickle.loads(b'...')`,
    /// `torch.load(io.BytesIO(b'...'))` and their kin unpickle them: a scan reads
    /// them as files of their own.
    pub payloads: Vec<(NodeId, u64)>,
    /// With refusals recorded: where CPython's readers would read the pickle apart.
    pub divergences: Vec<Divergence>,
    /// `_codecs.encode` results by (text node, codec): bytes are immutable, so a file
    /// that encodes one big string many times shares one result instead of copying it.
    encoded: HashMap<(NodeId, String), NodeId>,
    /// `torch.Size` nodes by their entries: a Size is immutable, and a
    /// distributed checkpoint's `.metadata` makes one per chunk offset and shape,
    /// mostly the same few (200,000 for 50,000 tensors).
    sizes: HashMap<Vec<i64>, NodeId>,
    /// In stub mode, the globals outside the allowlist that stand in as stubs.
    pub stubs: Option<Stubs>,
    /// The pickle is a TorchScript archive's own (`data.pkl`, `constants.pkl`):
    /// `torch.jit._pickle`'s builders are data in it.
    torchscript: bool,
}

impl<'u> TorchHooks<'u> {
    pub fn new(
        refusals: Refusals,
        user: &'u UserGlobals,
        limits: Limits,
        id_format: IdFormat,
    ) -> Self {
        TorchHooks {
            refusals,
            user,
            limits,
            storages: Storages::default(),
            id_format,
            no_storages: None,
            found: Vec::new(),
            allowed: None,
            payloads: Vec::new(),
            divergences: Vec::new(),
            encoded: HashMap::new(),
            sizes: HashMap::new(),
            stubs: None,
            torchscript: false,
        }
    }

    /// Hooks for a TorchScript archive's own pickle, where `torch.jit._pickle`'s
    /// builders are data ([`policy::torchscript_builder`]).
    pub fn in_torchscript(mut self) -> Self {
        self.torchscript = true;
        self
    }

    /// Hooks that make a global outside the allowlist a stub, not a refusal.
    pub fn stubbing(mut self, unknown: UnknownGlobals) -> Self {
        if unknown == UnknownGlobals::Stub {
            self.stubs = Some(Stubs::default());
        }
        self
    }

    /// Hooks for a pickle in which a persistent id is an error, `why`.
    pub fn without_persistent_ids(mut self, why: &'static str) -> Self {
        self.no_storages = Some(why);
        self
    }

    /// When refusals are recorded, a refused or failed construction becomes an opaque value; resource
    /// limits still stop the scan.
    fn lenient(&self, arena: &mut Arena, result: Result<NodeId, Error>) -> Result<NodeId, Error> {
        match result {
            Err(e) if self.refusals == Refusals::Record && !e.is_limit() => {
                arena.push(Node::Opaque)
            }
            other => other,
        }
    }

    /// Keep the bytes among a refused call's arguments or a refused object's
    /// state (the tuples, lists and dict values in them), each node once.
    fn keep_payloads(&mut self, arena: &Arena, args: NodeId, at: &Location) {
        let mut pending = vec![args];
        let mut seen = 0usize;
        while let Some(id) = pending.pop() {
            // A bounded look: arguments are small, a hostile one need not be.
            seen += 1;
            if seen > 64 {
                break;
            }
            match arena.get(id) {
                Node::Bytes(_) | Node::ByteArray(_)
                    if !self.payloads.iter().any(|(kept, _)| *kept == id) =>
                {
                    self.payloads.push((id, at.offset.unwrap_or(0)));
                }
                Node::Tuple(items) => pending.extend(arena.items(*items)),
                Node::List(items) => pending.extend(items.iter()),
                Node::Dict(_, d) => pending.extend(arena.dict(*d).items.iter().map(|(_, v)| *v)),
                _ => {}
            }
        }
    }

    fn record(&mut self, module: &str, name: &str, at: &Location) {
        self.found
            .push(FoundGlobal::new(module, name, at.offset.unwrap_or(0)));
    }

    fn call_builtin(
        &mut self,
        arena: &mut Arena,
        b: Builtin,
        args: NodeId,
        at: &Location,
    ) -> Result<NodeId, Error> {
        let name = b.full_name();
        if let Builtin::Rebuild(f) = b {
            return rebuild::call(self, arena, f, args, at);
        }
        let a = Args::new(arena, args, at, &name)?;
        let node = match b {
            Builtin::OrderedDict | Builtin::Counter => {
                a.arity(0, 1)?;
                let class = if b == Builtin::Counter {
                    DictClass::Counter
                } else {
                    DictClass::OrderedDict
                };
                let (base, inherited, items) = match a.len() {
                    0 => (None, 0, Vec::new()),
                    _ => match a.node(0)? {
                        Node::None if b == Builtin::Counter => (None, 0, Vec::new()),
                        Node::Dict(_, d) => {
                            let d = arena.dict(*d);
                            (
                                Some((a.id(0)?, d.items.len())),
                                d.inherited() + d.items.len() as u64,
                                Vec::new(),
                            )
                        }
                        // How Python 2 pickled an OrderedDict: `OrderedDict([[k, v], ...])`.
                        // (Counter counts an iterable's items instead: not supported.)
                        Node::List(_) | Node::Tuple(_) if b == Builtin::OrderedDict => {
                            (None, 0, pairs(&a)?)
                        }
                        other if is_empty_iterable(arena, other) => (None, 0, Vec::new()),
                        other => {
                            return Err(a.fail(format!("expects a dict, got {}", other.kind_name())))
                        }
                    },
                };
                // The new dict holds a copy of every item the snapshot sees.
                arena.charge_nodes((2 * inherited).saturating_add(2 * items.len() as u64))?;
                return arena.push_dict(class, DictNode::snapshot(base, inherited, items));
            }
            Builtin::Set => {
                a.arity(0, 1)?;
                let (base, inherited) = match a.len() {
                    0 => (None, 0),
                    _ => {
                        let (own, inherited) = snapshot_len(a.node(0)?)
                            .ok_or_else(|| a.fail("expects a list, tuple or set"))?;
                        (Some((a.id(0)?, own)), inherited + own as u64)
                    }
                };
                arena.charge_nodes(inherited)?;
                Node::Set(Box::new(SetNode {
                    frozen: false,
                    base,
                    inherited,
                    items: Vec::new(),
                }))
            }
            Builtin::Size => {
                a.arity(0, 1)?;
                let len = if a.is_empty() { 0 } else { size_len(&a)? };
                // A copy of every entry, charged before it is made.
                arena.charge_nodes(len as u64)?;
                let a = Args::new(arena, args, at, &name)?;
                let dims = if a.is_empty() {
                    Vec::new()
                } else {
                    size_entries(&a)?
                };
                if let Some(done) = self.sizes.get(&dims) {
                    return Ok(*done);
                }
                let id = arena.push(Node::Domain(Torch::Size(Box::new(dims.clone()))))?;
                self.sizes.insert(dims, id);
                return Ok(id);
            }
            Builtin::Device => {
                a.arity(1, 2)?;
                let device = match (a.len(), a.node(0)?) {
                    // torch.device(n) is CUDA device n.
                    (1, Node::Int(_)) => format!("cuda:{}", a.uint(0, "device index")?),
                    (1, _) => a.str(0, "device type")?.to_owned(),
                    _ => format!(
                        "{}:{}",
                        a.str(0, "device type")?,
                        a.uint(1, "device index")?
                    ),
                };
                if !valid_device(&device) {
                    return Err(a.fail(format!("invalid device string {device:?}")));
                }
                // torch keeps a device index in 8 signed bits, so it would make
                // cuda:195 into cuda:-61 (and cuda:255 into plain cuda).
                let index = device.split_once(':').map(|(_, i)| i.parse::<u64>());
                if let Some(Ok(index @ 128..)) = index {
                    return Err(a.fail(format!(
                        "device index {index} does not fit torch's 8-bit device index"
                    )));
                }
                Node::Domain(Torch::Device(Box::new(device)))
            }
            Builtin::GetLayout => {
                a.arity(1, 1)?;
                let layout = a.str(0, "layout name")?;
                Node::Domain(Torch::Layout(
                    Layout::from_name(layout)
                        .ok_or_else(|| a.fail(format!("unknown layout {layout:?}")))?,
                ))
            }
            Builtin::CodecsEncode => {
                a.arity(1, 2)?;
                if !matches!(a.node(0)?, Node::Str(_)) {
                    return Err(a.fail("encodes a str only"));
                }
                let text = a.str(0, "text")?;
                let codec = if a.len() == 2 {
                    a.str(1, "encoding")?
                } else {
                    "utf-8"
                };
                let key = (a.id(0)?, codec.to_owned());
                if let Some(done) = self.encoded.get(&key) {
                    return Ok(*done);
                }
                let bytes = encode(text, codec)
                    .ok_or_else(|| a.fail(format!("cannot encode with codec {codec:?}")))?;
                let id = arena.push_bytes(&bytes)?;
                self.encoded.insert(key, id);
                return Ok(id);
            }
            Builtin::ByteArray | Builtin::Bytes => {
                a.arity(0, 2)?;
                let bytes: Vec<u8> = match (a.len(), a.node(0)) {
                    (0, _) => Vec::new(),
                    // bytes are immutable: bytes(b) is b itself, shared, not a copy.
                    (1, Ok(Node::Bytes(_))) if b == Builtin::Bytes => return a.id(0),
                    (1, Ok(Node::Bytes(b) | Node::ByteArray(b))) => a.arena.payload(*b).to_vec(),
                    (1, Ok(Node::Tuple(_) | Node::List(_))) => byte_values(&a)?,
                    (1, Ok(Node::Bool(b))) => vec![0; usize::from(*b)],
                    // (A str needs an encoding, even an empty one.)
                    (1, Ok(other))
                        if !matches!(other, Node::Str(_)) && is_empty_iterable(a.arena, other) =>
                    {
                        Vec::new()
                    }
                    (1, Ok(Node::Int(n))) => {
                        let n = u64::try_from(*n).map_err(|_| a.fail("negative count"))?;
                        // Charged before allocating: `bytearray(n)` is an allocation request.
                        if n > arena_budget(&a) {
                            return Err(Error::limit(
                                Limit::PayloadBytes,
                                self.limits.max_payload_bytes,
                                at.clone(),
                            ));
                        }
                        vec![0; usize::try_from(n).map_err(|_| a.fail("count too large"))?]
                    }
                    (2, _) => {
                        let text = a.str(0, "text")?;
                        let codec = a.str(1, "encoding")?;
                        encode(text, codec)
                            .ok_or_else(|| a.fail(format!("cannot encode with codec {codec:?}")))?
                    }
                    (_, Ok(other)) => {
                        return Err(a.fail(format!("cannot build from {}", other.kind_name())))
                    }
                    (_, Err(e)) => return Err(e),
                };
                return if b == Builtin::Bytes {
                    arena.push_bytes(&bytes)
                } else {
                    arena.push_bytearray(&bytes)
                };
            }
            Builtin::Complex => {
                a.arity(0, 2)?;
                // CPython's complex(real, imag): either part may itself be complex.
                let part = |i: usize, what: &str| match a.node(i)? {
                    Node::Complex(c) => Ok((c.0, Some(c.1))),
                    _ => a.float(i, what).map(|v| (v, None)),
                };
                let (mut re, re_imag) = if a.is_empty() {
                    (0.0, None)
                } else {
                    part(0, "real part")?
                };
                let im = if a.len() == 2 {
                    let (mut im, im_imag) = part(1, "imaginary part")?;
                    if let Some(v) = im_imag {
                        re -= v;
                    }
                    if let Some(v) = re_imag {
                        im += v;
                    }
                    im
                } else {
                    re_imag.unwrap_or(0.0)
                };
                Node::Complex(Box::new((re, im)))
            }
            Builtin::NumpyReconstruct => numpy::reconstruct(&a)?,
            Builtin::NumpyDtype => numpy::dtype(&a)?,
            Builtin::NumpyScalar => numpy::scalar(&a)?,
            Builtin::NumpyFrombuffer => numpy::frombuffer(&a, self.limits.max_ndim)?,
            // The value itself, as TorchScript's unpickler keeps it (the type tag
            // only matters to the TorchScript runtime).
            Builtin::JitBuilder(JitBuilder::RestoreTypeTag) => {
                a.arity(2, 2)?;
                if !matches!(a.node(1)?, Node::Str(_)) {
                    return Err(a.fail(format!("the type tag must be a str, got {}", a.kind(1))));
                }
                return a.id(0);
            }
            Builtin::JitBuilder(_) => {
                a.arity(1, 1)?;
                if !matches!(a.node(0)?, Node::List(_)) {
                    return Err(a.fail(format!("expects a list, got {}", a.kind(0))));
                }
                return a.id(0);
            }
            Builtin::Parameter => {
                a.arity(0, 2)?;
                let items = a.items.to_vec();
                return self.parameter(arena, &items, args, at);
            }
            Builtin::Tensor | Builtin::LegacyTensorType { sparse: false, .. } => {
                if !a.is_empty() {
                    return Err(Error::forbidden(
                        format!("{name} called with arguments would allocate uninitialised memory; refused"),
                        at.clone(),
                    ));
                }
                let dtype = match b {
                    Builtin::LegacyTensorType { dtype, .. } => dtype,
                    _ => DType::Float32,
                };
                return arena.push_tensor(TensorNode::new(TensorKind::Empty { dtype }, false));
            }
            Builtin::TypedStorageClass | Builtin::UntypedStorageClass => {
                return Err(Error::forbidden(
                    format!("{name} called: storages come only from persistent ids (a call with a size allocates uninitialised memory); refused"),
                    at.clone(),
                ));
            }
            _ => {
                return Err(Error::forbidden(
                    format!("Trying to call reduce for unrecognized function {name}"),
                    at.clone(),
                ));
            }
        };
        arena.push(node)
    }

    /// `nn.Parameter(data=None, requires_grad=True)` (no data: an empty float32
    /// tensor), as NEWOBJ and REDUCE make it.
    fn parameter(
        &mut self,
        arena: &mut Arena,
        items: &[NodeId],
        args: NodeId,
        at: &Location,
    ) -> Result<NodeId, Error> {
        let a = Args::new(arena, args, at, "torch.nn.Parameter")?;
        let requires_grad = if items.len() == 2 {
            a.bool(1, "requires_grad")?
        } else {
            true
        };
        if let Some(data) = items.first() {
            if let Some(dtype) = rebuild::tensor_dtype(arena, *data) {
                rebuild::check_grad(&a, dtype, requires_grad)?;
            }
        }
        let no_data = items
            .first()
            .is_none_or(|data| matches!(arena.get(*data), Node::None));
        let data = match no_data {
            true => arena.push_tensor(TensorNode::new(
                TensorKind::Empty {
                    dtype: DType::Float32,
                },
                false,
            ))?,
            false => a.tensor(0, "data")?,
        };
        arena.push_tensor(TensorNode::new(
            TensorKind::Parameter { data, state: None },
            requires_grad,
        ))
    }

    fn object(&mut self, arena: &mut Arena, constructor: Constructor) -> Result<NodeId, Error> {
        arena.push(Node::Object(Box::new(ObjectNode {
            constructor,
            mutations: Vec::new(),
        })))
    }
}

/// A value an allowlisted callable returned, untouched since: what an allowlisted
/// `getattr(C, name)` fetched (a nested class, a method) is one. A REDUCE or NEWOBJ
/// on it is kept for the builder, which makes it only when the value it holds is
/// allowlisted itself, as torch checks `func in allowed.values()`.
fn made_by_user_call(arena: &Arena, id: NodeId) -> bool {
    match arena.get(id) {
        Node::Object(o) => {
            o.mutations.is_empty()
                && matches!(o.constructor, Constructor::Call { func, .. }
                    if matches!(arena.get(func), Node::Domain(Torch::Global(Global::User(_)))))
        }
        _ => false,
    }
}

/// Payload bytes the arena may still hand out.
fn arena_budget(a: &Args) -> u64 {
    a.arena.payload_left()
}

/// How many of its own items a list, tuple or set has now, and how many it
/// inherits from a snapshot of its own.
fn snapshot_len(node: &Node) -> Option<(usize, u64)> {
    match node {
        Node::List(items) => Some((items.len(), 0)),
        Node::Tuple(items) => Some((items.len(), 0)),
        Node::Set(s) => Some((s.items.len(), s.inherited)),
        _ => None,
    }
}

/// The `(key, value)` items of a list or tuple of 2-item lists and tuples.
fn pairs(a: &Args) -> Result<Vec<(NodeId, NodeId)>, Error> {
    let items = sequence(a.arena, a.node(0)?)
        .ok_or_else(|| a.fail(format!("expects pairs, got {}", a.kind(0))))?;
    items
        .iter()
        .map(|id| {
            let node = a.arena.get(*id);
            let pair = sequence(a.arena, node)
                .ok_or_else(|| a.fail(format!("expects pairs, got a {}", node.kind_name())))?;
            match pair {
                [key, value] => Ok((*key, *value)),
                _ => Err(a.fail(format!(
                    "expects pairs, got an item of {} values",
                    pair.len()
                ))),
            }
        })
        .collect()
}

/// The items of a tuple or list.
fn sequence<'a>(arena: &'a Arena, node: &'a Node) -> Option<&'a [NodeId]> {
    match node {
        Node::Tuple(items) => Some(arena.items(*items)),
        Node::List(items) => Some(items),
        _ => None,
    }
}

/// Whether Python would iterate nothing over the value (a dict aside).
fn is_empty_iterable(arena: &Arena, node: &Node) -> bool {
    match node {
        Node::Str(s) | Node::Bytes(s) | Node::ByteArray(s) | Node::Tuple(s) => s.is_empty(),
        Node::List(items) => items.is_empty(),
        Node::Set(s) => s.items.is_empty() && s.inherited == 0,
        Node::Domain(Torch::Size(dims)) => dims.is_empty(),
        // A fresh empty tensor (`torch.Tensor()`, `nn.Parameter()`) has one
        // dimension of size 0: iterating it yields nothing.
        Node::Domain(Torch::Tensor(t)) => match &arena.tensor(*t).kind {
            TensorKind::Empty { .. } => true,
            TensorKind::Parameter { data, .. } => is_empty_iterable(arena, arena.get(*data)),
            _ => false,
        },
        Node::Dict(_, d) => {
            let d = arena.dict(*d);
            d.items.is_empty() && d.inherited() == 0
        }
        _ => false,
    }
}

/// `bytes([1, 2, 3])`: the ints, each a byte.
fn byte_values(a: &Args) -> Result<Vec<u8>, Error> {
    let items = sequence(a.arena, a.node(0)?)
        .ok_or_else(|| a.fail(format!("cannot build from {}", a.kind(0))))?;
    items
        .iter()
        .map(|id| match a.arena.get(*id) {
            Node::Int(v) => u8::try_from(*v).map_err(|_| a.fail("bytes must be in range(0, 256)")),
            Node::Bool(b) => Ok(u8::from(*b)),
            other => Err(a.fail(format!("cannot take a byte from {}", other.kind_name()))),
        })
        .collect()
}

/// How many entries `torch.Size(x)` would take from `x`.
fn size_len(a: &Args) -> Result<usize, Error> {
    Ok(match a.node(0)? {
        other if is_empty_iterable(a.arena, other) => 0,
        Node::Domain(Torch::Size(sizes)) => sizes.len(),
        Node::Bytes(b) | Node::ByteArray(b) => b.len(),
        Node::Tuple(items) => items.len(),
        Node::List(items) => items.len(),
        _ => 0,
    })
}

/// `torch.Size(x)`: ints of any sign (as torch allows) from a tuple, list or Size,
/// or a bytes object's bytes.
fn size_entries(a: &Args) -> Result<Vec<i64>, Error> {
    let items: &[NodeId] = match a.node(0)? {
        other if is_empty_iterable(a.arena, other) => return Ok(Vec::new()),
        Node::Domain(Torch::Size(sizes)) => return Ok(sizes.to_vec()),
        Node::Bytes(b) | Node::ByteArray(b) => {
            return Ok(a.arena.payload(*b).iter().map(|v| i64::from(*v)).collect())
        }
        Node::Tuple(items) => a.arena.items(*items),
        Node::List(items) => items,
        other => return Err(a.fail(format!("takes a tuple of ints, got {}", other.kind_name()))),
    };
    items
        .iter()
        .map(|id| match a.arena.get(*id) {
            Node::Int(v) => Ok(*v),
            Node::Bool(b) => Ok(i64::from(*b)),
            other => Err(a.fail(format!("entries must be ints, got {}", other.kind_name()))),
        })
        .collect()
}

/// `str.encode(codec)` for the codecs pickle uses to carry bytes.
fn encode(text: &str, codec: &str) -> Option<Vec<u8>> {
    match codec.to_ascii_lowercase().replace('_', "-").as_str() {
        "latin1" | "latin-1" | "iso-8859-1" | "iso8859-1" => text
            .chars()
            .map(|c| u8::try_from(u32::from(c)).ok())
            .collect(),
        "utf-8" | "utf8" => Some(text.as_bytes().to_vec()),
        "ascii" if text.is_ascii() => Some(text.as_bytes().to_vec()),
        _ => None,
    }
}

impl rebuild::RebuildHooks for TorchHooks<'_> {
    fn limits(&self) -> &Limits {
        &self.limits
    }

    fn id_format(&self) -> IdFormat {
        self.id_format
    }

    fn storages(&mut self) -> &mut Storages {
        &mut self.storages
    }

    fn call(
        &mut self,
        arena: &mut Arena,
        func: NodeId,
        args: NodeId,
        at: &Location,
    ) -> Result<NodeId, Error> {
        self.reduce(arena, func, args, at)
    }
}

impl Hooks for TorchHooks<'_> {
    type Domain = Torch;

    fn reads_on_as_c(&self) -> bool {
        self.refusals == Refusals::Record
    }

    fn diverged(&mut self, divergence: Divergence) -> Result<(), Error> {
        match self.refusals {
            Refusals::Raise if divergence.changes_the_stream => Err(divergence.error()),
            Refusals::Raise => Ok(()),
            Refusals::Record => {
                self.divergences.push(divergence);
                Ok(())
            }
        }
    }

    fn reserve_for_pickle(&mut self, len: usize) {
        // The arena's guess of one tensor per 64 bytes: each has a storage, and a
        // key map grown one doubling at a time rehashes every key it holds.
        let guess = (len / 64).min(1 << 22);
        let cap = usize::try_from(self.limits.max_storages).unwrap_or(usize::MAX);
        self.storages.reserve(guess.min(cap));
    }

    fn global(
        &mut self,
        arena: &mut Arena,
        module: &str,
        name: &str,
        at: &Location,
    ) -> Result<NodeId, Error> {
        let (module, name) = policy::map_py2(module, name);
        if self.torchscript {
            if let Some(b) = policy::torchscript_builder(&module, &name) {
                return arena.push(Node::Domain(Torch::Global(Global::Builtin(b))));
            }
        }
        // A scan (refusals recorded) runs no call, so an allowlisted getattr stays a
        // finding there; a load checks each call of it (see policy::getattr_lifted).
        let resolution = if self.refusals == Refusals::Record {
            policy::resolve(&module, &name, self.user)
        } else {
            policy::resolve_for_load(&module, &name, self.user)
        };
        if let (Some(allowed), Resolution::Allowed(_)) = (&mut self.allowed, &resolution) {
            allowed.push(FoundGlobal::new(&module, &name, at.offset.unwrap_or(0)));
        }
        // A name the scanner's denylist marks dangerous is never stubbed: a file
        // that names it is hostile, and stays refused.
        let stubs = (self.stubs.as_mut()).filter(|_| {
            resolution == Resolution::NotAllowed && !policy::is_dangerous(&module, &name)
        });
        if let Some(stubs) = stubs {
            let index = stubs.index(&module, &name).ok_or_else(|| {
                Error::pickle("more stubbed globals than a table can index", at.clone())
            })?;
            return arena.push(Node::Domain(Torch::Global(Global::Stub(index))));
        }
        match resolution {
            Resolution::Allowed(g) => arena.push(Node::Domain(Torch::Global(g))),
            Resolution::Blocked(_) | Resolution::NotAllowed
                if self.refusals == Refusals::Record =>
            {
                self.record(&module, &name, at);
                arena.push(Node::Opaque)
            }
            Resolution::Blocked(blocked) => Err(Error::refused(
                Refusal::BlockedGlobal {
                    blocked: blocked.to_string(),
                    module: module.into_owned(),
                    name: name.into_owned(),
                },
                at.clone(),
            )),
            Resolution::NotAllowed => Err(Error::refused(
                Refusal::UnsupportedGlobal {
                    module: module.into_owned(),
                    name: name.into_owned(),
                },
                at.clone(),
            )),
        }
    }

    fn extension(&mut self, arena: &mut Arena, code: u32, at: &Location) -> Result<NodeId, Error> {
        if self.refusals == Refusals::Record {
            self.record(&format!("<extension code {code}>"), "", at);
            return arena.push(Node::Opaque);
        }
        Err(Error::refused(Refusal::ExtensionCode { code }, at.clone()))
    }

    fn unresolved_global(&mut self, arena: &mut Arena, at: &Location) -> Result<NodeId, Error> {
        if self.refusals == Refusals::Record {
            self.record(COMPUTED_GLOBAL, "", at);
            return arena.push(Node::Opaque);
        }
        Err(Error::pickle(
            "STACK_GLOBAL requires str module and name",
            at.clone(),
        ))
    }

    fn reduce(
        &mut self,
        arena: &mut Arena,
        func: NodeId,
        args: NodeId,
        at: &Location,
    ) -> Result<NodeId, Error> {
        // A scan only needs the globals: a call on a value it could not build would
        // fail anyway, and describing why costs more than the whole call.
        let opaque_arg = || {
            arena
                .tuple(args)
                .is_some_and(|items| items.iter().any(|i| matches!(arena.get(*i), Node::Opaque)))
        };
        if self.refusals == Refusals::Record {
            if matches!(arena.get(func), Node::Opaque) {
                self.keep_payloads(arena, args, at);
            }
            if opaque_arg() {
                return arena.push(Node::Opaque);
            }
        }
        let result = match arena.get(func) {
            Node::Domain(Torch::Global(Global::Builtin(b))) => {
                let b = *b;
                self.call_builtin(arena, b, args, at)
            }
            Node::Domain(Torch::Global(Global::User(_) | Global::Stub(_))) => {
                self.object(arena, Constructor::Call { func, args })
            }
            Node::Object(_) if made_by_user_call(arena, func) => {
                self.object(arena, Constructor::Call { func, args })
            }
            Node::Opaque => arena.push(Node::Opaque),
            other => Err(Error::forbidden(
                format!(
                    "Trying to call reduce for unrecognized function {}",
                    other.kind_name()
                ),
                at.clone(),
            )),
        };
        self.lenient(arena, result)
    }

    fn new_object(
        &mut self,
        arena: &mut Arena,
        cls: NodeId,
        args: NodeId,
        kwargs: Option<NodeId>,
        at: &Location,
    ) -> Result<NodeId, Error> {
        let no_kwargs = kwargs.is_none_or(|k| {
            arena
                .as_dict(k)
                .is_some_and(|d| d.items.is_empty() && d.base().is_none())
        });
        let cls_node = arena.get(cls).clone();
        if self.refusals == Refusals::Record && cls_node == Node::Opaque {
            self.keep_payloads(arena, args, at);
        }
        let result = match &cls_node {
            Node::Domain(Torch::Global(Global::User(_) | Global::Stub(_))) => {
                self.object(arena, Constructor::New { cls, args, kwargs })
            }
            Node::Object(_) if made_by_user_call(arena, cls) => {
                self.object(arena, Constructor::New { cls, args, kwargs })
            }
            Node::Domain(Torch::Global(Global::Builtin(Builtin::Parameter))) if no_kwargs => match arena.tuple(args) {
                Some(items) => {
                    let items = items.to_vec();
                    if items.len() > 2 {
                        Err(Error::tensor("torch.nn.Parameter takes at most 2 arguments", at.clone()))
                    } else {
                        self.parameter(arena, &items, args, at)
                    }
                }
                None => Err(Error::pickle("NEWOBJ arguments must be a tuple", at.clone())),
            },
            // `__new__` of a mutable builtin makes an empty one; `__init__` would fill it.
            Node::Domain(Torch::Global(Global::Builtin(b @ (Builtin::OrderedDict | Builtin::Counter | Builtin::Set | Builtin::ByteArray))))
                if no_kwargs =>
            {
                let b = *b;
                if arena.tuple(args).is_none() {
                    Err(Error::pickle("NEWOBJ arguments must be a tuple", at.clone()))
                } else {
                    let empty = arena.push_tuple(&[])?;
                    self.call_builtin(arena, b, empty, at)
                }
            }
            // Immutable types and torch's C types build in `__new__` what a call builds.
            Node::Domain(Torch::Global(Global::Builtin(
                b @ (Builtin::Complex
                | Builtin::Bytes
                | Builtin::Size
                | Builtin::Device
                | Builtin::Tensor
                | Builtin::LegacyTensorType { sparse: false, .. }
                | Builtin::TypedStorageClass
                | Builtin::UntypedStorageClass),
            ))) if no_kwargs => {
                let b = *b;
                self.call_builtin(arena, b, args, at)
            }
            Node::Opaque => arena.push(Node::Opaque),
            other => Err(Error::forbidden(
                format!(
                    "Can only create new object for nn.Parameter or classes allowlisted via `add_safe_globals` but got {}",
                    match other {
                        Node::Domain(Torch::Global(Global::Builtin(b))) => b.full_name().into_owned(),
                        other => other.kind_name().to_owned(),
                    }
                ),
                at.clone(),
            )),
        };
        self.lenient(arena, result)
    }

    fn build(
        &mut self,
        arena: &mut Arena,
        inst: NodeId,
        state: NodeId,
        at: &Location,
    ) -> Result<(), Error> {
        // `__setstate__` of a refused class may unpickle its state's bytes.
        if self.refusals == Refusals::Record && matches!(arena.get(inst), Node::Opaque) {
            self.keep_payloads(arena, state, at);
        }
        let result = match arena.get(inst) {
            Node::Domain(Torch::NdArray(a)) if a.state.is_none() => {
                numpy::build_array(arena, state, self.limits.max_ndim, at).map(|built| {
                    if let Some(Node::Domain(Torch::NdArray(a))) = arena.get_mut(inst) {
                        a.state = Some(built);
                    }
                })
            }
            Node::Domain(Torch::NpDtype(d)) => {
                let mut d = *d;
                numpy::build_dtype(arena, &mut d, state, at).map(|()| {
                    if let Some(Node::Domain(Torch::NpDtype(slot))) = arena.get_mut(inst) {
                        *slot = d;
                    }
                })
            }
            Node::Domain(Torch::Tensor(t))
                if matches!(arena.tensor(*t).kind, TensorKind::Empty { .. }) =>
            {
                let t = *t;
                rebuild::set_state(self, arena, t, state, at)
            }
            _ => build_container(arena, inst, state, at),
        };
        match result {
            Err(e) if self.refusals == Refusals::Record && !e.is_limit() => Ok(()),
            other => other,
        }
    }

    fn persistent_load(
        &mut self,
        arena: &mut Arena,
        pid: NodeId,
        at: &Location,
    ) -> Result<NodeId, Error> {
        if self.refusals == Refusals::Record {
            return arena.push(Node::Opaque);
        }
        if let Some(why) = self.no_storages {
            return Err(Error::forbidden(why, at.clone()));
        }
        if self.id_format == IdFormat::Legacy && module_ids::is_module_id(arena, pid) {
            return match self.stubs.as_mut() {
                Some(stubs) => module_ids::load(arena, pid, stubs, at),
                None => Err(module_ids::refusal(None, at.clone())),
            };
        }
        let id = self
            .storages
            .load(arena, pid, self.id_format, self.limits.max_storages, at)?;
        arena.push(Node::Domain(Torch::Storage(id)))
    }
}

/// BUILD on an OrderedDict (its `__dict__`), an allowlisted object, or another
/// instance of an allowlisted type, which torch builds as pickle does: a
/// `(state, slotstate)` pair, each part applied only when truthy.
fn build_container(
    arena: &mut Arena,
    inst: NodeId,
    state: NodeId,
    at: &Location,
) -> Result<(), Error> {
    let kind = arena.get(inst).kind_name();
    let (dict_state, slot_state) = match arena.tuple(state) {
        Some(&[dict_state, slot_state]) => (dict_state, Some(slot_state)),
        _ => (state, None),
    };
    let falsy = |id: NodeId| is_falsy(arena, id);
    let applies_nothing =
        falsy(dict_state) == Some(true) && slot_state.is_none_or(|s| falsy(s) == Some(true));
    match *arena.get(inst) {
        // `OrderedDict.__dict__.update(state)`: a dict, or nothing from an empty iterable.
        Node::Dict(DictClass::OrderedDict, d) => match arena.get(state) {
            Node::Dict(..) => push_dict_state(arena, d, state),
            Node::Str(_) | Node::Bytes(_) | Node::ByteArray(_) | Node::Tuple(_) | Node::List(_) | Node::Set(_) | Node::Domain(Torch::Size(_))
                if falsy(state) == Some(true) =>
            {
                Ok(())
            }
            _ => Err(Error::tensor(
                format!("BUILD state of an {kind} must be a dict"),
                at.clone(),
            )),
        },
        Node::Dict(DictClass::Counter, d) => {
            if slot_state.is_some_and(|s| falsy(s) != Some(true)) {
                return Err(Error::unsupported("BUILD setting slots of a Counter", at.clone()));
            }
            match arena.get(dict_state) {
                Node::Dict(..) if falsy(dict_state) == Some(false) => push_dict_state(arena, d, dict_state),
                _ if falsy(dict_state) == Some(true) => Ok(()),
                _ => Err(Error::tensor(
                    format!("BUILD state of a {kind} must be a dict"),
                    at.clone(),
                )),
            }
        }
        Node::Set(ref s) if !s.frozen && applies_nothing => Ok(()),
        Node::Complex(_)
        | Node::Bytes(_)
        | Node::ByteArray(_)
        | Node::Domain(Torch::Size(_))
        | Node::Domain(Torch::Device(_))
        | Node::Domain(Torch::Storage(_))
            if applies_nothing =>
        {
            Ok(())
        }
        Node::Set(ref s) if !s.frozen => Err(no_attributes(kind, at)),
        Node::Complex(_) | Node::Bytes(_) | Node::ByteArray(_) | Node::Domain(Torch::Size(_)) | Node::Domain(Torch::Device(_)) => {
            Err(no_attributes(kind, at))
        }
        Node::Domain(Torch::Storage(_)) => Err(Error::unsupported("BUILD setting attributes of a storage", at.clone())),
        _ => match arena.get_mut(inst) {
            Some(Node::Object(obj)) => {
                // Most objects get one BUILD and nothing else: room for exactly it
                // (a growing vector makes room for four). Later ones grow it as a
                // vector grows, so many BUILDs cost linear time.
                if obj.mutations.is_empty() {
                    obj.mutations.reserve_exact(1);
                }
                obj.mutations.push(Mutation::Build(state));
                Ok(())
            }
            Some(Node::Opaque) => Ok(()),
            Some(Node::Domain(Torch::Tensor(_))) => Err(Error::unsupported("BUILD on a tensor (a pre-1.0 pickle format)", at.clone())),
            _ => Err(Error::forbidden(
                format!(
                    "Can only build Tensor, Parameter, OrderedDict or types allowlisted via `add_safe_globals`, but got <class '{kind}'>"
                ),
                at.clone(),
            )),
        },
    }
}

fn push_dict_state(arena: &mut Arena, d: DictId, state: NodeId) -> Result<(), Error> {
    if let Some(d) = arena.dict_mut(d) {
        d.push_state(state);
    }
    Ok(())
}

fn no_attributes(kind: &str, at: &Location) -> Error {
    Error::tensor(
        format!("BUILD cannot set attributes of a {kind}"),
        at.clone(),
    )
}

/// Python's truth value of a value, where it is fixed by the value alone (an
/// object's or an array's could run code or depend on bytes not read yet).
fn is_falsy(arena: &Arena, id: NodeId) -> Option<bool> {
    Some(match arena.get(id) {
        Node::None => true,
        Node::Bool(b) => !b,
        Node::Int(v) => *v == 0,
        Node::Float(v) => *v == 0.0,
        Node::Complex(c) => c.0 == 0.0 && c.1 == 0.0,
        Node::Str(s) | Node::Bytes(s) | Node::ByteArray(s) | Node::Tuple(s) => s.is_empty(),
        Node::List(items) => items.is_empty(),
        Node::Dict(_, d) => {
            let d = arena.dict(*d);
            d.items.is_empty() && d.inherited() == 0
        }
        Node::Set(s) => s.items.is_empty() && s.inherited == 0,
        Node::Domain(Torch::Size(dims)) => dims.is_empty(),
        Node::BigInt(_)
        | Node::DecimalInt(_)
        | Node::Domain(Torch::Global(_))
        | Node::Domain(Torch::Device(_))
        | Node::Domain(Torch::Layout(_)) => false,
        _ => return None,
    })
}
