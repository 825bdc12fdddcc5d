//! Storage ids by key. torch names storages `"0"`, `"1"`, ... in the order it
//! meets them, so a key that is a plain decimal number indexes a vector directly;
//! any other key (or a number far past the storages declared so far) goes to a
//! hash map. Hashing every key of a 50,000-tensor checkpoint, and rehashing them
//! as the map grew, was 8% of the pickle VM's instructions.

use std::collections::HashMap;
use std::sync::Arc;

use crate::torch::tensor::StorageId;

/// Numbers below this always index the vector, whatever was declared before.
const ALWAYS_DIRECT: usize = 1024;

#[derive(Debug, Default)]
pub struct StorageKeys {
    /// By key number: the id plus one, 0 for none.
    direct: Vec<u32>,
    other: HashMap<Arc<str>, StorageId>,
}

/// The value of `key` if it is a number written the way `str(int)` writes one.
fn number(key: &str) -> Option<usize> {
    let bytes = key.as_bytes();
    if bytes.is_empty() || bytes.len() > 9 || (bytes.len() > 1 && bytes.first() == Some(&b'0')) {
        return None;
    }
    bytes.iter().try_fold(0usize, |n, &b| {
        let digit = b.checked_sub(b'0').filter(|d| *d < 10)?;
        n.checked_mul(10)?.checked_add(usize::from(digit))
    })
}

impl StorageKeys {
    pub fn reserve(&mut self, n: usize) {
        self.direct.reserve(n);
    }

    pub fn get(&self, key: &str) -> Option<StorageId> {
        let direct = number(key).and_then(|n| self.direct.get(n));
        if let Some(id) = direct.and_then(|slot| slot.checked_sub(1)) {
            return Some(StorageId(id));
        }
        if self.other.is_empty() {
            return None;
        }
        self.other.get(key).copied()
    }

    /// Record `key` (not yet recorded) for `id`. The vector grows to at most
    /// twice the storages declared, plus a constant, so a file cannot make it
    /// large with one big number.
    pub fn insert(&mut self, key: Arc<str>, id: StorageId, declared: usize) {
        if let Some(n) = number(&key) {
            let limit = declared.saturating_mul(2).max(ALWAYS_DIRECT);
            if let (true, Some(stored)) = (n < limit, id.0.checked_add(1)) {
                if self.direct.len() <= n {
                    self.direct.resize(n.saturating_add(1), 0);
                }
                if let Some(slot) = self.direct.get_mut(n) {
                    *slot = stored;
                    return;
                }
            }
        }
        self.other.insert(key, id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_are_read_only_as_str_writes_them() {
        assert_eq!(number("0"), Some(0));
        assert_eq!(number("49999"), Some(49999));
        assert_eq!(number("007"), None);
        assert_eq!(number(""), None);
        assert_eq!(number("-1"), None);
        assert_eq!(number("1e3"), None);
        assert_eq!(number("1234567890"), None);
    }

    #[test]
    fn every_key_is_found_where_it_was_put() {
        let mut keys = StorageKeys::default();
        let names = ["0", "5000000", "1", "007", "7", "x", "2047", "99999999"];
        for (i, name) in names.iter().enumerate() {
            assert_eq!(keys.get(name), None);
            keys.insert(Arc::from(*name), StorageId(i as u32), i);
        }
        for (i, name) in names.iter().enumerate() {
            assert_eq!(keys.get(name), Some(StorageId(i as u32)), "{name}");
        }
        assert_eq!(keys.get("2"), None);
        assert_eq!(keys.get("07"), None);
        // One big number does not grow the vector past the bound.
        assert!(keys.direct.len() <= ALWAYS_DIRECT + 1);
    }
}
