//! Which values refer to which: the one walk over the ids a node holds, which
//! compaction follows, and the count of each value's users, which lets a
//! builder free scaffolding (argument tuples, state dicts) once it is used.

use crate::value::{Arena, Constructor, Domain, Mutation, Node, NodeId};

/// A reference count too high to track, or a value read without a reference of
/// its own: its builder keeps it to the end.
pub const MANY: u8 = u8::MAX;

impl<D: Domain> Arena<D> {
    /// Call `f` on every node id stored in `node` (whose pooled contents are in
    /// this arena), letting it rewrite them.
    pub(crate) fn for_each_ref_mut(&mut self, node: &mut Node<D>, f: &mut impl FnMut(&mut NodeId)) {
        match node {
            Node::Tuple(span) => self.items_mut(*span).iter_mut().for_each(&mut *f),
            Node::List(items) => items.iter_mut().for_each(&mut *f),
            Node::Dict(_, d) => {
                if let Some(d) = self.dict_mut(*d) {
                    d.for_each_ref_mut(f);
                }
            }
            Node::Set(s) => {
                s.items.iter_mut().for_each(&mut *f);
                if let Some((base, _)) = &mut s.base {
                    f(base);
                }
            }
            Node::Object(o) => {
                match &mut o.constructor {
                    Constructor::Call { func, args } => {
                        f(func);
                        f(args);
                    }
                    Constructor::New { cls, args, kwargs } => {
                        f(cls);
                        f(args);
                        if let Some(k) = kwargs {
                            f(k);
                        }
                    }
                }
                for m in &mut o.mutations {
                    match m {
                        Mutation::Build(s) | Mutation::Append(s) => f(s),
                        Mutation::SetItem(k, v) => {
                            f(k);
                            f(v);
                        }
                    }
                }
            }
            Node::Domain(value) => value.for_each_ref_mut(&mut self.pool, f),
            Node::None
            | Node::Bool(_)
            | Node::Int(_)
            | Node::BigInt(_)
            | Node::DecimalInt(_)
            | Node::Float(_)
            | Node::Complex(..)
            | Node::Str(_)
            | Node::Bytes(_)
            | Node::ByteArray(_)
            | Node::Opaque => {}
        }
    }

    /// How many references each node has from other nodes, saturating at
    /// [`MANY`]. The items of a container something was snapshotted from
    /// (`Counter(d)`, `set(l)`) count as [`MANY`]: the snapshot reads them again
    /// without a reference of its own.
    pub fn reference_counts(&mut self) -> Vec<u8> {
        let mut counts = vec![0u8; self.len()];
        let mut bases = Vec::new();
        for index in 0..self.len() {
            let id = NodeId::from_index(index as u32);
            let Some(slot) = self.get_mut(id) else {
                break;
            };
            let mut node = std::mem::replace(slot, Node::None);
            match &node {
                Node::Dict(_, d) => bases.extend(self.dict(*d).base().map(|(base, _)| base)),
                Node::Set(s) => bases.extend(s.base.map(|(base, _)| base)),
                _ => {}
            }
            self.for_each_ref_mut(&mut node, &mut |child: &mut NodeId| {
                if let Some(count) = counts.get_mut(child.index()) {
                    *count = count.saturating_add(1);
                }
            });
            if let Some(slot) = self.get_mut(id) {
                *slot = node;
            }
        }
        let mut pin = |id: &NodeId| {
            if let Some(count) = counts.get_mut(id.index()) {
                *count = MANY;
            }
        };
        for base in bases {
            match self.get(base) {
                Node::Tuple(span) => self.items(*span).iter().for_each(&mut pin),
                Node::List(items) => items.iter().for_each(&mut pin),
                Node::Set(s) => s.items.iter().for_each(&mut pin),
                Node::Dict(_, d) => (self.dict(*d).items.iter()).for_each(|(k, v)| {
                    pin(k);
                    pin(v);
                }),
                _ => {}
            }
        }
        counts
    }
}
