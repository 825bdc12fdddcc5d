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

mod builtins;

use builtins::*;

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
