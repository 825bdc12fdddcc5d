//! Storage keys, and storage ids by key. torch names storages `"0"`, `"1"`, ...
//! in the order it meets them, so a key that is a plain decimal number is kept as
//! that number and indexes a vector directly; any other key (or a number far past
//! the storages declared so far) goes to a hash map. Hashing every key of a
//! 50,000-tensor checkpoint, and rehashing them as the map grew, was 8% of the
//! pickle VM's instructions; allocating each key's text and freeing it, 5%.

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;


/// A storage by its place in the checkpoint: the order torch met its key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct StorageId(pub u32);

impl StorageId {
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

/// A storage's key, as the pickle wrote it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum StorageKey {
    /// A number written the way `str(int)` writes one (torch's own keys).
    Number(u32),
    Text(Arc<str>),
}

impl StorageKey {
    pub fn new(key: &str) -> StorageKey {
        match number(key.as_bytes()) {
            Some(n) => StorageKey::Number(n),
            None => StorageKey::Text(Arc::from(key)),
        }
    }

    /// The key of these bytes if they are a number as torch writes its keys:
    /// ASCII digits, so a str's bytes and a bytes key's alike, with no text to check.
    pub fn number_in(bytes: &[u8]) -> Option<StorageKey> {
        number(bytes).map(StorageKey::Number)
    }
}

impl fmt::Display for StorageKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StorageKey::Number(n) => write!(f, "{n}"),
            StorageKey::Text(text) => f.write_str(text),
        }
    }
}

/// Numbers below this always index the vector, whatever was declared before.
const ALWAYS_DIRECT: usize = 1024;

#[derive(Debug, Default)]
pub struct StorageKeys {
    /// By key number: the id plus one, 0 for none.
    direct: Vec<u32>,
    other: HashMap<Arc<str>, StorageId>,
}

/// The value of `bytes` if they are a number written the way `str(int)` writes
/// one, of at most 9 digits (so any fits a u32).
fn number(bytes: &[u8]) -> Option<u32> {
    if bytes.is_empty() || bytes.len() > 9 || (bytes.len() > 1 && bytes.first() == Some(&b'0')) {
        return None;
    }
    bytes.iter().try_fold(0u32, |n, &b| {
        let digit = b.checked_sub(b'0').filter(|d| *d < 10)?;
        n.checked_mul(10)?.checked_add(u32::from(digit))
    })
}

impl StorageKeys {
    pub fn reserve(&mut self, n: usize) {
        self.direct.reserve(n);
    }

    pub fn get(&self, key: &StorageKey) -> Option<StorageId> {
        match key {
            StorageKey::Number(n) => {
                let direct = self.direct.get(*n as usize);
                if let Some(id) = direct.and_then(|slot| slot.checked_sub(1)) {
                    return Some(StorageId(id));
                }
                if self.other.is_empty() {
                    return None;
                }
                self.other.get(&*key.to_string()).copied()
            }
            StorageKey::Text(text) => self.other.get(text).copied(),
        }
    }

    /// Record `key` (not yet recorded) for `id`. The vector grows to at most
    /// twice the storages declared, plus a constant, so a file cannot make it
    /// large with one big number.
    pub fn insert(&mut self, key: &StorageKey, id: StorageId, declared: usize) {
        let text = match key {
            StorageKey::Text(text) => text.clone(),
            StorageKey::Number(n) => {
                let n = *n as usize;
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
                Arc::from(key.to_string())
            }
        };
        self.other.insert(text, id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_are_read_only_as_str_writes_them() {
        assert_eq!(number(b"0"), Some(0));
        assert_eq!(number(b"49999"), Some(49999));
        assert_eq!(number(b"999999999"), Some(999_999_999));
        assert_eq!(number(b"007"), None);
        assert_eq!(number(b""), None);
        assert_eq!(number(b"-1"), None);
        assert_eq!(number(b"1e3"), None);
        assert_eq!(number(b"1234567890"), None);
    }

    #[test]
    fn every_key_is_found_where_it_was_put() {
        let mut keys = StorageKeys::default();
        let names = ["0", "5000000", "1", "007", "7", "x", "2047", "99999999"];
        for (i, name) in names.iter().enumerate() {
            assert_eq!(keys.get(&StorageKey::new(name)), None);
            keys.insert(&StorageKey::new(name), StorageId(i as u32), i);
        }
        for (i, name) in names.iter().enumerate() {
            assert_eq!(
                keys.get(&StorageKey::new(name)),
                Some(StorageId(i as u32)),
                "{name}"
            );
        }
        assert_eq!(keys.get(&StorageKey::new("2")), None);
        assert_eq!(keys.get(&StorageKey::new("07")), None);
        // One big number does not grow the vector past the bound.
        assert!(keys.direct.len() <= ALWAYS_DIRECT + 1);
    }

    #[test]
    fn a_key_writes_back_the_text_it_was_read_from() {
        for text in [
            "0",
            "7",
            "10",
            "49999",
            "999999999",
            "1234567890",
            "007",
            "x",
            "",
        ] {
            assert_eq!(StorageKey::new(text).to_string(), text);
        }
        assert_eq!(StorageKey::new("49999"), StorageKey::Number(49999));
        assert!(matches!(StorageKey::new("007"), StorageKey::Text(_)));
    }
}
