//! The arena that holds every value the VM creates, with the accounting that
//! keeps it within the limits.

use crate::error::{check_limit, Error, Location};
use crate::limits::{Limit, Limits};
use crate::value::node::{DictClass, DictId, DictNode, Domain, Node, NodeId, Span};

static EMPTY_DICT: DictNode = DictNode::empty();

/// Slots of `shared_slot`: None, False, True, the empty tuple, and the ints
/// CPython caches (-5 to 256).
const SHARED_SLOTS: usize = 4 + 262;

/// Where `push_constant` keeps the node of `node` if Python has one object for
/// its value whatever made it, so the arena needs one node for it too: a
/// `.metadata` of 50,000 tensors spells 800,000 of them (the ints of its shapes,
/// the empty argument tuples of its objects). Such values are immutable and hold no
/// references, so no rule can tell one use from another.
fn shared_slot<D>(node: &Node<D>) -> Option<usize> {
    match node {
        Node::None => Some(0),
        Node::Bool(b) => Some(1 + usize::from(*b)),
        Node::Tuple(span) if span.is_empty() => Some(3),
        Node::Int(i @ -5..=256) => usize::try_from(i + 5).ok().map(|i| i + 4),
        _ => None,
    }
}

/// The arena: every node, plus the accounting that keeps it bounded.
#[derive(Debug)]
pub struct Arena<D: Domain> {
    nodes: Vec<Node<D>>,
    /// Payloads of str, bytes and bytearray nodes.
    bytes: Vec<u8>,
    /// Items of tuple nodes.
    ids: Vec<NodeId>,
    dicts: Vec<DictNode>,
    /// The domain's bulky records.
    pub pool: D::Pool,
    /// Values charged by `charge_nodes`, counted against `max_nodes` with the nodes.
    charged: u64,
    /// The node of each value Python has one object for (`shared_slot`), once made.
    shared: [Option<NodeId>; SHARED_SLOTS],
    /// Values given a shared node again, counted against `max_nodes` as the nodes
    /// they would have been.
    reused: u64,
    payload_bytes: u64,
    max_nodes: u64,
    max_payload_bytes: u64,
    max_container_len: u64,
}

impl<D: Domain> Arena<D> {
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
            pool: D::Pool::default(),
            charged: 0,
            shared: [None; SHARED_SLOTS],
            reused: 0,
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
        // About one dict (of a tensor's backward hooks) per 64 bytes.
        self.dicts
            .reserve((len / 64).min(MAX_GUESS).saturating_sub(self.dicts.len()));
        D::reserve_for_pickle(&mut self.pool, len);
    }

    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    pub fn push(&mut self, node: Node<D>) -> Result<NodeId, Error> {
        self.check_room_for_a_value()?;
        let n = self.nodes.len() as u64;
        let payload = match &node {
            Node::BigInt(b) => b.len() as u64,
            Node::DecimalInt(s) => s.len() as u64,
            _ => 0,
        };
        if payload > 0 {
            self.charge_payload(payload)?;
        }
        self.nodes.push(node);
        Ok(NodeId::from_index(n as u32))
    }

    /// Whether `max_nodes` lets one more value be made: the nodes, the copies
    /// charged, and the shared nodes given again each count.
    fn check_room_for_a_value(&self) -> Result<(), Error> {
        let made = self.nodes.len() as u64 + self.charged + self.reused;
        check_limit(Limit::Nodes, made + 1, self.max_nodes, Location::default)
    }

    /// `push` for the opcodes that make constants (NONE, the bools, the ints,
    /// EMPTY_TUPLE): a value Python has one object for gets the node it had the
    /// first time, and counts against `max_nodes` as a node of its own would.
    pub fn push_constant(&mut self, node: Node<D>) -> Result<NodeId, Error> {
        let Some(slot) = shared_slot(&node) else {
            return self.push(node);
        };
        if let Some(id) = self.shared.get(slot).copied().flatten() {
            self.check_room_for_a_value()?;
            self.reused += 1;
            return Ok(id);
        }
        let id = self.push(node)?;
        if let Some(cached) = self.shared.get_mut(slot) {
            *cached = Some(id);
        }
        Ok(id)
    }

    /// The empty tuple, shared as `push_constant` shares constants.
    pub fn push_empty_tuple(&mut self) -> Result<NodeId, Error> {
        let span = Span::new(self.ids.len(), 0)
            .ok_or_else(|| Error::limit(Limit::Nodes, u64::from(u32::MAX), Location::default()))?;
        self.push_constant(Node::Tuple(span))
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

    /// An empty arena with the same limits.
    pub(crate) fn empty_like(&self) -> Arena<D> {
        Arena::with_caps(
            self.max_nodes,
            self.max_payload_bytes,
            self.max_container_len,
        )
    }

    /// A copy of `node` from arena `old` whose pooled contents (payload, tuple
    /// items, dict, domain record) now live in this arena; the ids inside still
    /// point into `old` until the caller rewrites them.
    pub(crate) fn adopt(&mut self, old: &Arena<D>, node: &Node<D>) -> Node<D> {
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
            Node::Domain(value) => Node::Domain(value.adopt(&old.pool, &mut self.pool)),
            other => other.clone(),
        }
    }

    /// Push a node made by `adopt`; it was within the limits in its old arena.
    pub(crate) fn push_adopted(&mut self, node: Node<D>) {
        self.nodes.push(node);
    }

    pub(crate) fn items_mut(&mut self, span: Span) -> &mut [NodeId] {
        self.ids.get_mut(span.range()).unwrap_or_default()
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
        let spelled_out = (self.nodes.len() as u64).saturating_add(self.reused);
        let total = spelled_out.saturating_add(copies);
        check_limit(Limit::Nodes, total, self.max_nodes, Location::default)?;
        if copies > spelled_out {
            return Err(Error::limit(Limit::Nodes, spelled_out, Location::default()));
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

    pub fn get(&self, id: NodeId) -> &Node<D> {
        // Ids are only made by `push`, so they are always in range; a stale id from
        // another arena would be a bug in the core, never input-driven.
        match self.nodes.get(id.index()) {
            Some(node) => node,
            None => &Node::Opaque,
        }
    }

    pub fn get_mut(&mut self, id: NodeId) -> Option<&mut Node<D>> {
        self.nodes.get_mut(id.index())
    }

    pub fn nodes(&self) -> &[Node<D>] {
        &self.nodes
    }

    /// The domain value of node `id`, if it is one.
    pub fn domain(&self, id: NodeId) -> Option<&D> {
        match self.get(id) {
            Node::Domain(d) => Some(d),
            _ => None,
        }
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
