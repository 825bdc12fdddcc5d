//! Keeping only what the root reaches. The VM's arena holds every value the
//! pickle made on its way, and most of them are scaffolding: the ints of shapes,
//! persistent-id tuples, argument tuples, the empty hook dicts of every tensor.
//! A 50,000-tensor state dict makes 1.6 million nodes of which 100,000 are
//! reachable; the bindings keep the arena alive while they build Python objects,
//! so it is compacted first and the scaffolding freed.

use crate::value::{Arena, Domain, NodeId};

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
