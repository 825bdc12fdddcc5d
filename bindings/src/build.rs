//! Turning a validated checkpoint into Python objects in one attached pass: the
//! arena is walked with an explicit stack (so no depth overflows anything), every
//! node is built once and cached (so shared objects and storages stay shared)
//! until its last user has it (so argument tuples and state dicts are freed as
//! the build goes, as pickle frees them), and the only callables are torch's,
//! numpy's and the user's allowlisted ones.
//! Python's own values are built here; tensors, storages and torch's other kinds
//! by the backend's [`Tensors`].

use std::collections::hash_map::RandomState;
use std::collections::HashMap;
use std::hash::{BuildHasher, Hasher};

use pyo3::prelude::*;
use pyo3::types::{
    PyByteArray, PyBytes, PyComplex, PyDict, PyFrozenSet, PyList, PySet, PyString, PyTuple, PyType,
};

use crate::errors::{location_of, raise_as, wrap_build_error};
use tensorplay::checkpoint::Checkpoint;
use tensorplay::error::{Error, Location};
use tensorplay::torch::policy::{Builtin, Global};
use tensorplay::torch::{Arena, Node, TensorId, Torch};
use tensorplay::torch::{Layout, QParams, StorageId, TensorKind, TensorNode};
use tensorplay::value::refs::MANY;
use tensorplay::value::{Constructor, DictClass, Mutation, NodeId};

pub struct Builder<'a, 'py> {
    pub py: Python<'py>,
    pub checkpoint: &'a Checkpoint,
    tensors: Box<dyn Tensors<'a, 'py> + 'a>,
    user_objects: Vec<Bound<'py, PyAny>>,
    pub helpers: Bound<'py, PyModule>,
    /// Built values not yet taken by all their users. A map, not a slot per
    /// node: few are alive at once, and a `.metadata` of 50,000 tensors has
    /// 1.5 million nodes (12 MiB of slots, alive beside every object built).
    cache: HashMap<usize, Bound<'py, PyAny>, NodeIds>,
    /// Users of each node that have not taken it yet; at zero it is let go.
    unused: Vec<u8>,
    stage: Vec<Stage>,
    /// Per class (by address): may BUILD set a dict state on its instances directly?
    plain_state: HashMap<usize, bool>,
}

/// Hashes the builder's node indices by multiply-shift with an odd
/// multiplier drawn for each build: one multiplication where SipHash made a
/// quarter of a `.metadata` build, while a file, which decides which indices
/// are alive at once, cannot line them up in one bucket without knowing it.
#[derive(Clone)]
struct NodeIds {
    multiplier: u64,
}

impl NodeIds {
    fn drawn() -> Self {
        NodeIds {
            multiplier: RandomState::new().build_hasher().finish() | 1,
        }
    }
}

impl BuildHasher for NodeIds {
    type Hasher = NodeIdHasher;

    fn build_hasher(&self) -> NodeIdHasher {
        NodeIdHasher {
            multiplier: self.multiplier,
            hash: 0,
        }
    }
}

struct NodeIdHasher {
    multiplier: u64,
    hash: u64,
}

impl Hasher for NodeIdHasher {
    fn finish(&self) -> u64 {
        self.hash
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(u64::from(b));
        }
    }

    fn write_u64(&mut self, n: u64) {
        // The product's upper half, where every bit of the index counts, is
        // moved down to where the table takes its bucket from.
        self.hash = (self.hash ^ n)
            .wrapping_mul(self.multiplier)
            .rotate_left(32);
    }

    fn write_usize(&mut self, n: usize) {
        self.write_u64(n as u64);
    }
}

#[derive(Clone, Copy, PartialEq)]
enum Stage {
    Waiting,
    /// Its children are being built: meeting it again is a cycle.
    Building,
    /// Built, taken by every user and let go.
    Released,
}

enum Frame {
    Enter(NodeId),
    /// Build an immutable node from its (now built) children.
    Finish(NodeId),
    /// Enter the children a mutable node or an object is filled with.
    EnterFill(NodeId),
    /// Fill a mutable node or apply an object's mutations.
    Fill(NodeId),
}

impl<'a, 'py> Builder<'a, 'py> {
    pub fn new(
        checkpoint: &'a Checkpoint,
        tensors: Box<dyn Tensors<'a, 'py> + 'a>,
        user_objects: Vec<Bound<'py, PyAny>>,
        helpers: Bound<'py, PyModule>,
    ) -> Self {
        let n = checkpoint.arena.len();
        Builder {
            py: helpers.py(),
            checkpoint,
            tensors,
            user_objects,
            helpers,
            cache: HashMap::with_hasher(NodeIds::drawn()),
            unused: checkpoint.references.clone(),
            stage: vec![Stage::Waiting; n],
            plain_state: HashMap::new(),
        }
    }

    /// Whether BUILD may set a dict state straight into the `__dict__` of
    /// instances of `obj`'s class: neither it nor a base (but `object`) defines
    /// `__setstate__`, or a `__getattr__` or `__getattribute__` that could make
    /// one appear. Asked once per class: looking for `__setstate__` on each
    /// object made and dropped an AttributeError for each. A class whose
    /// `__mro__` or `__dict__`s cannot be read so (a metaclass's doing) is not
    /// plain: the general path sets its state as pickle does, and reports what
    /// goes wrong there.
    fn takes_plain_state(&mut self, obj: &Bound<'py, PyAny>) -> bool {
        let class = obj.get_type();
        let key = class.as_ptr() as usize;
        if let Some(&plain) = self.plain_state.get(&key) {
            return plain;
        }
        let plain = plain_class(self.py, &class).unwrap_or(false);
        self.plain_state.insert(key, plain);
        plain
    }

    pub(crate) fn node(&self, id: NodeId) -> &'a Node {
        self.checkpoint.arena.get(id)
    }

    pub(crate) fn arena(&self) -> &'a Arena {
        &self.checkpoint.arena
    }

    pub(crate) fn built(&self, id: NodeId) -> PyResult<Bound<'py, PyAny>> {
        (self.cache.get(&id.index()).cloned()).ok_or_else(|| self.not_built(id))
    }

    /// A value asked for before it was built: only a cycle through immutable
    /// containers, which Python's pickle cannot make either, leads there.
    fn not_built(&self, id: NodeId) -> PyErr {
        self.fail(
            id,
            "a value refers to itself through an immutable container",
        )
    }

    /// What an allowlisted callable raised while the file drove it (a class's
    /// `__new__` or `__setstate__`, a call): the file's fault, so a
    /// `MalformedCheckpointError` saying what ran, as torch's weights-only
    /// loader turns every such error into an `UnpicklingError`. Unpickling
    /// errors (tensorplay's own refusals), `MemoryError` and what is not an
    /// `Exception` (`KeyboardInterrupt`) pass as they are.
    fn ran_for_the_file(
        &self,
        id: NodeId,
        result: PyResult<Bound<'py, PyAny>>,
        what: impl FnOnce() -> String,
    ) -> PyResult<Bound<'py, PyAny>> {
        result.map_err(|e| {
            let py = self.py;
            let unpickling = (py.import("pickle"))
                .and_then(|m| m.getattr("UnpicklingError"))
                .is_ok_and(|class| e.is_instance(py, &class));
            let own = unpickling
                || e.is_instance_of::<pyo3::exceptions::PyMemoryError>(py)
                || !e.is_instance_of::<pyo3::exceptions::PyException>(py);
            if own {
                return e;
            }
            let at = format!("{} (value #{})", what(), id.index());
            wrap_build_error(py, e, &at, self.location())
        })
    }

    /// Whether `func` is the builtin `getattr`, which a user entry may allowlist.
    fn is_getattr(&self, func: &Bound<'py, PyAny>) -> PyResult<bool> {
        Ok(func.is(&self.py.import("builtins")?.getattr("getattr")?))
    }

    /// The file's pickle, where every value the builder makes comes from.
    pub(crate) fn location(&self) -> Location {
        Location::entry(&self.checkpoint.pickle_entry)
    }

    pub(crate) fn fail(&self, id: NodeId, reason: &str) -> PyErr {
        let err = Error::pickle(format!("{reason} (value #{})", id.index()), self.location());
        let message = format!(
            "malformed checkpoint: {}{}",
            err.reason(),
            location_of(&err)
        );
        raise_as(self.py, &err, message)
    }

    /// A key Python could not hash. torch's tensors hash by identity, numpy's
    /// arrays not at all: a key holding a tensor is the numpy backend's limit.
    fn key_error(&self, cause: PyErr, key: NodeId, what: &str) -> PyErr {
        let mut pending = vec![key];
        while let Some(id) = pending.pop() {
            match self.node(id) {
                Node::Domain(Torch::Tensor(_)) if self.tensors.arrays_unhashable() => {
                    return self.unsupported(format!(
                        "the numpy backend cannot use an array in a dict key or set item ({what}); load with backend='torch'"
                    ));
                }
                Node::Tuple(items) => pending.extend(self.arena().items(*items)),
                _ => {}
            }
        }
        wrap_build_error(self.py, cause, what, self.location())
    }

    pub(crate) fn unsupported(&self, reason: String) -> PyErr {
        crate::errors::to_pyerr(self.py, Error::unsupported(reason, self.location()))
    }

    /// The built value of `id` for one of the values that refer to it, let go
    /// when that was its last user.
    fn take(&mut self, id: NodeId) -> PyResult<Bound<'py, PyAny>> {
        let last_user = match self.unused.get_mut(id.index()) {
            Some(unused) if *unused != MANY => {
                *unused = unused.saturating_sub(1);
                *unused == 0
            }
            _ => false,
        };
        if !last_user {
            return self.built(id);
        }
        let obj = self.cache.remove(&id.index());
        if let Some(stage) = self.stage.get_mut(id.index()) {
            *stage = Stage::Released;
        }
        obj.ok_or_else(|| self.not_built(id))
    }

    fn store(&mut self, id: NodeId, obj: Bound<'py, PyAny>) {
        self.cache.insert(id.index(), obj);
    }

    /// Build the object of `root` and everything it reaches.
    pub fn build(mut self, root: NodeId) -> PyResult<Bound<'py, PyAny>> {
        let _paused = crate::gc::pause(self.py)?;
        let stubs = self.checkpoint.stubs.names();
        if !stubs.is_empty() {
            // Every global the pickle stood in for, built into the result or not.
            let names: Vec<String> = stubs.iter().map(|(m, n)| format!("{m}.{n}")).collect();
            self.helpers.call_method1("stubbed", (names,))?;
        }
        if let Some(unused) = self.unused.get_mut(root.index()) {
            *unused = MANY;
        }
        let mut stack = vec![Frame::Enter(root)];
        while let Some(frame) = stack.pop() {
            match frame {
                Frame::Enter(id) => self.enter(id, &mut stack)?,
                Frame::Finish(id) => {
                    let obj = self.finish(id)?;
                    self.store(id, obj);
                    if let Some(stage) = self.stage.get_mut(id.index()) {
                        *stage = Stage::Waiting;
                    }
                }
                Frame::EnterFill(id) => {
                    for child in self.fill_children(id).into_iter().rev() {
                        stack.push(Frame::Enter(child));
                    }
                }
                Frame::Fill(id) => self.fill(id)?,
            }
        }
        self.built(root)
    }

    fn enter(&mut self, id: NodeId, stack: &mut Vec<Frame>) -> PyResult<()> {
        if self.cache.contains_key(&id.index()) {
            return Ok(());
        }
        match self.stage.get(id.index()) {
            Some(Stage::Building) => return Err(self.not_built(id)),
            // The counts come from the same references this walk follows.
            Some(Stage::Released) => {
                return Err(self.fail(id, "a value is used more often than it is referred to"))
            }
            _ => {}
        }
        let py = self.py;
        let node = self.node(id);
        // Mutable containers exist before their items, so they can contain themselves.
        let mutable = match node {
            Node::List(_) => Some(PyList::empty(py).into_any()),
            Node::Dict(class, _) => Some(match class {
                DictClass::Dict => PyDict::new(py).into_any(),
                DictClass::OrderedDict => {
                    py.import("collections")?.getattr("OrderedDict")?.call0()?
                }
                DictClass::Counter => py.import("collections")?.getattr("Counter")?.call0()?,
            }),
            Node::Set(s) if !s.frozen => Some(PySet::empty(py)?.into_any()),
            _ => None,
        };
        if let Some(obj) = mutable {
            self.store(id, obj);
            stack.push(Frame::Fill(id));
            stack.push(Frame::EnterFill(id));
            return Ok(());
        }
        let children = self.children(id);
        if let Node::Object(_) = node {
            // Construct first, then enter the mutation states: they may refer to the object.
            stack.push(Frame::Fill(id));
            stack.push(Frame::EnterFill(id));
        }
        if children.is_empty() {
            let obj = self.finish(id)?;
            self.store(id, obj);
            return Ok(());
        }
        if let Some(stage) = self.stage.get_mut(id.index()) {
            *stage = Stage::Building;
        }
        stack.push(Frame::Finish(id));
        for child in children.into_iter().rev() {
            stack.push(Frame::Enter(child));
        }
        Ok(())
    }

    /// Prefix of another container's items that a snapshot (`Counter(d)`, `set(l)`) sees.
    fn snapshot_items(&self, base: Option<(NodeId, usize)>, out: &mut Vec<NodeId>) {
        // Snapshots of snapshots form a chain; walk it without recursion, then emit
        // the deepest base's items first.
        let mut chain = Vec::new();
        let mut next = base;
        while let Some((id, len)) = next {
            chain.push((id, len));
            next = match self.node(id) {
                Node::Set(s) => s.base,
                Node::Dict(_, d) => self.arena().dict(*d).base(),
                _ => None,
            };
        }
        for (id, len) in chain.into_iter().rev() {
            match self.node(id) {
                Node::List(items) => out.extend(items.iter().take(len)),
                Node::Tuple(items) => out.extend(self.arena().items(*items).iter().take(len)),
                Node::Set(s) => out.extend(s.items.iter().take(len)),
                Node::Dict(_, d) => out.extend(
                    self.arena()
                        .dict(*d)
                        .items
                        .iter()
                        .take(len)
                        .flat_map(|(k, v)| [*k, *v]),
                ),
                _ => {}
            }
        }
    }

    /// Children needed before a node can be finished.
    fn children(&self, id: NodeId) -> Vec<NodeId> {
        match self.node(id) {
            Node::Tuple(items) => self.arena().items(*items).to_vec(),
            Node::Set(s) => {
                let mut out = Vec::new();
                self.snapshot_items(s.base, &mut out);
                out.extend(s.items.iter().copied());
                out
            }
            Node::Object(obj) => match obj.constructor {
                Constructor::Call { func, args } => vec![func, args],
                Constructor::New { cls, args, kwargs } => [Some(cls), Some(args), kwargs]
                    .into_iter()
                    .flatten()
                    .collect(),
            },
            Node::Domain(Torch::Tensor(t)) => self.tensors.children(self.arena().tensor(*t)),
            _ => Vec::new(),
        }
    }

    /// Children a mutable node is filled with, or an object's mutation arguments.
    fn fill_children(&self, id: NodeId) -> Vec<NodeId> {
        match self.node(id) {
            Node::List(items) => items.to_vec(),
            Node::Dict(_, d) => {
                let d = self.arena().dict(*d);
                let mut out = Vec::new();
                self.snapshot_items(d.base(), &mut out);
                out.extend(d.items.iter().flat_map(|(k, v)| [*k, *v]));
                out.extend(d.state().iter().copied());
                out
            }
            Node::Set(s) => {
                let mut out = Vec::new();
                self.snapshot_items(s.base, &mut out);
                out.extend(s.items.iter().copied());
                out
            }
            Node::Object(obj) => obj
                .mutations
                .iter()
                .flat_map(|m| match m {
                    Mutation::Build(s) | Mutation::Append(s) => vec![*s],
                    Mutation::SetItem(k, v) => vec![*k, *v],
                })
                .collect(),
            _ => Vec::new(),
        }
    }

    fn fill(&mut self, id: NodeId) -> PyResult<()> {
        let obj = self.built(id)?;
        match self.node(id) {
            Node::List(items) => {
                let list = obj.cast::<PyList>()?;
                for item in items.iter() {
                    list.append(self.take(*item)?)?;
                }
            }
            Node::Dict(_, d) => {
                let d = self.arena().dict(*d);
                let mut snapshot = Vec::new();
                self.snapshot_items(d.base(), &mut snapshot);
                for kv in snapshot.chunks_exact(2) {
                    if let [k, v] = kv {
                        obj.set_item(self.built(*k)?, self.built(*v)?)
                            .map_err(|e| self.key_error(e, *k, "cannot insert a dict item"))?;
                    }
                }
                for (k, v) in &d.items {
                    obj.set_item(self.take(*k)?, self.take(*v)?)
                        .map_err(|e| self.key_error(e, *k, "cannot insert a dict item"))?;
                }
                for state in d.state() {
                    let state = self.take(*state)?;
                    obj.getattr("__dict__")?.call_method1("update", (state,))?;
                }
            }
            Node::Set(s) => {
                let set = obj.cast::<PySet>()?;
                let mut snapshot = Vec::new();
                self.snapshot_items(s.base, &mut snapshot);
                for item in snapshot {
                    set.add(self.built(item)?)
                        .map_err(|e| self.key_error(e, item, "cannot add a set item"))?;
                }
                for item in &s.items {
                    set.add(self.take(*item)?)
                        .map_err(|e| self.key_error(e, *item, "cannot add a set item"))?;
                }
            }
            Node::Object(o) => {
                for m in &o.mutations {
                    let result = match m {
                        Mutation::Build(s) => {
                            let state = self.take(*s)?;
                            let plain = self.takes_plain_state(&obj);
                            let built = match state.cast_exact::<PyDict>() {
                                Ok(dict) if plain => set_dict_state(&obj, dict),
                                _ => self.helpers.call_method1("build", (&obj, state)),
                            };
                            self.ran_for_the_file(id, built, || {
                                format!("setting the state of a {}", type_name(&obj))
                            })
                        }
                        Mutation::Append(v) => {
                            let value = self.take(*v)?;
                            self.helpers.call_method1("append", (&obj, value))
                        }
                        Mutation::SetItem(k, v) => {
                            let (key, value) = (self.take(*k)?, self.take(*v)?);
                            self.helpers.call_method1("setitem", (&obj, key, value))
                        }
                    };
                    result?;
                }
            }
            _ => {}
        }
        Ok(())
    }

    /// Build a node whose children are all built.
    fn finish(&mut self, id: NodeId) -> PyResult<Bound<'py, PyAny>> {
        let py = self.py;
        let obj = match self.node(id) {
            Node::None => py.None().into_bound(py),
            Node::Bool(b) => b.into_pyobject(py)?.to_owned().into_any(),
            Node::Int(i) => i.into_pyobject(py)?.into_any(),
            Node::BigInt(bytes) => {
                let kwargs = PyDict::new(py);
                kwargs.set_item("signed", true)?;
                py.get_type::<pyo3::types::PyInt>().call_method(
                    "from_bytes",
                    (PyBytes::new(py, bytes), "little"),
                    Some(&kwargs),
                )?
            }
            Node::DecimalInt(text) => py
                .get_type::<pyo3::types::PyInt>()
                .call1((text.as_ref(), 0))
                .map_err(|e| wrap_build_error(py, e, "invalid int literal", self.location()))?,
            Node::Float(f) => f.into_pyobject(py)?.into_any(),
            Node::Complex(c) => PyComplex::from_doubles(py, c.0, c.1).into_any(),
            Node::Str(bytes) => match std::str::from_utf8(self.arena().payload(*bytes)) {
                Ok(s) => PyString::new(py, s).into_any(),
                Err(_) => PyBytes::new(py, self.arena().payload(*bytes))
                    .call_method1("decode", ("utf-8", "surrogatepass"))
                    .map_err(|e| wrap_build_error(py, e, "invalid string", self.location()))?,
            },
            Node::Bytes(b) => PyBytes::new(py, self.arena().payload(*b)).into_any(),
            Node::ByteArray(b) => PyByteArray::new(py, self.arena().payload(*b)).into_any(),
            Node::Tuple(items) => {
                let items = self.arena().items(*items);
                let mut objs = Vec::with_capacity(items.len());
                for item in items {
                    objs.push(self.take(*item)?);
                }
                PyTuple::new(py, objs)?.into_any()
            }
            Node::Set(s) => {
                let mut snapshot = Vec::new();
                self.snapshot_items(s.base, &mut snapshot);
                let mut objs = (snapshot.iter())
                    .map(|i| self.built(*i))
                    .collect::<PyResult<Vec<_>>>()?;
                for item in &s.items {
                    objs.push(self.take(*item)?);
                }
                PyFrozenSet::new(py, objs)
                    .map_err(|e| {
                        wrap_build_error(py, e, "cannot build a frozenset", self.location())
                    })?
                    .into_any()
            }
            Node::Domain(Torch::Global(Global::User(i))) => self
                .user_objects
                .get(*i as usize)
                .cloned()
                .ok_or_else(|| self.fail(id, "unknown user global"))?,
            Node::Domain(Torch::Global(Global::Stub(i))) => {
                let (module, name) = (self.checkpoint.stubs.names())
                    .get(*i as usize)
                    .ok_or_else(|| self.fail(id, "unknown stubbed global"))?;
                let stub = self.helpers.call_method1("stub", (module, name))?;
                if let Some(source) = self.checkpoint.stubs.source(*i) {
                    stub.setattr("source", source)?;
                }
                stub
            }
            Node::Domain(Torch::Global(Global::Builtin(b))) => self.tensors.builtin(self, *b)?,
            Node::Domain(Torch::Size(dims)) => self.tensors.size(self, dims)?,
            Node::Domain(Torch::Device(s)) => self.tensors.device(self, s)?,
            Node::Domain(Torch::Layout(l)) => self.tensors.layout(self, *l)?,
            Node::Domain(Torch::Storage(s)) => self.tensors.storage(self, *s)?,
            Node::Domain(Torch::Tensor(t)) => self.tensors.tensor(self, *t)?,
            Node::Object(o) => {
                let result = match o.constructor {
                    Constructor::Call { func, args } => {
                        let args = self.take(args)?;
                        let args = args
                            .cast::<PyTuple>()
                            .map_err(|_| self.fail(id, "call arguments must be a tuple"))?;
                        let stubbed = matches!(
                            self.node(func),
                            Node::Domain(Torch::Global(Global::Stub(_)))
                        );
                        let user = matches!(
                            self.node(func),
                            Node::Domain(Torch::Global(Global::User(_)))
                        );
                        let made = matches!(self.node(func), Node::Object(_));
                        let func = self.take(func)?;
                        if stubbed {
                            // Recorded, never called: the global was not imported.
                            self.helpers.call_method1("stub_call", (func, args))
                        } else if user && self.is_getattr(&func)? {
                            // Allowlisted getattr: only getattr(C, name) with C and C.name
                            // both allowlisted, checked before and after the lookup.
                            let allowlisted = PyTuple::new(py, &self.user_objects)?;
                            self.helpers
                                .call_method1("allowlisted_getattr", (args, allowlisted))
                        } else if made {
                            // What an allowlisted callable returned (getattr's nested class
                            // or method): called only when it is allowlisted itself.
                            let allowlisted = PyTuple::new(py, &self.user_objects)?;
                            self.helpers
                                .call_method1("call_allowlisted", (func, args, allowlisted))
                        } else if user && func.is_instance(&self.helpers.getattr("stub")?)? {
                            // A user entry standing a stub in for a global (`inspect --allow` of
                            // a name this process cannot import): recorded, never called.
                            self.helpers.call_method1("stub_call", (func, args))
                        } else {
                            self.ran_for_the_file(id, func.call1(args), || {
                                format!("calling {}", qualified_name(&func))
                            })
                        }
                    }
                    Constructor::New { cls, args, kwargs } => {
                        let kwargs = match kwargs {
                            Some(k) => self.take(k)?,
                            None => py.None().into_bound(py),
                        };
                        let returned = matches!(self.node(cls), Node::Object(_));
                        let cls = self.take(cls)?;
                        let args = self.take(args)?;
                        let made = if returned {
                            // A class an allowlisted getattr fetched: made only when allowlisted.
                            let allowlisted = PyTuple::new(py, &self.user_objects)?;
                            (self.helpers)
                                .call_method1("new_allowlisted", (&cls, args, kwargs, allowlisted))
                        } else {
                            match new_plain(&cls, &args, &kwargs) {
                                Some(made) => made,
                                None => {
                                    (self.helpers).call_method1("new_object", (&cls, args, kwargs))
                                }
                            }
                        };
                        self.ran_for_the_file(id, made, || {
                            format!("creating a {}", qualified_name(&cls))
                        })
                    }
                };
                result?
            }
            Node::Domain(Torch::NdArray(a)) => {
                let state = a
                    .state
                    .as_ref()
                    .ok_or_else(|| self.fail(id, "a numpy array without its state"))?;
                let data = match self.node(state.data) {
                    Node::Bytes(b) | Node::ByteArray(b) => {
                        PyBytes::new(py, self.arena().payload(*b))
                    }
                    _ => return Err(self.fail(id, "numpy array data is not bytes")),
                };
                let shape = PyTuple::new(py, state.shape.iter().copied())?;
                self.helpers.call_method1(
                    "numpy_array",
                    (state.dtype.descr(), shape, state.fortran, data),
                )?
            }
            Node::Domain(Torch::NpDtype(d)) => {
                self.helpers.call_method1("numpy_dtype", (d.descr(),))?
            }
            Node::Domain(Torch::NpScalar(d, data)) => {
                let data = match self.node(*data) {
                    Node::Bytes(b) => PyBytes::new(py, self.arena().payload(*b)),
                    _ => return Err(self.fail(id, "numpy scalar data is not bytes")),
                };
                self.helpers
                    .call_method1("numpy_scalar", (d.descr(), data))?
            }
            Node::List(_) | Node::Dict(..) => return self.built(id),
            Node::Opaque => return Err(self.fail(id, "an unresolved value")),
        };
        Ok(obj)
    }
}

/// `module.qualname` of a class or function, for errors; its type's name otherwise.
fn qualified_name(obj: &Bound<'_, PyAny>) -> String {
    let attr = |name: &str| obj.getattr(name).and_then(|v| v.extract::<String>()).ok();
    match (attr("__module__"), attr("__qualname__")) {
        (Some(module), Some(name)) => format!("{module}.{name}"),
        (None, Some(name)) => name,
        _ => (obj.get_type().name()).map_or_else(|_| "object".to_owned(), |n| n.to_string()),
    }
}

fn type_name(obj: &Bound<'_, PyAny>) -> String {
    qualified_name(obj.get_type().as_any())
}

/// NEWOBJ on a class with positional arguments only: `cls.__new__(cls, *args)`,
/// what `_build.new_object` does, without a Python frame per object (50,000 DCP
/// metadata records make 250,000 objects). `None` for every other case (a stub,
/// not a class, keyword or malformed arguments), which that helper handles.
fn new_plain<'py>(
    cls: &Bound<'py, PyAny>,
    args: &Bound<'py, PyAny>,
    kwargs: &Bound<'py, PyAny>,
) -> Option<PyResult<Bound<'py, PyAny>>> {
    let py = cls.py();
    if !kwargs.is_none() || !cls.is_instance_of::<PyType>() {
        return None;
    }
    let args = args.cast_exact::<PyTuple>().ok()?;
    let with_class: Vec<Bound<'py, PyAny>> = std::iter::once(cls.clone()).chain(args).collect();
    let with_class = PyTuple::new(py, with_class);
    Some(with_class.and_then(|all| cls.getattr(pyo3::intern!(py, "__new__"))?.call1(all)))
}

/// Whether neither `class` nor a base but `object` defines `__setstate__`,
/// `__getattr__` or `__getattribute__`.
fn plain_class<'py>(py: Python<'py>, class: &Bound<'py, PyType>) -> PyResult<bool> {
    let mro = class.getattr(pyo3::intern!(py, "__mro__"))?;
    let mro = mro.cast::<PyTuple>()?;
    for base in mro.iter().take(mro.len().saturating_sub(1)) {
        let names = base.getattr(pyo3::intern!(py, "__dict__"))?;
        for name in ["__setstate__", "__getattr__", "__getattribute__"] {
            if names.contains(name)? {
                return Ok(false);
            }
        }
    }
    Ok(true)
}

/// BUILD with a dict state on an object that takes it plainly: the items set
/// in its `__dict__` one by one, names interned, as `_build.build` (and pickle)
/// does.
fn set_dict_state<'py>(
    obj: &Bound<'py, PyAny>,
    state: &Bound<'py, PyDict>,
) -> PyResult<Bound<'py, PyAny>> {
    let py = obj.py();
    if !state.is_empty() {
        let inst_dict = obj.getattr(pyo3::intern!(py, "__dict__"))?;
        for (key, value) in state.iter() {
            let name = key
                .cast_exact::<PyString>()
                .ok()
                .and_then(|k| k.to_str().ok());
            match name {
                Some(name) => inst_dict.set_item(PyString::intern(py, name), value)?,
                None => inst_dict.set_item(key, value)?,
            }
        }
    }
    Ok(py.None().into_bound(py))
}

/// The objects a backend makes for torch's kinds of value. Without torch, its
/// values are plain Python ones (a dtype's name, a size as a tuple): the
/// defaults, which the torch backend replaces.
pub trait Tensors<'a, 'py> {
    /// A built-in global itself: a dtype, a class, a rebuild function...
    fn builtin(&self, b: &Builder<'a, 'py>, builtin: Builtin) -> PyResult<Bound<'py, PyAny>> {
        plain_builtin(b, builtin)
    }
    /// `torch.Size(dims)`.
    fn size(&self, b: &Builder<'a, 'py>, dims: &[i64]) -> PyResult<Bound<'py, PyAny>> {
        Ok(PyTuple::new(b.py, dims.iter().copied())?.into_any())
    }
    /// `torch.device(device)`.
    fn device(&self, b: &Builder<'a, 'py>, device: &str) -> PyResult<Bound<'py, PyAny>> {
        Ok(PyString::new(b.py, device).into_any())
    }
    fn layout(&self, b: &Builder<'a, 'py>, layout: Layout) -> PyResult<Bound<'py, PyAny>> {
        Ok(PyString::new(b.py, layout.name()).into_any())
    }
    /// A storage returned as a value of its own (`t.storage()` pickled at top level).
    fn storage(&self, b: &Builder<'a, 'py>, id: StorageId) -> PyResult<Bound<'py, PyAny>>;
    fn tensor(&self, b: &Builder<'a, 'py>, id: TensorId) -> PyResult<Bound<'py, PyAny>>;
    /// The nodes a tensor needs built before it.
    fn children(&self, t: &TensorNode) -> Vec<NodeId> {
        tensor_children(t)
    }
    /// Whether a tensor is what makes a dict key unhashable (numpy arrays are).
    fn arrays_unhashable(&self) -> bool {
        false
    }
}

/// The globals torch's objects stand for, as Python without torch has them:
/// names, and Python's own classes; anything else is refused, naming torch.
fn plain_builtin<'py>(b: &Builder<'_, 'py>, builtin: Builtin) -> PyResult<Bound<'py, PyAny>> {
    let py = b.py;
    match builtin {
        Builtin::Dtype(d) => Ok(PyString::new(py, d.name()).into_any()),
        Builtin::QScheme(q) => Ok(PyString::new(py, q.name()).into_any()),
        Builtin::OrderedDict => py.import("collections")?.getattr("OrderedDict"),
        Builtin::Counter => py.import("collections")?.getattr("Counter"),
        // Python's own, not torch's: the same objects in either backend.
        Builtin::Set | Builtin::Complex | Builtin::ByteArray | Builtin::Bytes => {
            let full = builtin.full_name();
            py.import("builtins")?
                .getattr(full.trim_start_matches("builtins."))
        }
        Builtin::CodecsEncode => py.import("_codecs")?.getattr("encode"),
        other => Err(b.unsupported(format!(
            "the numpy backend cannot represent the object {}; load with backend='torch'",
            other.full_name()
        ))),
    }
}

/// Every node a tensor's construction refers to.
pub fn tensor_children(t: &TensorNode) -> Vec<NodeId> {
    match &t.kind {
        TensorKind::Dense(_) | TensorKind::Empty { .. } | TensorKind::Meta { .. } => Vec::new(),
        TensorKind::Quantized { params, .. } => match params {
            QParams::PerTensor { .. } => Vec::new(),
            QParams::PerChannel {
                scales,
                zero_points,
                ..
            } => vec![*scales, *zero_points],
        },
        TensorKind::Sparse { parts, .. } => parts.to_vec(),
        TensorKind::Nested {
            buffer,
            sizes,
            strides,
            offsets,
        } => vec![*buffer, *sizes, *strides, *offsets],
        TensorKind::Parameter { data, state } => {
            [Some(*data), *state].into_iter().flatten().collect()
        }
        TensorKind::FromType { base, cls, state } => vec![*base, *cls, *state],
        TensorKind::TorchCall { args, .. } => vec![*args],
    }
}
