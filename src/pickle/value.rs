//! The arena that holds every value the VM creates. Values refer to each other by
//! [`NodeId`], so the memo and shared references cost O(1) and dropping the arena
//! is flat, however deep the structure.

use crate::error::{check_limit, Error, Location};
use crate::limits::{Limit, Limits};
use crate::pickle::globals::Global;
use crate::torch::numpy::{NdArrayNode, NpDtype};
use crate::torch::tensor::{Layout, StorageId, TensorKind, TensorNode};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct NodeId(u32);

impl NodeId {
    pub fn index(self) -> usize {
        self.0 as usize
    }

    pub(crate) fn from_index(index: u32) -> NodeId {
        NodeId(index)
    }
}

/// A run of bytes (str, bytes, bytearray payloads) or of ids (tuple items) in one
/// of the arena's pools: one allocation for all of them instead of one each.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Span {
    start: u32,
    len: u32,
}

impl Span {
    /// A span of `len` items starting at `start`, when both fit the 32-bit
    /// offsets that keep a node at 16 bytes.
    fn new(start: usize, len: usize) -> Option<Span> {
        let end = start.checked_add(len)?;
        u32::try_from(end).ok()?;
        Some(Span {
            start: start as u32,
            len: len as u32,
        })
    }

    fn range(self) -> std::ops::Range<usize> {
        let start = self.start as usize;
        start..start + self.len as usize
    }

    pub fn len(self) -> usize {
        self.len as usize
    }

    pub fn is_empty(self) -> bool {
        self.len == 0
    }
}

/// A dict node's contents, in the arena's dict pool.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DictId(u32);

/// A tensor node's description, in the arena's tensor pool.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TensorId(u32);

impl TensorId {
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

/// Which Python class a dict node becomes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DictClass {
    Dict,
    OrderedDict,
    Counter,
}

/// A dict is an append-only log of `(key, value)` assignments; replaying it in order
/// gives Python's semantics for repeated keys. `base` is a snapshot of another dict
/// (its id and log length at the time), so `Counter(d)` costs O(1) however often
/// the file passes the same `d`.
#[derive(Debug, Clone, PartialEq)]
pub struct DictNode {
    pub base: Option<(NodeId, usize)>,
    /// Items the snapshot `base` holds in all (its own base's included).
    pub inherited: u64,
    pub items: Vec<(NodeId, NodeId)>,
    /// BUILD states applied to the object (`_metadata` of a state dict), in order.
    pub state: Vec<NodeId>,
}

/// A set (or frozenset); `base` is a snapshot of a list (`set(list)`), or of another set.
#[derive(Debug, Clone, PartialEq)]
pub struct SetNode {
    pub frozen: bool,
    pub base: Option<(NodeId, usize)>,
    /// Items the snapshot `base` holds in all (its own base's included).
    pub inherited: u64,
    pub items: Vec<NodeId>,
}

/// How an instance of a user-allowlisted class comes into being.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Constructor {
    /// `func(*args)`: REDUCE, INST and OBJ.
    Call { func: NodeId, args: NodeId },
    /// `cls.__new__(cls, *args, **kwargs)`: NEWOBJ and NEWOBJ_EX.
    New {
        cls: NodeId,
        args: NodeId,
        kwargs: Option<NodeId>,
    },
}

/// An object made by a user-allowlisted callable; the bindings replay its
/// construction, then its BUILDs, APPENDs and SETITEMs, in the order the file gave them.
#[derive(Debug, Clone, PartialEq)]
pub struct ObjectNode {
    pub constructor: Constructor,
    pub mutations: Vec<Mutation>,
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Mutation {
    Build(NodeId),
    Append(NodeId),
    SetItem(NodeId, NodeId),
}

/// One value. Anything longer than eight bytes lives in a pool or a box, so a
/// node is 16 bytes: a state dict makes about thirty per tensor.
#[derive(Debug, Clone, PartialEq)]
pub enum Node {
    None,
    Bool(bool),
    Int(i64),
    /// An int beyond i64, as two's-complement little-endian bytes.
    BigInt(Box<Vec<u8>>),
    /// An int beyond i64 written as decimal text (protocol 0).
    DecimalInt(Box<String>),
    Float(f64),
    Complex(Box<(f64, f64)>),
    /// UTF-8 text; may hold lone surrogates, as pickle's `surrogatepass` allows.
    Str(Span),
    Bytes(Span),
    ByteArray(Span),
    Tuple(Span),
    List(Box<Vec<NodeId>>),
    Dict(DictClass, DictId),
    Set(Box<SetNode>),
    /// An allowlisted global itself: a class, a function, a dtype, a storage type...
    Global(Global),
    /// `torch.Size`.
    Size(Box<Vec<i64>>),
    /// `torch.device(...)`: the device string.
    Device(Box<String>),
    /// A layout from `torch.serialization._get_layout`.
    Layout(Layout),
    /// A storage named by a persistent id.
    Storage(StorageId),
    /// Any kind of tensor, or a Parameter.
    Tensor(TensorId),
    /// An instance of a user-allowlisted class.
    Object(Box<ObjectNode>),
    /// A numpy array rebuilt from its raw bytes.
    NdArray(Box<NdArrayNode>),
    /// A plain numpy dtype.
    NpDtype(NpDtype),
    /// A numpy scalar: its dtype and a bytes node of exactly its size.
    NpScalar(NpDtype, NodeId),
    /// A value the scanner could not build (scan mode only).
    Opaque,
}

#[cfg(target_pointer_width = "64")]
const _: () = assert!(std::mem::size_of::<Node>() == 16);

impl Node {
    pub fn kind_name(&self) -> &'static str {
        match self {
            Node::None => "NoneType",
            Node::Bool(_) => "bool",
            Node::Int(_) | Node::BigInt(_) | Node::DecimalInt(_) => "int",
            Node::Float(_) => "float",
            Node::Complex(..) => "complex",
            Node::Str(_) => "str",
            Node::Bytes(_) => "bytes",
            Node::ByteArray(_) => "bytearray",
            Node::Tuple(_) => "tuple",
            Node::List(_) => "list",
            Node::Dict(class, _) => match class {
                DictClass::Dict => "dict",
                DictClass::OrderedDict => "collections.OrderedDict",
                DictClass::Counter => "collections.Counter",
            },
            Node::Set(s) if s.frozen => "frozenset",
            Node::Set(_) => "set",
            Node::Global(_) => "global",
            Node::Size(_) => "torch.Size",
            Node::Device(_) => "torch.device",
            Node::Layout(_) => "torch.layout",
            Node::Storage(_) => "torch.storage.TypedStorage",
            Node::Tensor(_) => "torch.Tensor",
            Node::Object(_) => "object",
            Node::NdArray(_) => "numpy.ndarray",
            Node::NpDtype(_) => "numpy.dtype",
            Node::NpScalar(..) => "numpy scalar",
            Node::Opaque => "opaque",
        }
    }
}

static EMPTY_DICT: DictNode = DictNode {
    base: None,
    inherited: 0,
    items: Vec::new(),
    state: Vec::new(),
};

static NO_TENSOR: TensorNode = TensorNode {
    kind: TensorKind::Empty {
        dtype: crate::torch::dtype::DType::UInt8,
    },
    requires_grad: false,
    conj: false,
    neg: false,
};

/// The arena: every node, plus the accounting that keeps it bounded.
#[derive(Debug)]
pub struct Arena {
    nodes: Vec<Node>,
    /// Payloads of str, bytes and bytearray nodes.
    bytes: Vec<u8>,
    /// Items of tuple nodes.
    ids: Vec<NodeId>,
    dicts: Vec<DictNode>,
    tensors: Vec<TensorNode>,
    /// Values charged by `charge_nodes`, counted against `max_nodes` with the nodes.
    charged: u64,
    payload_bytes: u64,
    max_nodes: u64,
    max_payload_bytes: u64,
    max_container_len: u64,
}

impl Arena {
    pub fn new(limits: &Limits) -> Self {
        Arena::with_caps(
            limits.max_nodes.min(u64::from(u32::MAX)),
            limits.max_payload_bytes,
            limits.max_container_len,
        )
    }

    fn with_caps(max_nodes: u64, max_payload_bytes: u64, max_container_len: u64) -> Self {
        Arena {
            nodes: Vec::new(),
            bytes: Vec::new(),
            ids: Vec::new(),
            dicts: Vec::new(),
            tensors: Vec::new(),
            charged: 0,
            payload_bytes: 0,
            max_nodes,
            max_payload_bytes,
            max_container_len,
        }
    }

    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    /// Make room for what a pickle of `len` bytes usually builds, so the node and
    /// id vectors do not copy themselves while they grow. torch's state dicts
    /// make about one node per two bytes and one tuple item per four; the guess
    /// is capped, and only reserves address space until it is written.
    pub fn reserve_for_pickle(&mut self, len: usize) {
        const MAX_GUESS: usize = 1 << 22;
        let nodes = (len / 2).min(MAX_GUESS).min(self.max_nodes as usize);
        self.nodes.reserve(nodes.saturating_sub(self.nodes.len()));
        self.ids
            .reserve((len / 4).min(MAX_GUESS).saturating_sub(self.ids.len()));
        // About one tensor, and one dict of backward hooks, per 50 bytes.
        self.tensors
            .reserve((len / 64).min(MAX_GUESS).saturating_sub(self.tensors.len()));
        self.dicts
            .reserve((len / 64).min(MAX_GUESS).saturating_sub(self.dicts.len()));
    }

    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    pub fn push(&mut self, node: Node) -> Result<NodeId, Error> {
        let n = self.nodes.len() as u64;
        check_limit(
            Limit::Nodes,
            n + self.charged + 1,
            self.max_nodes,
            Location::default,
        )?;
        let payload = match &node {
            Node::BigInt(b) => b.len() as u64,
            Node::DecimalInt(s) => s.len() as u64,
            _ => 0,
        };
        if payload > 0 {
            self.charge_payload(payload)?;
        }
        self.nodes.push(node);
        Ok(NodeId(n as u32))
    }

    fn push_payload(&mut self, bytes: &[u8]) -> Result<Span, Error> {
        self.charge_payload(bytes.len() as u64)?;
        let span = Span::new(self.bytes.len(), bytes.len()).ok_or_else(|| {
            Error::limit(
                Limit::PayloadBytes,
                u64::from(u32::MAX),
                Location::default(),
            )
        })?;
        self.bytes.extend_from_slice(bytes);
        Ok(span)
    }

    pub fn push_str(&mut self, utf8: &[u8]) -> Result<NodeId, Error> {
        let span = self.push_payload(utf8)?;
        self.push(Node::Str(span))
    }

    pub fn push_bytes(&mut self, bytes: &[u8]) -> Result<NodeId, Error> {
        let span = self.push_payload(bytes)?;
        self.push(Node::Bytes(span))
    }

    pub fn push_bytearray(&mut self, bytes: &[u8]) -> Result<NodeId, Error> {
        let span = self.push_payload(bytes)?;
        self.push(Node::ByteArray(span))
    }

    pub fn push_tuple(&mut self, items: &[NodeId]) -> Result<NodeId, Error> {
        self.check_len(items.len())?;
        let span = Span::new(self.ids.len(), items.len())
            .ok_or_else(|| Error::limit(Limit::Nodes, u64::from(u32::MAX), Location::default()))?;
        self.ids.extend_from_slice(items);
        self.push(Node::Tuple(span))
    }

    pub fn push_dict(&mut self, class: DictClass, dict: DictNode) -> Result<NodeId, Error> {
        let id = DictId(self.dicts.len() as u32);
        let node = self.push(Node::Dict(class, id))?;
        self.dicts.push(dict);
        Ok(node)
    }

    pub fn push_tensor(&mut self, tensor: TensorNode) -> Result<NodeId, Error> {
        let id = TensorId(self.tensors.len() as u32);
        let node = self.push(Node::Tensor(id))?;
        self.tensors.push(tensor);
        Ok(node)
    }

    /// An empty arena with the same limits.
    pub(crate) fn empty_like(&self) -> Arena {
        Arena::with_caps(
            self.max_nodes,
            self.max_payload_bytes,
            self.max_container_len,
        )
    }

    /// A copy of `node` from arena `old` whose pooled contents (payload, tuple
    /// items, dict, tensor) now live in this arena; the ids inside still point
    /// into `old` until the caller rewrites them.
    pub(crate) fn adopt(&mut self, old: &Arena, node: &Node) -> Node {
        // The compacted pools are no bigger than the old ones, whose spans fit.
        let mut copy_payload = |span: Span| {
            let start = self.bytes.len() as u32;
            self.bytes.extend_from_slice(old.payload(span));
            self.payload_bytes += u64::from(span.len);
            Span {
                start,
                len: span.len,
            }
        };
        match node {
            Node::Str(s) => Node::Str(copy_payload(*s)),
            Node::Bytes(b) => Node::Bytes(copy_payload(*b)),
            Node::ByteArray(b) => Node::ByteArray(copy_payload(*b)),
            Node::Tuple(span) => {
                let start = self.ids.len() as u32;
                self.ids.extend_from_slice(old.items(*span));
                Node::Tuple(Span {
                    start,
                    len: span.len,
                })
            }
            Node::Dict(class, d) => {
                let id = DictId(self.dicts.len() as u32);
                self.dicts.push(old.dict(*d).clone());
                Node::Dict(*class, id)
            }
            Node::Tensor(t) => {
                let id = TensorId(self.tensors.len() as u32);
                self.tensors.push(old.tensor(*t).clone());
                Node::Tensor(id)
            }
            other => other.clone(),
        }
    }

    /// Push a node made by `adopt`; it was within the limits in its old arena.
    pub(crate) fn push_adopted(&mut self, node: Node) {
        self.nodes.push(node);
    }

    pub(crate) fn items_mut(&mut self, span: Span) -> &mut [NodeId] {
        self.ids.get_mut(span.range()).unwrap_or_default()
    }

    pub(crate) fn tensor_mut(&mut self, id: TensorId) -> Option<&mut TensorNode> {
        self.tensors.get_mut(id.0 as usize)
    }

    /// The contents of a dict node. Ids come only from `push_dict`, so they are in
    /// range; an empty dict stands in for a stale one rather than a panic.
    pub fn dict(&self, id: DictId) -> &DictNode {
        self.dicts.get(id.0 as usize).unwrap_or(&EMPTY_DICT)
    }

    pub fn dict_mut(&mut self, id: DictId) -> Option<&mut DictNode> {
        self.dicts.get_mut(id.0 as usize)
    }

    /// The dict contents of node `id`, if it is a dict.
    pub fn as_dict(&self, id: NodeId) -> Option<&DictNode> {
        match self.get(id) {
            Node::Dict(_, d) => Some(self.dict(*d)),
            _ => None,
        }
    }

    pub fn tensor(&self, id: TensorId) -> &TensorNode {
        self.tensors.get(id.0 as usize).unwrap_or(&NO_TENSOR)
    }

    /// Every tensor node, in the order the file made them.
    pub fn tensors(&self) -> impl Iterator<Item = (TensorId, &TensorNode)> {
        self.tensors
            .iter()
            .enumerate()
            .map(|(i, t)| (TensorId(i as u32), t))
    }

    /// The payload of a str, bytes or bytearray node.
    pub fn payload(&self, span: Span) -> &[u8] {
        self.bytes.get(span.range()).unwrap_or_default()
    }

    /// The items of a tuple node.
    pub fn items(&self, span: Span) -> &[NodeId] {
        self.ids.get(span.range()).unwrap_or_default()
    }

    /// Charge `n` values that will be built without nodes of their own: the items a
    /// snapshot (`Counter(d)`, `set(l)`) copies when it becomes a Python object. A
    /// file may pass one big container to many such calls, so copies are paid for:
    /// they count against `max_nodes`, and may not outnumber the values the file
    /// itself spelled out, which keeps what is built linear in the file's size.
    pub fn charge_nodes(&mut self, n: u64) -> Result<(), Error> {
        let copies = self.charged.saturating_add(n);
        let total = (self.nodes.len() as u64).saturating_add(copies);
        check_limit(Limit::Nodes, total, self.max_nodes, Location::default)?;
        if copies > self.nodes.len() as u64 {
            return Err(Error::limit(
                Limit::Nodes,
                self.nodes.len() as u64,
                Location::default(),
            ));
        }
        self.charged = copies;
        Ok(())
    }

    /// Bytes of str, bytes and bytearray payloads so far.
    pub fn payload_bytes(&self) -> u64 {
        self.payload_bytes
    }

    /// Values charged for copies (`charge_nodes`).
    pub fn charged(&self) -> u64 {
        self.charged
    }

    /// Charge payload bytes before they are allocated.
    pub fn charge_payload(&mut self, bytes: u64) -> Result<(), Error> {
        let total = self.payload_bytes.saturating_add(bytes);
        check_limit(
            Limit::PayloadBytes,
            total,
            self.max_payload_bytes,
            Location::default,
        )?;
        self.payload_bytes = total;
        Ok(())
    }

    /// Payload bytes still allowed before `max_payload_bytes`.
    pub fn payload_left(&self) -> u64 {
        self.max_payload_bytes.saturating_sub(self.payload_bytes)
    }

    /// Check a container length (after growth) against `max_container_len`.
    pub fn check_len(&self, len: usize) -> Result<(), Error> {
        check_limit(
            Limit::ContainerLen,
            len as u64,
            self.max_container_len,
            Location::default,
        )
    }

    pub fn get(&self, id: NodeId) -> &Node {
        // Ids are only made by `push`, so they are always in range; a stale id from
        // another arena would be a bug in the core, never input-driven.
        match self.nodes.get(id.index()) {
            Some(node) => node,
            None => &Node::Opaque,
        }
    }

    pub fn get_mut(&mut self, id: NodeId) -> Option<&mut Node> {
        self.nodes.get_mut(id.index())
    }

    pub fn nodes(&self) -> &[Node] {
        &self.nodes
    }

    pub fn str(&self, id: NodeId) -> Option<&[u8]> {
        match self.get(id) {
            Node::Str(s) => Some(self.payload(*s)),
            _ => None,
        }
    }

    /// The payload of a bytes or bytearray node.
    pub fn bytes(&self, id: NodeId) -> Option<&[u8]> {
        match self.get(id) {
            Node::Bytes(b) | Node::ByteArray(b) => Some(self.payload(*b)),
            _ => None,
        }
    }

    pub fn int(&self, id: NodeId) -> Option<i64> {
        match self.get(id) {
            Node::Int(i) => Some(*i),
            Node::Bool(b) => Some(i64::from(*b)),
            _ => None,
        }
    }

    pub fn tuple(&self, id: NodeId) -> Option<&[NodeId]> {
        match self.get(id) {
            Node::Tuple(items) => Some(self.items(*items)),
            _ => None,
        }
    }

    /// The items of a list as they stand now (for snapshots).
    pub fn list_len(&self, id: NodeId) -> Option<usize> {
        match self.get(id) {
            Node::List(items) => Some(items.len()),
            _ => None,
        }
    }
}
