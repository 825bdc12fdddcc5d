//! Keeping only what the root reaches. The VM's arena holds every value the
//! pickle made on its way, and most of them are scaffolding: the ints of shapes,
//! persistent-id tuples, argument tuples, the empty hook dicts of every tensor.
//! A 50,000-tensor state dict makes 1.6 million nodes of which 100,000 are
//! reachable; the bindings keep the arena alive while they build Python objects,
//! so it is compacted first and the scaffolding freed.

use crate::value::{Arena, Constructor, Domain, Mutation, Node, NodeId};

const UNSEEN: u32 = u32::MAX;

/// A new arena with the nodes `root` reaches, in breadth-first order, and the new
/// id of `root` (always the first).
pub fn compact<D: Domain>(old: &Arena<D>, root: NodeId) -> (Arena<D>, NodeId) {
    let mut new = old.empty_like();
    let mut new_id = vec![UNSEEN; old.len()];
    let mut order = vec![root];
    if let Some(slot) = new_id.get_mut(root.index()) {
        *slot = 0;
    }
    let mut next = 0;
    while let Some(&old_node) = order.get(next) {
        next += 1;
        let mut node = new.adopt(old, old.get(old_node));
        let mut visit = |id: &mut NodeId| {
            let Some(slot) = new_id.get_mut(id.index()) else {
                return;
            };
            if *slot == UNSEEN {
                *slot = order.len() as u32;
                order.push(*id);
            }
            *id = NodeId::from_index(*slot);
        };
        new.for_each_ref_mut(&mut node, &mut visit);
        new.push_adopted(node);
    }
    (new, NodeId::from_index(0))
}

impl<D: Domain> Arena<D> {
    /// Call `f` on every node id stored in `node` (whose pooled contents are in
    /// this arena), letting it rewrite them.
    fn for_each_ref_mut(&mut self, node: &mut Node<D>, f: &mut impl FnMut(&mut NodeId)) {
        match node {
            Node::Tuple(span) => self.items_mut(*span).iter_mut().for_each(&mut *f),
            Node::List(items) => items.iter_mut().for_each(&mut *f),
            Node::Dict(_, d) => {
                if let Some(d) = self.dict_mut(*d) {
                    d.items.iter_mut().for_each(|(k, v)| {
                        f(k);
                        f(v);
                    });
                    d.state.iter_mut().for_each(&mut *f);
                    if let Some((base, _)) = &mut d.base {
                        f(base);
                    }
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
}
