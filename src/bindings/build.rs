//! Turning a validated checkpoint into Python objects in one attached pass: the
//! arena is walked with an explicit stack (so no depth overflows anything), every
//! node is built once and cached (so shared objects and storages stay shared), and
//! the only callables are torch's, numpy's and the user's allowlisted ones.

#![allow(unsafe_code)]

use std::cell::RefCell;

use pyo3::prelude::*;
use pyo3::types::{
    PyByteArray, PyBytes, PyComplex, PyDict, PyFrozenSet, PyList, PySet, PyString, PyTuple,
};

use crate::bindings::errors::wrap_build_error;
use crate::bindings::numpy_api::NumpyApi;
use crate::bindings::storages::{DimsTuples, StorageObject, TorchStorage};
use crate::bindings::torch_api::TorchApi;
use crate::checkpoint::{Checkpoint, Format, StorageData};
use crate::torch::dtype::DType;
use crate::torch::policy::{Builtin, Global};
use crate::torch::tensor::{Dense, Dims, QParams, StorageId, TensorKind, TensorNode};
use crate::torch::value::{Arena, Node, TensorId, Torch};
use crate::value::{Constructor, DictClass, Mutation, NodeId};

pub enum Backend<'py> {
    Torch(TorchApi<'py>),
    Numpy(NumpyApi<'py>),
}

pub struct Builder<'a, 'py> {
    pub py: Python<'py>,
    pub checkpoint: &'a Checkpoint,
    pub backend: Backend<'py>,
    pub storages: Vec<Option<StorageObject<'py>>>,
    pub user_objects: Vec<Bound<'py, PyAny>>,
    pub helpers: Bound<'py, PyModule>,
    /// Under a FakeTensorMode: called on every dense tensor to set its fake device.
    pub fake: Option<Bound<'py, PyAny>>,
    /// Describe tensors (dtype, shape, where their bytes are) instead of building them.
    pub inspect: bool,
    /// By tensor index: tensors already made together with their storage, each
    /// taken by the first node that builds it.
    pub premade: RefCell<Vec<Option<Bound<'py, PyAny>>>>,
    cache: Vec<Option<Bound<'py, PyAny>>>,
    in_progress: Vec<bool>,
    pub dims_tuples: RefCell<DimsTuples<'a, 'py>>,
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

fn tuple_of<'py>(py: Python<'py>, dims: &[u64]) -> PyResult<Bound<'py, PyTuple>> {
    PyTuple::new(py, dims.iter().copied())
}

impl<'a, 'py> Builder<'a, 'py> {
    pub fn new(
        py: Python<'py>,
        checkpoint: &'a Checkpoint,
        backend: Backend<'py>,
        storages: Vec<Option<StorageObject<'py>>>,
        user_objects: Vec<Bound<'py, PyAny>>,
        helpers: Bound<'py, PyModule>,
    ) -> Self {
        let n = checkpoint.arena.len();
        Builder {
            py,
            checkpoint,
            backend,
            storages,
            user_objects,
            helpers,
            fake: None,
            inspect: false,
            premade: RefCell::default(),
            cache: vec![None; n],
            in_progress: vec![false; n],
            dims_tuples: RefCell::default(),
        }
    }

    pub(crate) fn node(&self, id: NodeId) -> &'a Node {
        self.checkpoint.arena.get(id)
    }

    fn arena(&self) -> &'a Arena {
        &self.checkpoint.arena
    }

    pub(crate) fn built(&self, id: NodeId) -> PyResult<Bound<'py, PyAny>> {
        match self.cache.get(id.index()).and_then(Option::as_ref) {
            Some(obj) => Ok(obj.clone()),
            None => Err(self.fail(
                id,
                "a value refers to itself through an immutable container",
            )),
        }
    }

    fn fail(&self, id: NodeId, reason: &str) -> PyErr {
        let class = match crate::bindings::errors::classes(self.py) {
            Ok(c) => c.malformed.bind(self.py).clone(),
            Err(e) => return e,
        };
        PyErr::from_type(
            class,
            format!(
                "malformed checkpoint: {reason} (value #{} of {})",
                id.index(),
                self.checkpoint.pickle_entry
            ),
        )
    }

    /// A key Python could not hash. torch's tensors hash by identity, numpy's
    /// arrays not at all: a key holding a tensor is the numpy backend's limit.
    fn key_error(&self, cause: PyErr, key: NodeId, what: &str) -> PyErr {
        let mut pending = vec![key];
        while let Some(id) = pending.pop() {
            match self.node(id) {
                Node::Domain(Torch::Tensor(_)) if matches!(self.backend, Backend::Numpy(_)) => {
                    return self.unsupported(format!(
                        "the numpy backend cannot use an array in a dict key or set item ({what}); load with backend='torch'"
                    ));
                }
                Node::Tuple(items) => pending.extend(self.arena().items(*items)),
                _ => {}
            }
        }
        wrap_build_error(self.py, cause, what)
    }

    fn unsupported(&self, reason: String) -> PyErr {
        let class = match crate::bindings::errors::classes(self.py) {
            Ok(c) => c.unsupported.bind(self.py).clone(),
            Err(e) => return e,
        };
        PyErr::from_type(class, reason)
    }

    fn dims_tuple(&self, dims: &'a [u64]) -> PyResult<Bound<'py, PyTuple>> {
        self.dims_tuples.borrow_mut().get(self.py, dims)
    }

    fn store(&mut self, id: NodeId, obj: Bound<'py, PyAny>) {
        if let Some(slot) = self.cache.get_mut(id.index()) {
            *slot = Some(obj);
        }
    }

    /// Build the object of `root` and everything it reaches.
    pub fn build(mut self, root: NodeId) -> PyResult<Bound<'py, PyAny>> {
        let _paused = crate::bindings::gc::pause(self.py)?;
        let mut stack = vec![Frame::Enter(root)];
        while let Some(frame) = stack.pop() {
            match frame {
                Frame::Enter(id) => self.enter(id, &mut stack)?,
                Frame::Finish(id) => {
                    let obj = self.finish(id)?;
                    self.store(id, obj);
                    if let Some(flag) = self.in_progress.get_mut(id.index()) {
                        *flag = false;
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
        if self.cache.get(id.index()).is_some_and(Option::is_some) {
            return Ok(());
        }
        if self.in_progress.get(id.index()).copied().unwrap_or(false) {
            return Err(self.fail(
                id,
                "a value refers to itself through an immutable container",
            ));
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
        if let Some(flag) = self.in_progress.get_mut(id.index()) {
            *flag = true;
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
                Node::Dict(_, d) => self.arena().dict(*d).base,
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
            // numpy keeps only the tensor of a tensor-with-attributes; building
            // `torch.Tensor` itself would need torch.
            Node::Domain(Torch::Tensor(t)) => {
                match (&self.backend, &self.arena().tensor(*t).kind) {
                    _ if self.inspect => Vec::new(),
                    (Backend::Numpy(_), TensorKind::FromType { base, .. }) => vec![*base],
                    _ => tensor_children(self.arena().tensor(*t)),
                }
            }
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
                self.snapshot_items(d.base, &mut out);
                out.extend(d.items.iter().flat_map(|(k, v)| [*k, *v]));
                out.extend(d.state.iter().copied());
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
                    list.append(self.built(*item)?)?;
                }
            }
            Node::Dict(_, d) => {
                let d = self.arena().dict(*d);
                let mut flat = Vec::new();
                self.snapshot_items(d.base, &mut flat);
                flat.extend(d.items.iter().flat_map(|(k, v)| [*k, *v]));
                for kv in flat.chunks_exact(2) {
                    if let [k, v] = kv {
                        obj.set_item(self.built(*k)?, self.built(*v)?)
                            .map_err(|e| self.key_error(e, *k, "cannot insert a dict item"))?;
                    }
                }
                for state in &d.state {
                    let state = self.built(*state)?;
                    obj.getattr("__dict__")?.call_method1("update", (state,))?;
                }
            }
            Node::Set(_) => {
                let set = obj.cast::<PySet>()?;
                for item in self.fill_children(id) {
                    set.add(self.built(item)?)
                        .map_err(|e| self.key_error(e, item, "cannot add a set item"))?;
                }
            }
            Node::Object(o) => {
                for m in &o.mutations {
                    let result = match m {
                        Mutation::Build(s) => {
                            self.helpers.call_method1("build", (&obj, self.built(*s)?))
                        }
                        Mutation::Append(v) => {
                            self.helpers.call_method1("append", (&obj, self.built(*v)?))
                        }
                        Mutation::SetItem(k, v) => self
                            .helpers
                            .call_method1("setitem", (&obj, self.built(*k)?, self.built(*v)?)),
                    };
                    result?;
                }
            }
            _ => {}
        }
        Ok(())
    }

    /// Build a node whose children are all built.
    fn finish(&self, id: NodeId) -> PyResult<Bound<'py, PyAny>> {
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
                .map_err(|e| wrap_build_error(py, e, "invalid int literal"))?,
            Node::Float(f) => f.into_pyobject(py)?.into_any(),
            Node::Complex(c) => PyComplex::from_doubles(py, c.0, c.1).into_any(),
            Node::Str(bytes) => match std::str::from_utf8(self.arena().payload(*bytes)) {
                Ok(s) => PyString::new(py, s).into_any(),
                Err(_) => PyBytes::new(py, self.arena().payload(*bytes))
                    .call_method1("decode", ("utf-8", "surrogatepass"))
                    .map_err(|e| wrap_build_error(py, e, "invalid string"))?,
            },
            Node::Bytes(b) => PyBytes::new(py, self.arena().payload(*b)).into_any(),
            Node::ByteArray(b) => PyByteArray::new(py, self.arena().payload(*b)).into_any(),
            Node::Tuple(items) => {
                let objs = self
                    .arena()
                    .items(*items)
                    .iter()
                    .map(|i| self.built(*i))
                    .collect::<PyResult<Vec<_>>>()?;
                PyTuple::new(py, objs)?.into_any()
            }
            Node::Set(_) => {
                let objs = self
                    .children(id)
                    .iter()
                    .map(|i| self.built(*i))
                    .collect::<PyResult<Vec<_>>>()?;
                PyFrozenSet::new(py, objs)
                    .map_err(|e| wrap_build_error(py, e, "cannot build a frozenset"))?
                    .into_any()
            }
            Node::Domain(Torch::Global(Global::User(i))) => self
                .user_objects
                .get(*i as usize)
                .cloned()
                .ok_or_else(|| self.fail(id, "unknown user global"))?,
            Node::Domain(Torch::Global(Global::Builtin(b))) => self.builtin(*b)?,
            Node::Domain(Torch::Size(dims)) => match &self.backend {
                Backend::Torch(t) => t.size.call1((PyTuple::new(py, dims.iter().copied())?,))?,
                Backend::Numpy(_) => PyTuple::new(py, dims.iter().copied())?.into_any(),
            },
            Node::Domain(Torch::Device(s)) => match &self.backend {
                Backend::Torch(t) => t
                    .device
                    .call1((s.as_ref(),))
                    .map_err(|e| wrap_build_error(py, e, "invalid device"))?,
                Backend::Numpy(_) => PyString::new(py, s).into_any(),
            },
            Node::Domain(Torch::Layout(l)) => match &self.backend {
                Backend::Torch(t) => t.layout(*l)?,
                Backend::Numpy(_) => PyString::new(py, l.name()).into_any(),
            },
            Node::Domain(Torch::Storage(s)) => self.bare_storage(*s)?,
            Node::Domain(Torch::Tensor(t)) => self.tensor(*t)?,
            Node::Object(o) => {
                let result = match o.constructor {
                    Constructor::Call { func, args } => {
                        let args = self.built(args)?;
                        let args = args
                            .cast::<PyTuple>()
                            .map_err(|_| self.fail(id, "call arguments must be a tuple"))?;
                        self.built(func)?.call1(args)
                    }
                    Constructor::New { cls, args, kwargs } => {
                        let kwargs = match kwargs {
                            Some(k) => self.built(k)?,
                            None => py.None().into_bound(py),
                        };
                        self.helpers.call_method1(
                            "new_object",
                            (self.built(cls)?, self.built(args)?, kwargs),
                        )
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
                let shape = tuple_of(py, &state.shape)?;
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

    fn builtin(&self, b: Builtin) -> PyResult<Bound<'py, PyAny>> {
        let py = self.py;
        match &self.backend {
            Backend::Torch(t) => t.builtin(b),
            Backend::Numpy(_) => match b {
                Builtin::Dtype(d) => Ok(PyString::new(py, d.name()).into_any()),
                Builtin::QScheme(q) => Ok(PyString::new(py, q.name()).into_any()),
                Builtin::OrderedDict | Builtin::Counter => {
                    py.import("collections")?.getattr(match b {
                        Builtin::Counter => "Counter",
                        _ => "OrderedDict",
                    })
                }
                // Python's own, not torch's: the same objects in either backend.
                Builtin::Set | Builtin::Complex | Builtin::ByteArray | Builtin::Bytes => {
                    let full = b.full_name();
                    py.import("builtins")?
                        .getattr(full.trim_start_matches("builtins."))
                }
                Builtin::CodecsEncode => py.import("_codecs")?.getattr("encode"),
                other => Err(self.unsupported(format!(
                    "the numpy backend cannot represent the object {}; load with backend='torch'",
                    other.full_name()
                ))),
            },
        }
    }

    fn storage(&self, id: StorageId) -> PyResult<&StorageObject<'py>> {
        self.storages
            .get(id.index())
            .and_then(Option::as_ref)
            .ok_or_else(|| self.unsupported("storage not prepared".into()))
    }

    fn torch_storage(&self, id: StorageId) -> PyResult<TorchStorage<'py>> {
        self.storage(id)?
            .torch()?
            .ok_or_else(|| self.unsupported("mixed backends".into()))
    }

    /// A storage returned as a value of its own (`t.storage()` pickled at top level).
    fn bare_storage(&self, id: StorageId) -> PyResult<Bound<'py, PyAny>> {
        let storage = self
            .checkpoint
            .storages
            .get(id.index())
            .ok_or_else(|| self.unsupported("unknown storage".into()))?;
        let decl = &storage.decl;
        let legacy_root = self.checkpoint.format == Format::Legacy
            && !matches!(storage.data, StorageData::View { .. });
        let nbytes = decl.nbytes;
        let dtype = decl.dtype;
        if self.inspect {
            let n = nbytes / dtype.itemsize().max(1);
            let dense = Dense {
                storage: id,
                dtype,
                offset: 0,
                shape: Dims::from(&[n][..]),
                stride: Dims::from(&[1][..]),
            };
            return self.describe_tensor(&TensorNode::new(TensorKind::Dense(dense), false), false);
        }
        match &self.backend {
            Backend::Torch(t) => {
                let dtype_obj = t.dtype(dtype)?;
                let (untyped, _) = self.torch_storage(id)?;
                // torch's legacy loader marks each storage it allocates (it then
                // fills it from the file); a view is a slice, and unmarked.
                if legacy_root {
                    untyped.setattr(pyo3::intern!(self.py, "_torch_load_uninitialized"), true)?;
                }
                self.helpers
                    .call_method1("typed_storage", (untyped, dtype_obj))
            }
            Backend::Numpy(_) => {
                let view_dtype = if dtype.numpy().is_some() {
                    dtype
                } else {
                    DType::UInt8
                };
                let n = nbytes / view_dtype.itemsize();
                let dense = Dense {
                    storage: id,
                    dtype: view_dtype,
                    offset: 0,
                    shape: Dims::from(&[n][..]),
                    stride: Dims::from(&[1][..]),
                };
                self.numpy_dense(&dense)
            }
        }
    }

    fn tensor(&self, id: TensorId) -> PyResult<Bound<'py, PyAny>> {
        let t = self.arena().tensor(id);
        match &self.backend {
            _ if self.inspect => self.describe_tensor(t, false),
            Backend::Torch(_) => {
                let premade = self
                    .premade
                    .borrow_mut()
                    .get_mut(id.index())
                    .and_then(Option::take);
                self.torch_tensor(t, premade)
            }
            Backend::Numpy(_) => self.numpy_tensor(t),
        }
    }

    /// A torch tensor; `premade` is the dense tensor already made with its storage.
    fn torch_tensor(
        &self,
        t: &'a TensorNode,
        premade: Option<Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let py = self.py;
        let Backend::Torch(api) = &self.backend else {
            return Err(self.unsupported("backend".into()));
        };
        let tensor = match &t.kind {
            TensorKind::Dense(d) => {
                let out = match premade {
                    Some(out) => out,
                    None => {
                        let (storage, device) = self.torch_storage(d.storage)?;
                        let out = match device {
                            None => api.empty(d.dtype)?,
                            Some(device) => api.empty_on(d.dtype, &device)?,
                        };
                        out.call_method1(
                            pyo3::intern!(py, "set_"),
                            (
                                storage,
                                d.offset,
                                self.dims_tuple(&d.shape)?,
                                self.dims_tuple(&d.stride)?,
                            ),
                        )?;
                        out
                    }
                };
                if t.conj || t.neg {
                    let md = PyDict::new(py);
                    if t.conj {
                        md.set_item("conj", true)?;
                    }
                    if t.neg {
                        md.set_item("neg", true)?;
                    }
                    self.helpers
                        .call_method1("set_tensor_metadata", (&out, md))?;
                }
                if let Some(fake) = &self.fake {
                    fake.call1((&out,))?;
                }
                out
            }
            TensorKind::Empty { dtype } => api.empty(*dtype)?,
            TensorKind::Meta {
                dtype,
                shape,
                stride,
            } => {
                let dtype = api.dtype(*dtype)?;
                self.helpers.call_method1(
                    "meta_tensor",
                    (dtype, tuple_of(py, shape)?, tuple_of(py, stride)?),
                )?
            }
            TensorKind::Quantized { dense, params } => {
                let (storage, _) = self.torch_storage(dense.storage)?;
                let dtype = api.dtype(dense.dtype)?;
                let qparams = match params {
                    QParams::PerTensor {
                        qscheme,
                        scale,
                        zero_point,
                    } => PyTuple::new(
                        py,
                        [
                            api.torch.getattr(qscheme.name())?,
                            scale.into_pyobject(py)?.into_any(),
                            zero_point.into_pyobject(py)?.into_any(),
                        ],
                    )?,
                    QParams::PerChannel {
                        qscheme,
                        scales,
                        zero_points,
                        axis,
                    } => PyTuple::new(
                        py,
                        [
                            api.torch.getattr(qscheme.name())?,
                            self.built(*scales)?,
                            self.built(*zero_points)?,
                            axis.into_pyobject(py)?.into_any(),
                        ],
                    )?,
                };
                self.helpers.call_method1(
                    "qtensor",
                    (
                        storage,
                        dtype,
                        dense.offset,
                        tuple_of(py, &dense.shape)?,
                        tuple_of(py, &dense.stride)?,
                        qparams,
                    ),
                )?
            }
            TensorKind::Sparse {
                layout,
                parts,
                size,
                coalesced,
            } => {
                let layout = api.layout(*layout)?;
                let parts = parts
                    .iter()
                    .map(|p| self.built(*p))
                    .collect::<PyResult<Vec<_>>>()?;
                self.helpers.call_method1(
                    "sparse_tensor",
                    (
                        layout,
                        PyTuple::new(py, parts)?,
                        tuple_of(py, size)?,
                        *coalesced,
                    ),
                )?
            }
            TensorKind::Nested {
                buffer,
                sizes,
                strides,
                offsets,
            } => self.helpers.call_method1(
                "nested_tensor",
                (
                    self.built(*buffer)?,
                    self.built(*sizes)?,
                    self.built(*strides)?,
                    self.built(*offsets)?,
                ),
            )?,
            TensorKind::Parameter { data, state } => {
                let data = self.built(*data)?;
                let state = match state {
                    Some(s) => self.built(*s)?,
                    None => py.None().into_bound(py),
                };
                return self
                    .helpers
                    .call_method1("parameter", (data, t.requires_grad, state));
            }
            TensorKind::FromType { base, cls, state } => {
                return self.helpers.call_method1(
                    "from_type",
                    (self.built(*base)?, self.built(*cls)?, self.built(*state)?),
                );
            }
            TensorKind::TorchCall { func, args } => {
                let name = Builtin::Rebuild(*func).full_name();
                return self
                    .helpers
                    .call_method1("torch_call", (name, self.built(*args)?));
            }
        };
        if t.requires_grad {
            tensor.call_method1("requires_grad_", (true,))?;
        }
        Ok(tensor)
    }

    fn numpy_tensor(&self, t: &'a TensorNode) -> PyResult<Bound<'py, PyAny>> {
        let py = self.py;
        match &t.kind {
            TensorKind::Dense(d) => {
                let array = self.numpy_dense(d)?;
                if t.conj || t.neg {
                    return self
                        .helpers
                        .call_method1("apply_conj_neg", (array, t.conj, t.neg));
                }
                Ok(array)
            }
            TensorKind::Empty { dtype } => {
                let Backend::Numpy(api) = &self.backend else {
                    return Err(self.unsupported("backend".into()));
                };
                let descr = api
                    .descr(*dtype)?
                    .ok_or_else(|| self.unsupported(no_numpy(*dtype)))?;
                py.import("numpy")?.call_method1("empty", (0, descr))
            }
            TensorKind::Meta {
                dtype,
                shape,
                stride,
            } => self.helpers.call_method1(
                "meta_spec",
                (dtype.name(), tuple_of(py, shape)?, tuple_of(py, stride)?),
            ),
            TensorKind::Parameter { data, .. } => self.built(*data),
            TensorKind::FromType { base, cls, .. } => {
                let plain = matches!(
                    self.node(*cls),
                    Node::Domain(Torch::Global(Global::Builtin(Builtin::Tensor)))
                );
                if plain {
                    self.built(*base)
                } else {
                    Err(self.unsupported("the numpy backend cannot hold a tensor subclass; load with backend='torch'".into()))
                }
            }
            other => Err(self.unsupported(format!(
                "the numpy backend cannot hold a {} tensor; load with backend='torch'",
                TensorNode::new(other.clone(), false).kind_name()
            ))),
        }
    }

    fn numpy_dense(&self, d: &Dense) -> PyResult<Bound<'py, PyAny>> {
        let Backend::Numpy(api) = &self.backend else {
            return Err(self.unsupported("backend".into()));
        };
        let descr = api
            .descr(d.dtype)?
            .ok_or_else(|| self.unsupported(no_numpy(d.dtype)))?;
        let buf = match self
            .storages
            .get(d.storage.index())
            .and_then(Option::as_ref)
        {
            Some(StorageObject::Numpy(b)) => b,
            _ => return Err(self.unsupported("storage not prepared".into())),
        };
        let itemsize = d.dtype.itemsize();
        let strides: Vec<u64> = d.stride.iter().map(|s| s * itemsize).collect();
        // An empty view may start anywhere, even past its storage: it reads nothing,
        // and numpy keeps no offset.
        let byte_offset = if d.shape.contains(&0) {
            0
        } else {
            d.offset
                .checked_mul(itemsize)
                .and_then(|b| usize::try_from(b).ok())
                .ok_or_else(|| self.unsupported("offset too large".into()))?
        };
        // SAFETY: `Dense::validate` checked offset and extent against the storage size
        // when the tensor was created, and the buffer holds exactly that storage.
        unsafe { api.view(&descr, buf, byte_offset, &d.shape, &strides) }
    }
}

fn no_numpy(dtype: DType) -> String {
    format!(
        "numpy has no dtype for torch.{}; load with backend='torch'",
        dtype.name()
    )
}

fn tensor_children(t: &TensorNode) -> Vec<NodeId> {
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
