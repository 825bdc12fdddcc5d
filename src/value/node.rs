//! The values a pickle makes, as nodes of an [`Arena`](super::Arena): Python's
//! own data model (numbers, strings, containers, objects made by calls), plus one
//! variant for what a [`Domain`] adds (torch's tensors, storages, dtypes...).

use std::fmt;

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
    pub(crate) start: u32,
    pub(crate) len: u32,
}

impl Span {
    /// A span of `len` items starting at `start`, when both fit the 32-bit
    /// offsets that keep a node at 16 bytes.
    pub(crate) fn new(start: usize, len: usize) -> Option<Span> {
        let end = start.checked_add(len)?;
        u32::try_from(end).ok()?;
        Some(Span {
            start: start as u32,
            len: len as u32,
        })
    }

    pub(crate) fn range(self) -> std::ops::Range<usize> {
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
pub struct DictId(pub(crate) u32);

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
    pub items: Vec<(NodeId, NodeId)>,
    /// What few dicts have, out of line: an object's state makes a dict, and a
    /// `.metadata` of 50,000 tensors makes 200,000 of them.
    rare: Option<Box<RareDictParts>>,
}

#[derive(Debug, Clone, PartialEq, Default)]
struct RareDictParts {
    base: Option<(NodeId, usize)>,
    /// Items the snapshot `base` holds in all (its own base's included).
    inherited: u64,
    /// BUILD states applied to the object (`_metadata` of a state dict), in order.
    state: Vec<NodeId>,
}

impl DictNode {
    pub const fn empty() -> DictNode {
        DictNode {
            items: Vec::new(),
            rare: None,
        }
    }

    /// A dict that starts as a snapshot of `base` (seeing `inherited` items in
    /// all), with `items` of its own.
    pub fn snapshot(
        base: Option<(NodeId, usize)>,
        inherited: u64,
        items: Vec<(NodeId, NodeId)>,
    ) -> DictNode {
        let rare = (base.is_some() || inherited > 0).then(|| {
            Box::new(RareDictParts {
                base,
                inherited,
                state: Vec::new(),
            })
        });
        DictNode { items, rare }
    }

    pub fn base(&self) -> Option<(NodeId, usize)> {
        self.rare.as_ref().and_then(|r| r.base)
    }

    pub fn inherited(&self) -> u64 {
        self.rare.as_ref().map_or(0, |r| r.inherited)
    }

    pub fn state(&self) -> &[NodeId] {
        self.rare.as_ref().map_or(&[], |r| &r.state)
    }

    pub fn push_state(&mut self, state: NodeId) {
        self.rare.get_or_insert_default().state.push(state);
    }

    /// Call `f` on every node id the dict holds: items, states and base.
    pub fn for_each_ref_mut(&mut self, f: &mut impl FnMut(&mut NodeId)) {
        self.items.iter_mut().for_each(|(k, v)| {
            f(k);
            f(v);
        });
        if let Some(rare) = &mut self.rare {
            rare.state.iter_mut().for_each(&mut *f);
            if let Some((base, _)) = &mut rare.base {
                f(base);
            }
        }
    }
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

/// How an object made by a callable the rules allow comes into being.
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

/// An object made by a callable; whoever builds it replays its construction,
/// then its BUILDs, APPENDs and SETITEMs, in the order the file gave them.
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

/// What a library built on pickle adds to Python's values: its own kinds of
/// node, and a pool for the bulky records they refer to.
pub trait Domain: Clone + fmt::Debug + PartialEq + Sized {
    /// Records too big for a node (torch's tensor descriptions), kept in the arena.
    type Pool: Default + fmt::Debug;

    /// The Python type name, for error messages.
    fn kind_name(&self) -> &'static str;

    /// Copy what this value keeps in `old`'s pool into `new`'s, returning the
    /// value that refers to the copy (compaction).
    fn adopt(&self, old: &Self::Pool, new: &mut Self::Pool) -> Self;

    /// Call `f` on every node id the value holds, in itself or in its pooled record.
    fn for_each_ref_mut(&mut self, pool: &mut Self::Pool, f: &mut impl FnMut(&mut NodeId));

    /// Make room in the pool for what a pickle of `len` bytes usually builds.
    fn reserve_for_pickle(_pool: &mut Self::Pool, _len: usize) {}
}

/// One value. Anything longer than eight bytes lives in a pool or a box, so a
/// node is 16 bytes: a state dict makes about thirty per tensor.
#[derive(Debug, Clone, PartialEq)]
pub enum Node<D> {
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
    /// An object made by calling something the rules allow.
    Object(Box<ObjectNode>),
    /// A value that was not built: a refused call, recorded and gone past.
    Opaque,
    /// A value of the library the pickle was written by.
    Domain(D),
}

impl<D: Domain> Node<D> {
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
            Node::Object(_) => "object",
            Node::Opaque => "opaque",
            Node::Domain(d) => d.kind_name(),
        }
    }
}
