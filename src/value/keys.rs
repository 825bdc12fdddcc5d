//! Dict keys and set items are hashed (and compared) by Python, recursively.
//! Before anything is built, every key must be hashable and small enough to hash:
//! a key made of shared tuples would take exponential time, a deep one would
//! overflow the C stack. Sizes count repetition and are memoised per node.

use std::collections::HashMap;

use crate::error::{Error, Location};
use crate::limits::Limit;
use crate::value::{Arena, Domain, Node, NodeId};

/// A key's size in values, or the kind that makes it unhashable.
#[derive(Clone, Copy)]
enum Cost {
    Values(u64),
    Unhashable(&'static str),
}

struct KeyChecker<'a, D: Domain> {
    arena: &'a Arena<D>,
    max: u64,
    costs: HashMap<NodeId, Cost>,
}

impl<D: Domain> KeyChecker<'_, D> {
    fn children(&self, id: NodeId) -> &[NodeId] {
        match self.arena.get(id) {
            Node::Tuple(items) => self.arena.items(*items),
            Node::Set(s) if s.frozen => &s.items,
            _ => &[],
        }
    }

    fn leaf(&self, id: NodeId) -> Cost {
        match self.arena.get(id) {
            Node::List(_) => Cost::Unhashable("list"),
            Node::Dict(..) => Cost::Unhashable("dict"),
            Node::Set(s) if !s.frozen => Cost::Unhashable("set"),
            Node::ByteArray(_) => Cost::Unhashable("bytearray"),
            _ => Cost::Values(1),
        }
    }

    /// The cost of hashing `key`, computed iteratively (keys may be a million deep).
    fn cost(&mut self, key: NodeId) -> Cost {
        // Nearly every key is a str or an int: no bookkeeping for those.
        if self.children(key).is_empty() {
            return self.leaf(key);
        }
        let mut stack = vec![(key, false)];
        while let Some((id, expanded)) = stack.pop() {
            if self.costs.contains_key(&id) {
                continue;
            }
            let children = self.children(id);
            if children.is_empty() {
                let leaf = self.leaf(id);
                self.costs.insert(id, leaf);
                continue;
            }
            if !expanded {
                stack.push((id, true));
                let pending: Vec<NodeId> = children
                    .iter()
                    .filter(|c| !self.costs.contains_key(c))
                    .copied()
                    .collect();
                stack.extend(pending.into_iter().map(|c| (c, false)));
                continue;
            }
            let mut total = Cost::Values(1);
            for child in children {
                total = match (
                    total,
                    self.costs.get(child).copied().unwrap_or(Cost::Values(1)),
                ) {
                    (Cost::Unhashable(k), _) | (_, Cost::Unhashable(k)) => Cost::Unhashable(k),
                    (Cost::Values(a), Cost::Values(b)) => {
                        Cost::Values(a.saturating_add(b).min(self.max.saturating_add(1)))
                    }
                };
            }
            self.costs.insert(id, total);
        }
        self.costs.get(&key).copied().unwrap_or(Cost::Values(1))
    }

    fn check(&mut self, key: NodeId, what: &str) -> Result<(), Error> {
        match self.cost(key) {
            Cost::Unhashable(kind) => Err(Error::pickle(
                format!("a {what} is unhashable: it holds a {kind}"),
                Location::default(),
            )),
            Cost::Values(n) if n > self.max => Err(Error::limit(
                Limit::KeyValues,
                self.max,
                Location::default(),
            )),
            Cost::Values(_) => Ok(()),
        }
    }
}

/// Check every dict key and set item in the arena.
pub fn check_keys<D: Domain>(arena: &Arena<D>, max_key_values: u64) -> Result<(), Error> {
    let mut checker = KeyChecker {
        arena,
        max: max_key_values,
        costs: HashMap::new(),
    };
    for node in arena.nodes() {
        match node {
            Node::Dict(_, d) => {
                for (key, _) in &arena.dict(*d).items {
                    checker.check(*key, "dict key")?;
                }
            }
            Node::Set(s) => {
                // `set(list)` hashes the list's items as they were; a set's own
                // base is checked where that set is.
                let snapshot = match s.base.map(|(id, len)| (arena.get(id), len)) {
                    Some((Node::List(items), len)) => items.get(..len).unwrap_or(items),
                    Some((Node::Tuple(items), len)) => {
                        let items = arena.items(*items);
                        items.get(..len).unwrap_or(items)
                    }
                    _ => &[],
                };
                for item in snapshot.iter().chain(&s.items) {
                    checker.check(*item, "set item")?;
                }
            }
            _ => {}
        }
    }
    Ok(())
}
