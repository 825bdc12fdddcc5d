//! Keeping only what the root reaches. The VM's arena holds every value the
//! pickle made on its way, and most of them are scaffolding: the ints of shapes,
//! persistent-id tuples, argument tuples, the empty hook dicts of every tensor.
//! A 50,000-tensor state dict makes 1.6 million nodes of which 100,000 are
//! reachable; the bindings keep the arena alive while they build Python objects,
//! so it is compacted first and the scaffolding freed.

use crate::pickle::value::{Arena, Constructor, Mutation, Node, NodeId};
use crate::torch::tensor::{QParams, TensorKind};

const UNSEEN: u32 = u32::MAX;

/// A new arena with the nodes `root` reaches, in breadth-first order, and the new
/// id of `root` (always the first).
pub fn compact(old: &Arena, root: NodeId) -> (Arena, NodeId) {
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

impl Arena {
    /// Call `f` on every node id stored in `node` (whose pooled contents are in
    /// this arena), letting it rewrite them.
    fn for_each_ref_mut(&mut self, node: &mut Node, f: &mut impl FnMut(&mut NodeId)) {
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
            Node::Tensor(t) => {
                if let Some(t) = self.tensor_mut(*t) {
                    tensor_refs_mut(&mut t.kind, f);
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
            Node::NdArray(a) => {
                if let Some(state) = &mut a.state {
                    f(&mut state.data);
                }
            }
            Node::NpScalar(_, data) => f(data),
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
            | Node::Global(_)
            | Node::Size(_)
            | Node::Device(_)
            | Node::Layout(_)
            | Node::Storage(_)
            | Node::NpDtype(_)
            | Node::Opaque => {}
        }
    }
}

fn tensor_refs_mut(kind: &mut TensorKind, f: &mut impl FnMut(&mut NodeId)) {
    match kind {
        TensorKind::Dense(_) | TensorKind::Empty { .. } | TensorKind::Meta { .. } => {}
        TensorKind::Quantized { params, .. } => {
            if let QParams::PerChannel {
                scales,
                zero_points,
                ..
            } = params
            {
                f(scales);
                f(zero_points);
            }
        }
        TensorKind::Sparse { parts, .. } => parts.iter_mut().for_each(&mut *f),
        TensorKind::Nested {
            buffer,
            sizes,
            strides,
            offsets,
        } => {
            f(buffer);
            f(sizes);
            f(strides);
            f(offsets);
        }
        TensorKind::Parameter { data, state } => {
            f(data);
            if let Some(s) = state {
                f(s);
            }
        }
        TensorKind::FromType { base, cls, state } => {
            f(base);
            f(cls);
            f(state);
        }
        TensorKind::TorchCall { args, .. } => f(args),
    }
}
