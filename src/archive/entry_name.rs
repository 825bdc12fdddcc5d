//! An archive entry's name, kept inline when it is short.

use std::fmt;
use std::ops::Deref;

/// The longest name kept inline: torch's `<root>/data/<n>` storage names with a
/// root of up to 12 characters, and `<root>/data.pkl`.
const INLINE: usize = 22;

/// An entry's name. Indexing a directory makes one per entry: inline, a checkpoint
/// of thousands of storages costs no allocation each (and a process's first scan
/// no fresh heap pages for them).
#[derive(Clone)]
pub enum EntryName {
    Inline { len: u8, bytes: [u8; INLINE] },
    Heap(Box<[u8]>),
}

const _: () = assert!(std::mem::size_of::<EntryName>() == 24);

impl From<&[u8]> for EntryName {
    fn from(name: &[u8]) -> EntryName {
        let mut bytes = [0u8; INLINE];
        match (u8::try_from(name.len()), bytes.get_mut(..name.len())) {
            (Ok(len), Some(inline)) => {
                inline.copy_from_slice(name);
                EntryName::Inline { len, bytes }
            }
            _ => EntryName::Heap(name.into()),
        }
    }
}

impl Deref for EntryName {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        match self {
            EntryName::Inline { len, bytes } => bytes.get(..usize::from(*len)).unwrap_or_default(),
            EntryName::Heap(name) => name,
        }
    }
}

impl PartialEq for EntryName {
    fn eq(&self, other: &EntryName) -> bool {
        **self == **other
    }
}

impl Eq for EntryName {}

impl fmt::Debug for EntryName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&**self, f)
    }
}

#[cfg(test)]
mod tests {
    use super::EntryName;

    #[test]
    fn short_and_long_names_read_back_and_compare_by_their_bytes() {
        for len in [0, 1, 21, 22, 23, 200, 70_000] {
            let name: Vec<u8> = (0..len).map(|i| b'a' + (i % 26) as u8).collect();
            let kept = EntryName::from(&name[..]);
            assert_eq!(&*kept, &name[..]);
            assert_eq!(matches!(kept, EntryName::Inline { .. }), len <= 22);
            assert_eq!(kept, EntryName::Heap(name.clone().into()));
        }
    }
}
