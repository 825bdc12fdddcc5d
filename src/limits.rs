//! Resource limits. Every opcode the VM runs is charged against these, so no input
//! can make the core use unbounded time or memory. The defaults accept every real
//! checkpoint we know of (a state dict with millions of tensors included) and refuse
//! hostile files long before memory runs out.

use crate::error::{Error, Location};

/// Named resource limits. Each field is checked in one place and its name is the
/// `limit` reported in [`Error::Limit`].
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
        }
    }
}

impl Limits {
    /// Names of every limit, in declaration order (used by the bindings and the docs).
    pub const NAMES: [&'static str; 12] = [
        "max_pickle_bytes",
        "max_nodes",
        "max_payload_bytes",
        "max_stack_depth",
        "max_mark_depth",
        "max_memo_entries",
        "max_container_len",
        "max_ndim",
        "max_storages",
        "max_zip_entries",
        "max_inflated_bytes",
        "max_key_values",
    ];

    pub fn get(&self, name: &str) -> Option<u64> {
        Some(match name {
            "max_pickle_bytes" => self.max_pickle_bytes,
            "max_nodes" => self.max_nodes,
            "max_payload_bytes" => self.max_payload_bytes,
            "max_stack_depth" => self.max_stack_depth,
            "max_mark_depth" => self.max_mark_depth,
            "max_memo_entries" => self.max_memo_entries,
            "max_container_len" => self.max_container_len,
            "max_ndim" => self.max_ndim,
            "max_storages" => self.max_storages,
            "max_zip_entries" => self.max_zip_entries,
            "max_inflated_bytes" => self.max_inflated_bytes,
            "max_key_values" => self.max_key_values,
            _ => return None,
        })
    }

    /// Set a limit by name; returns false for an unknown name.
    pub fn set(&mut self, name: &str, value: u64) -> bool {
        let slot = match name {
            "max_pickle_bytes" => &mut self.max_pickle_bytes,
            "max_nodes" => &mut self.max_nodes,
            "max_payload_bytes" => &mut self.max_payload_bytes,
            "max_stack_depth" => &mut self.max_stack_depth,
            "max_mark_depth" => &mut self.max_mark_depth,
            "max_memo_entries" => &mut self.max_memo_entries,
            "max_container_len" => &mut self.max_container_len,
            "max_ndim" => &mut self.max_ndim,
            "max_storages" => &mut self.max_storages,
            "max_zip_entries" => &mut self.max_zip_entries,
            "max_inflated_bytes" => &mut self.max_inflated_bytes,
            "max_key_values" => &mut self.max_key_values,
            _ => return false,
        };
        *slot = value;
        true
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
        }
    }
}

/// Fail with [`Error::Limit`] when `value` exceeds `max`.
pub fn check(
    limit: &'static str,
    value: u64,
    max: u64,
    location: impl FnOnce() -> Location,
) -> Result<(), Error> {
    if value > max {
        Err(Error::Limit {
            limit,
            max,
            location: location(),
        })
    } else {
        Ok(())
    }
}
