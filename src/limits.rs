//! Resource limits. Every opcode the VM runs is charged against these, so no input
//! can make the core use unbounded time or memory. The defaults accept every real
//! checkpoint we know of (a state dict with millions of tensors included) and refuse
//! hostile files long before memory runs out.
//!
//! This module depends on nothing: [`crate::error`] reports an exceeded [`Limit`].

/// One named resource limit: a field of [`Limits`], and what a `LimitExceededError`
/// names (`max_nodes`...).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Limit {
    /// The bytes of one pickle.
    PickleBytes,
    /// The values a pickle may build.
    Nodes,
    /// The bytes all its strings and bytes hold together.
    PayloadBytes,
    /// The VM's stack.
    StackDepth,
    /// Its nested marks.
    MarkDepth,
    /// The pickle's memo.
    MemoEntries,
    /// The items of one list, tuple, dict or set.
    ContainerLen,
    /// A tensor's dimensions.
    Ndim,
    /// The storages of one checkpoint.
    Storages,
    /// The entries of one archive.
    ZipEntries,
    /// The bytes decompression may produce (and a stream may hold).
    InflatedBytes,
    /// The key-value pairs of one dict-like state.
    KeyValues,
    /// How deep values and archives may nest.
    Depth,
}

impl Limit {
    /// Every limit, in the order the documentation lists them.
    pub const ALL: [Limit; 13] = [
        Limit::PickleBytes,
        Limit::Nodes,
        Limit::PayloadBytes,
        Limit::StackDepth,
        Limit::MarkDepth,
        Limit::MemoEntries,
        Limit::ContainerLen,
        Limit::Ndim,
        Limit::Storages,
        Limit::ZipEntries,
        Limit::InflatedBytes,
        Limit::KeyValues,
        Limit::Depth,
    ];

    /// The name users pass in `limits={...}` and errors report.
    pub fn name(self) -> &'static str {
        match self {
            Limit::PickleBytes => "max_pickle_bytes",
            Limit::Nodes => "max_nodes",
            Limit::PayloadBytes => "max_payload_bytes",
            Limit::StackDepth => "max_stack_depth",
            Limit::MarkDepth => "max_mark_depth",
            Limit::MemoEntries => "max_memo_entries",
            Limit::ContainerLen => "max_container_len",
            Limit::Ndim => "max_ndim",
            Limit::Storages => "max_storages",
            Limit::ZipEntries => "max_zip_entries",
            Limit::InflatedBytes => "max_inflated_bytes",
            Limit::KeyValues => "max_key_values",
            Limit::Depth => "max_depth",
        }
    }

    /// The limit of that name (`max_nodes`...).
    pub fn from_name(name: &str) -> Option<Limit> {
        Limit::ALL.into_iter().find(|l| l.name() == name)
    }
}

/// Named resource limits. Each field is checked in one place and its name is the
/// limit an exceeded-limit error reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Bytes of one pickle stream (`data.pkl`, or one pickle of the legacy format).
    pub max_pickle_bytes: u64,
    /// Values the VM may create (one arena node each).
    pub max_nodes: u64,
    /// Total bytes of all str, bytes and bytearray payloads.
    pub max_payload_bytes: u64,
    /// Items on the VM's stack at once.
    pub max_stack_depth: u64,
    /// MARKs open at once.
    pub max_mark_depth: u64,
    /// Memo entries.
    pub max_memo_entries: u64,
    /// Items in one list, tuple, dict or set.
    pub max_container_len: u64,
    /// Dimensions of one tensor.
    pub max_ndim: u64,
    /// Distinct storages in one checkpoint.
    pub max_storages: u64,
    /// Entries in one zip archive.
    pub max_zip_entries: u64,
    /// Total bytes produced by decompressing entries of one archive.
    pub max_inflated_bytes: u64,
    /// Values inside one dict key or set item, counted with repetition: Python
    /// hashes and compares them recursively, so a shared-tuple bomb as a key would
    /// hang (exponential) or overflow the C stack (deep).
    pub max_key_values: u64,
    /// Levels of nesting a loader follows in a tree of files (a TensorDict folder's
    /// nested tensordicts).
    pub max_depth: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_pickle_bytes: 1 << 30,
            max_nodes: 50_000_000,
            max_payload_bytes: 1 << 30,
            max_stack_depth: 1 << 24,
            max_mark_depth: 1 << 22,
            max_memo_entries: 1 << 26,
            max_container_len: 1 << 26,
            max_ndim: 64,
            max_storages: 1 << 22,
            max_zip_entries: 1 << 23,
            max_inflated_bytes: 1 << 36,
            max_key_values: 10_000,
            max_depth: 100,
        }
    }
}

impl Limits {
    fn slot(&mut self, limit: Limit) -> &mut u64 {
        match limit {
            Limit::PickleBytes => &mut self.max_pickle_bytes,
            Limit::Nodes => &mut self.max_nodes,
            Limit::PayloadBytes => &mut self.max_payload_bytes,
            Limit::StackDepth => &mut self.max_stack_depth,
            Limit::MarkDepth => &mut self.max_mark_depth,
            Limit::MemoEntries => &mut self.max_memo_entries,
            Limit::ContainerLen => &mut self.max_container_len,
            Limit::Ndim => &mut self.max_ndim,
            Limit::Storages => &mut self.max_storages,
            Limit::ZipEntries => &mut self.max_zip_entries,
            Limit::InflatedBytes => &mut self.max_inflated_bytes,
            Limit::KeyValues => &mut self.max_key_values,
            Limit::Depth => &mut self.max_depth,
        }
    }

    /// The value of `limit`.
    pub fn get(&self, limit: Limit) -> u64 {
        // A copy, so the one field table above serves reads as well as writes.
        let mut copy = *self;
        *copy.slot(limit)
    }

    /// Set `limit` to `value`.
    pub fn set(&mut self, limit: Limit, value: u64) {
        *self.slot(limit) = value;
    }

    /// Tight limits for fuzzing and for scanning untrusted files in bulk.
    pub fn tight() -> Self {
        Limits {
            max_pickle_bytes: 1 << 20,
            max_nodes: 1 << 16,
            max_payload_bytes: 1 << 20,
            max_stack_depth: 1 << 12,
            max_mark_depth: 1 << 10,
            max_memo_entries: 1 << 12,
            max_container_len: 1 << 12,
            max_ndim: 16,
            max_storages: 1 << 10,
            max_zip_entries: 1 << 10,
            max_inflated_bytes: 1 << 24,
            max_key_values: 1 << 10,
            max_depth: 32,
        }
    }
}

/// How many threads bulk work (copying storages, checksums) uses by default.
pub fn default_threads() -> usize {
    std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .min(8)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_limit_has_one_name_and_one_field() {
        let mut limits = Limits::default();
        for (i, limit) in Limit::ALL.into_iter().enumerate() {
            assert_eq!(Limit::from_name(limit.name()), Some(limit));
            limits.set(limit, i as u64);
        }
        for (i, limit) in Limit::ALL.into_iter().enumerate() {
            assert_eq!(limits.get(limit), i as u64);
        }
    }
}
