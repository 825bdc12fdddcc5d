//! Save, then load: arbitrary trees must come back equal.

use std::sync::Arc;

use crate::archive::source::Source;
use crate::checkpoint::{self, Checkpoint, LoadOptions};
use crate::pickle::opcodes::*;
use crate::save::{self, zip_writer, StorageRecord};
use crate::torch::TensorKind;
use crate::torch::{Node, Torch};
use crate::value::NodeId;

/// A value a checkpoint can hold, as the round trip builds it.
#[derive(Debug, Clone, PartialEq)]
pub enum Tree {
    None,
    Bool(bool),
    Int(i64),
    Float(f64),
    Str(String),
    Bytes(Vec<u8>),
    Tuple(Vec<Tree>),
    List(Vec<Tree>),
    Dict(Vec<(Key, Tree)>),
    /// A 1-d float32 tensor with its own storage.
    Tensor(Vec<f32>),
}

#[derive(Debug, Clone, PartialEq)]
pub enum Key {
    Str(String),
    Int(i64),
}

/// Nesting deeper than this becomes `None`.
const MAX_DEPTH: usize = 24;

/// A byte reader that never fails: past the end it yields zeros, so every input
/// decodes to some tree, and each node costs at least one input byte.
struct Bytes<'a> {
    data: &'a [u8],
}

impl Bytes<'_> {
    fn exhausted(&self) -> bool {
        self.data.is_empty()
    }

    fn take(&mut self, n: usize) -> Vec<u8> {
        let n = n.min(self.data.len());
        let (head, rest) = self.data.split_at(n);
        self.data = rest;
        head.to_vec()
    }

    fn u8(&mut self) -> u8 {
        self.take(1).first().copied().unwrap_or(0)
    }

    fn array<const N: usize>(&mut self) -> [u8; N] {
        let mut out = [0u8; N];
        for (slot, b) in out.iter_mut().zip(self.take(N)) {
            *slot = b;
        }
        out
    }

    /// A count: one byte, or a two-byte count after 0xff.
    fn count(&mut self) -> usize {
        match self.u8() {
            0xff => usize::from(u16::from_le_bytes(self.array())),
            n => usize::from(n),
        }
    }

    fn int(&mut self) -> i64 {
        match self.u8() % 4 {
            0 => i64::from(self.u8() as i8),
            1 => i64::from(i16::from_le_bytes(self.array())),
            2 => i64::from(i32::from_le_bytes(self.array())),
            _ => i64::from_le_bytes(self.array()),
        }
    }

    fn string(&mut self) -> String {
        let n = self.count();
        String::from_utf8_lossy(&self.take(n)).into_owned()
    }
}

impl Tree {
    /// Decode a tree from fuzzer bytes (deterministic, so corpus files replay).
    pub fn from_bytes(data: &[u8]) -> Tree {
        let mut bytes = Bytes { data };
        let tree = Tree::decode(&mut bytes, 0);
        // Whatever follows the root becomes more siblings, so no input byte is dead.
        if bytes.exhausted() {
            return tree;
        }
        let mut items = vec![tree];
        while !bytes.exhausted() && items.len() < 4096 {
            items.push(Tree::decode(&mut bytes, 1));
        }
        Tree::List(items)
    }

    fn decode(b: &mut Bytes, depth: usize) -> Tree {
        let tag = b.u8();
        let nested = depth < MAX_DEPTH;
        match tag % 10 {
            0 => Tree::None,
            1 => Tree::Bool(b.u8() & 1 == 1),
            2 => Tree::Int(b.int()),
            3 => Tree::Float(f64::from_bits(u64::from_le_bytes(b.array()))),
            4 => Tree::Str(b.string()),
            5 => {
                let n = b.count();
                Tree::Bytes(b.take(n))
            }
            6..=8 if !nested => Tree::None,
            6 | 7 => {
                let n = b.count().min(64);
                let mut items = Vec::with_capacity(n);
                for _ in 0..n {
                    if b.exhausted() {
                        break;
                    }
                    items.push(Tree::decode(b, depth + 1));
                }
                if tag % 10 == 6 {
                    Tree::Tuple(items)
                } else {
                    Tree::List(items)
                }
            }
            8 => {
                let n = b.count().min(64);
                let mut items = Vec::with_capacity(n);
                for _ in 0..n {
                    if b.exhausted() {
                        break;
                    }
                    let key = if b.u8() & 1 == 0 {
                        Key::Str(b.string())
                    } else {
                        Key::Int(b.int())
                    };
                    items.push((key, Tree::decode(b, depth + 1)));
                }
                Tree::Dict(items)
            }
            _ => {
                let n = usize::from(b.u8() % 65);
                let values = (0..n)
                    .map(|_| f32::from_bits(u32::from_le_bytes(b.array())))
                    .collect();
                Tree::Tensor(values)
            }
        }
    }
}

/// A protocol-2 pickle writer, shaped like Python's and torch's `torch.save`.
struct Writer {
    out: Vec<u8>,
    memo: u32,
    /// The float32 payload of each storage, by key.
    storages: Vec<Vec<u8>>,
}

impl Writer {
    fn op(&mut self, op: u8) {
        self.out.push(op);
    }

    fn memoize(&mut self) {
        if let Ok(i) = u8::try_from(self.memo) {
            self.out.extend_from_slice(&[BINPUT, i]);
        } else {
            self.out.push(LONG_BINPUT);
            self.out.extend_from_slice(&self.memo.to_le_bytes());
        }
        self.memo += 1;
    }

    fn global(&mut self, module: &str, name: &str) {
        self.op(GLOBAL);
        self.out.extend_from_slice(module.as_bytes());
        self.out.push(b'\n');
        self.out.extend_from_slice(name.as_bytes());
        self.out.push(b'\n');
        self.memoize();
    }

    fn int(&mut self, v: i64) {
        if let Ok(v) = u8::try_from(v) {
            self.out.extend_from_slice(&[BININT1, v]);
        } else if let Ok(v) = u16::try_from(v) {
            self.op(BININT2);
            self.out.extend_from_slice(&v.to_le_bytes());
        } else if let Ok(v) = i32::try_from(v) {
            self.op(BININT);
            self.out.extend_from_slice(&v.to_le_bytes());
        } else {
            // LONG1 with the shortest two's-complement encoding, as Python writes it.
            let bytes = v.to_le_bytes();
            let mut n = 8;
            while n > 1 {
                let (last, prev) = (bytes[n - 1], bytes[n - 2]);
                if (last == 0 && prev & 0x80 == 0) || (last == 0xff && prev & 0x80 != 0) {
                    n -= 1;
                } else {
                    break;
                }
            }
            self.out.extend_from_slice(&[LONG1, n as u8]);
            self.out.extend_from_slice(&bytes[..n]);
        }
    }

    fn str(&mut self, s: &str) {
        self.op(BINUNICODE);
        self.out.extend_from_slice(&(s.len() as u32).to_le_bytes());
        self.out.extend_from_slice(s.as_bytes());
        self.memoize();
    }

    /// Protocol 2 has no bytes opcode: Python writes `_codecs.encode(latin1 text, 'latin1')`,
    /// or `bytes()` for empty bytes.
    fn bytes(&mut self, b: &[u8]) {
        if b.is_empty() {
            self.global("__builtin__", "bytes");
            self.op(EMPTY_TUPLE);
            self.op(REDUCE);
        } else {
            self.global("_codecs", "encode");
            let text: String = b.iter().map(|&c| char::from(c)).collect();
            self.str(&text);
            self.str("latin1");
            self.op(TUPLE2);
            self.op(REDUCE);
        }
        self.memoize();
    }

    fn tuple(&mut self, items: &[Tree]) {
        match items.len() {
            0 => self.op(EMPTY_TUPLE),
            n @ 1..=3 => {
                for item in items {
                    self.tree(item);
                }
                self.op(TUPLE1 + (n as u8 - 1));
            }
            _ => {
                self.op(MARK);
                for item in items {
                    self.tree(item);
                }
                self.op(TUPLE);
            }
        }
        self.memoize();
    }

    fn list(&mut self, items: &[Tree]) {
        self.op(EMPTY_LIST);
        self.memoize();
        // Python batches appends by 1000; a batch of one is a single APPEND.
        for batch in items.chunks(1000) {
            if let [one] = batch {
                self.tree(one);
                self.op(APPEND);
            } else {
                self.op(MARK);
                for item in batch {
                    self.tree(item);
                }
                self.op(APPENDS);
            }
        }
    }

    fn key(&mut self, key: &Key) {
        match key {
            Key::Str(s) => self.str(s),
            Key::Int(i) => self.int(*i),
        }
    }

    fn dict(&mut self, items: &[(Key, Tree)]) {
        self.op(EMPTY_DICT);
        self.memoize();
        for batch in items.chunks(1000) {
            if let [(k, v)] = batch {
                self.key(k);
                self.tree(v);
                self.op(SETITEM);
            } else {
                self.op(MARK);
                for (k, v) in batch {
                    self.key(k);
                    self.tree(v);
                }
                self.op(SETITEMS);
            }
        }
    }

    /// `torch._utils._rebuild_tensor_v2(storage, 0, (n,), (1,), False, OrderedDict())`
    /// over the persistent id `('storage', torch.FloatStorage, key, 'cpu', n)`.
    fn tensor(&mut self, values: &[f32]) {
        let key = self.storages.len();
        self.storages
            .push(values.iter().flat_map(|v| v.to_le_bytes()).collect());
        let n = values.len() as i64;
        self.global("torch._utils", "_rebuild_tensor_v2");
        self.op(MARK);
        self.op(MARK);
        self.str("storage");
        self.global("torch", "FloatStorage");
        self.str(&key.to_string());
        self.str("cpu");
        self.int(n);
        self.op(TUPLE);
        self.memoize();
        self.op(BINPERSID);
        self.int(0);
        self.int(n);
        self.op(TUPLE1);
        self.memoize();
        self.int(1);
        self.op(TUPLE1);
        self.memoize();
        self.op(NEWFALSE);
        self.global("collections", "OrderedDict");
        self.op(EMPTY_TUPLE);
        self.op(REDUCE);
        self.memoize();
        self.op(TUPLE);
        self.memoize();
        self.op(REDUCE);
        self.memoize();
    }

    fn tree(&mut self, tree: &Tree) {
        match tree {
            Tree::None => self.op(NONE),
            Tree::Bool(true) => self.op(NEWTRUE),
            Tree::Bool(false) => self.op(NEWFALSE),
            Tree::Int(i) => self.int(*i),
            Tree::Float(f) => {
                self.op(BINFLOAT);
                self.out.extend_from_slice(&f.to_be_bytes());
            }
            Tree::Str(s) => self.str(s),
            Tree::Bytes(b) => self.bytes(b),
            Tree::Tuple(items) => self.tuple(items),
            Tree::List(items) => self.list(items),
            Tree::Dict(items) => self.dict(items),
            Tree::Tensor(values) => self.tensor(values),
        }
    }
}

/// `tree` as a protocol-2 pickle, and the bytes of each storage it declares.
pub fn encode_pickle(tree: &Tree) -> (Vec<u8>, Vec<Vec<u8>>) {
    let mut w = Writer {
        out: vec![PROTO, 2],
        memo: 0,
        storages: Vec::new(),
    };
    w.tree(tree);
    w.op(STOP);
    (w.out, w.storages)
}

/// `tree` saved as `torch.save` writes a checkpoint, as one byte buffer.
pub fn save_checkpoint(tree: &Tree) -> Vec<u8> {
    let (pickle, storages) = encode_pickle(tree);
    let records: Vec<StorageRecord> = storages
        .iter()
        .enumerate()
        .map(|(index, bytes)| StorageRecord {
            len: bytes.len() as u64,
            index,
            crc32: save::crc32(bytes),
            reserved: false,
        })
        .collect();
    let records = save::checkpoint_records(pickle, &records, 64, false);
    let (segments, total) = zip_writer::plan("archive", &records, 64, true);
    let mut out = Vec::with_capacity(usize::try_from(total).unwrap_or(0));
    for segment in segments {
        match segment {
            zip_writer::Segment::Bytes(b) => out.extend_from_slice(&b),
            zip_writer::Segment::Buffer(i) => match storages.get(i) {
                Some(b) => out.extend_from_slice(b),
                None => panic!("the plan names buffer {i}, which was never given"),
            },
            zip_writer::Segment::Hole(n) => out.resize(out.len() + n as usize, 0),
        }
    }
    assert_eq!(
        out.len() as u64,
        total,
        "the plan's total differs from its segments"
    );
    out
}

/// Decode a tree from fuzzer bytes, save it, load it and compare.
pub fn round_trip(data: &[u8]) {
    round_trip_tree(&Tree::from_bytes(data));
}

/// Save `tree`, open the archive, and require the same tree and the same tensor
/// bytes back.
pub fn round_trip_tree(tree: &Tree) {
    let file = save_checkpoint(tree);
    let (_, storages) = encode_pickle(tree);
    let ckpt = match checkpoint::open(Arc::new(Source::from_vec(file)), &LoadOptions::default()) {
        Ok(c) => c,
        Err(e) => panic!("a checkpoint we saved does not load: {e}"),
    };
    assert_eq!(ckpt.storages.len(), storages.len(), "storage count differs");
    for (i, expected) in storages.iter().enumerate() {
        let id = crate::torch::StorageId(i as u32);
        let mut buf = vec![0u8; expected.len()];
        if let Err(e) = ckpt.read_storage(id, &mut buf) {
            panic!("storage {i} cannot be read back: {e}");
        }
        assert_eq!(&buf, expected, "storage {i} comes back different");
    }
    let mut next_storage = 0u32;
    compare(&ckpt, ckpt.root, tree, &mut next_storage);
    assert_eq!(next_storage as usize, storages.len());
}

/// The loaded value `id` must be `tree`; tensors are met in save order.
fn compare(ckpt: &Checkpoint, id: NodeId, tree: &Tree, next_storage: &mut u32) {
    let node = ckpt.arena.get(id);
    let mismatch = || -> ! { panic!("loaded {node:?}, saved {tree:?}") };
    match (tree, node) {
        (Tree::None, Node::None) => {}
        (Tree::Bool(a), Node::Bool(b)) if a == b => {}
        (Tree::Int(a), Node::Int(b)) if a == b => {}
        (Tree::Float(a), Node::Float(b)) if a.to_bits() == b.to_bits() => {}
        (Tree::Str(a), Node::Str(b)) if a.as_bytes() == ckpt.arena.payload(*b) => {}
        (Tree::Bytes(a), Node::Bytes(b)) if a.as_slice() == ckpt.arena.payload(*b) => {}
        (Tree::Tuple(items), Node::Tuple(ids)) if items.len() == ids.len() => {
            for (item, id) in items.iter().zip(ckpt.arena.items(*ids)) {
                compare(ckpt, *id, item, next_storage);
            }
        }
        (Tree::List(items), Node::List(ids)) if items.len() == ids.len() => {
            for (item, id) in items.iter().zip(ids.iter()) {
                compare(ckpt, *id, item, next_storage);
            }
        }
        (Tree::Dict(items), Node::Dict(crate::value::DictClass::Dict, d))
            if items.len() == ckpt.arena.dict(*d).items.len()
                && ckpt.arena.dict(*d).base().is_none()
                && ckpt.arena.dict(*d).state().is_empty() =>
        {
            let d = ckpt.arena.dict(*d);
            for ((key, value), (k, v)) in items.iter().zip(d.items.iter()) {
                match (key, ckpt.arena.get(*k)) {
                    (Key::Str(a), Node::Str(b)) if a.as_bytes() == ckpt.arena.payload(*b) => {}
                    (Key::Int(a), Node::Int(b)) if a == b => {}
                    (_, other) => panic!("loaded key {other:?}, saved {key:?}"),
                }
                compare(ckpt, *v, value, next_storage);
            }
        }
        (Tree::Tensor(values), Node::Domain(Torch::Tensor(t))) => {
            let t = ckpt.arena.tensor(*t);
            let TensorKind::Dense(dense) = &t.kind else {
                mismatch()
            };
            let n = values.len() as u64;
            let expected_storage = crate::torch::StorageId(*next_storage);
            *next_storage += 1;
            let ok = !t.requires_grad
                && !t.conj
                && !t.neg
                && dense.storage == expected_storage
                && dense.dtype == crate::torch::DType::Float32
                && dense.offset == 0
                && *dense.shape == [n]
                && *dense.stride == [1];
            if !ok {
                mismatch();
            }
            let Some(s) = ckpt.storage(dense.storage) else {
                mismatch()
            };
            assert_eq!(s.decl.nbytes, n * 4, "storage size differs");
            assert_eq!(&*s.decl.location, "cpu");
            let mut buf = vec![0u8; values.len() * 4];
            if let Err(e) = ckpt.read_storage(dense.storage, &mut buf) {
                panic!("tensor storage cannot be read: {e}");
            }
            let back: Vec<u32> = buf
                .chunks_exact(4)
                .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                .collect();
            let saved: Vec<u32> = values.iter().map(|v| v.to_bits()).collect();
            assert_eq!(back, saved, "tensor values differ (bitwise)");
        }
        _ => mismatch(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_small_tree_round_trips() {
        let tree = Tree::Dict(vec![
            (
                Key::Str("w".into()),
                Tree::Tensor(vec![1.0, f32::NAN, -0.0]),
            ),
            (Key::Int(-7), Tree::Bytes(vec![0, 255, 128])),
            (Key::Int(1 << 40), Tree::Bytes(Vec::new())),
            (
                Key::Str("é".into()),
                Tree::Tuple(vec![
                    Tree::Float(f64::from_bits(0x7ff8_0000_0000_1234)),
                    Tree::Int(i64::MIN),
                    Tree::Tensor(Vec::new()),
                    Tree::List(vec![Tree::None, Tree::Bool(true)]),
                ]),
            ),
        ]);
        round_trip_tree(&tree);
    }
}
