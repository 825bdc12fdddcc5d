//! The arena that holds every value the VM creates. Values refer to each other by
//! [`NodeId`], so the memo and shared references cost O(1) and dropping the arena
//! is flat, however deep the structure.

use crate::error::{Error, Location};
use crate::limits::{self, Limits};
use crate::pickle::globals::Global;
use crate::torch::numpy::{NdArrayNode, NpDtype};
use crate::torch::tensor::{Layout, StorageId, TensorNode};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct NodeId(u32);

impl NodeId {
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
    pub class: DictClass,
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

#[derive(Debug, Clone, PartialEq)]
pub enum Node {
    None,
    Bool(bool),
    Int(i64),
    /// An int beyond i64, as two's-complement little-endian bytes.
    BigInt(Box<[u8]>),
    /// An int beyond i64 written as decimal text (protocol 0).
    DecimalInt(Box<str>),
    Float(f64),
    Complex(f64, f64),
    /// UTF-8 text; may hold lone surrogates, as pickle's `surrogatepass` allows.
    Str(Box<[u8]>),
    Bytes(Box<[u8]>),
    ByteArray(Box<[u8]>),
    Tuple(Box<[NodeId]>),
    List(Vec<NodeId>),
    Dict(Box<DictNode>),
    Set(Box<SetNode>),
    /// An allowlisted global itself: a class, a function, a dtype, a storage type...
    Global(Global),
    /// `torch.Size`.
    Size(Box<[i64]>),
    /// `torch.device(...)`: the device string.
    Device(Box<str>),
    /// A layout from `torch.serialization._get_layout`.
    Layout(Layout),
    /// A storage named by a persistent id.
    Storage(StorageId),
    /// Any kind of tensor, or a Parameter.
    Tensor(Box<TensorNode>),
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
            Node::Dict(d) => match d.class {
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

/// The arena: every node, plus the accounting that keeps it bounded.
#[derive(Debug)]
pub struct Arena {
    nodes: Vec<Node>,
    /// Values charged by `charge_nodes`, counted against `max_nodes` with the nodes.
    charged: u64,
    payload_bytes: u64,
    max_nodes: u64,
    max_payload_bytes: u64,
    max_container_len: u64,
}

impl Arena {
    pub fn new(limits: &Limits) -> Self {
        Arena {
            nodes: Vec::new(),
            charged: 0,
            payload_bytes: 0,
            max_nodes: limits.max_nodes.min(u64::from(u32::MAX)),
            max_payload_bytes: limits.max_payload_bytes,
            max_container_len: limits.max_container_len,
        }
    }

    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    pub fn push(&mut self, node: Node) -> Result<NodeId, Error> {
        let n = self.nodes.len() as u64;
        limits::check(
            "max_nodes",
            n + self.charged + 1,
            self.max_nodes,
            Location::default,
        )?;
        let payload = match &node {
            Node::Str(b) | Node::Bytes(b) | Node::ByteArray(b) | Node::BigInt(b) => b.len() as u64,
            Node::DecimalInt(s) => s.len() as u64,
            _ => 0,
        };
        if payload > 0 {
            self.charge_payload(payload)?;
        }
        self.nodes.push(node);
        Ok(NodeId(n as u32))
    }

    /// Charge `n` values that will be built without nodes of their own: the items a
    /// snapshot (`Counter(d)`, `set(l)`) copies when it becomes a Python object. A
    /// file may pass one big container to many such calls, so copies are paid for:
    /// they count against `max_nodes`, and may not outnumber the values the file
    /// itself spelled out, which keeps what is built linear in the file's size.
    pub fn charge_nodes(&mut self, n: u64) -> Result<(), Error> {
        let copies = self.charged.saturating_add(n);
        let total = (self.nodes.len() as u64).saturating_add(copies);
        limits::check("max_nodes", total, self.max_nodes, Location::default)?;
        if copies > self.nodes.len() as u64 {
            return Err(Error::Limit {
                limit: "max_nodes",
                max: self.nodes.len() as u64,
                location: Location::default(),
            });
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
        limits::check(
            "max_payload_bytes",
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
        limits::check(
            "max_container_len",
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
            Node::Str(s) => Some(s),
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
            Node::Tuple(items) => Some(items),
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
