//! The work one scan may do, so that it stays linear in the file's size however
//! the file's archives overlap or nest.

use crate::limits::Limits;

/// Archives nested deeper than this are reported, not opened.
pub const MAX_DEPTH: u32 = 4;

/// Bytes of stored nested entries one scan may read: this many times the bytes
/// it has (the file, plus what it inflated). Entries that do not overlap stay
/// below it at any depth; overlapping entries, listed many times or nested, would
/// otherwise make the work exponential in the file's size. Inflating is charged on
/// its own, against [`MAX_DEFLATE_RATIO`].
pub const WORK_PER_FILE_BYTE: u64 = MAX_DEPTH as u64 + 1;

/// DEFLATE's largest expansion (258 bytes from two bits, plus block overhead): a
/// scan inflates at most this many times the file (and `max_inflated_bytes`).
/// Only compressed data inside compressed data, a nested zip bomb, goes further.
pub const MAX_DEFLATE_RATIO: u64 = 1032;

/// What a nested entry costs to read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Work {
    /// Reading stored bytes.
    Read,
    /// Producing decompressed bytes.
    Inflate,
}

/// Work so far, in bytes of nested entries read and of inflated output.
#[derive(Debug, Clone)]
pub struct Budget {
    file_len: u64,
    stored_read: u64,
    inflated: u64,
    inflate_limit: u64,
    exhausted: bool,
}

impl Budget {
    pub fn for_file(len: usize, limits: &Limits) -> Budget {
        Budget {
            file_len: len as u64,
            stored_read: 0,
            inflated: 0,
            inflate_limit: (len as u64)
                .saturating_mul(MAX_DEFLATE_RATIO)
                .min(limits.max_inflated_bytes),
            exhausted: false,
        }
    }

    /// How many bytes of `work` the budget still allows.
    pub fn room(&self, work: Work) -> u64 {
        if self.exhausted {
            return 0;
        }
        match work {
            Work::Inflate => self.inflate_limit.saturating_sub(self.inflated),
            Work::Read => (self.file_len.saturating_add(self.inflated))
                .saturating_mul(WORK_PER_FILE_BYTE)
                .saturating_sub(self.stored_read),
        }
    }

    /// Account for `bytes` of `work`. `Err` when that passes a limit, with the
    /// problem to report the first time (`None` after it): nothing nested is read
    /// once the budget is spent.
    pub fn charge(&mut self, bytes: u64, work: Work) -> Result<(), Option<String>> {
        if self.exhausted {
            return Err(None);
        }
        let (spent, limit, what) = match work {
            Work::Inflate => (&mut self.inflated, self.inflate_limit, "inflate"),
            Work::Read => {
                let has = self.file_len.saturating_add(self.inflated);
                (
                    &mut self.stored_read,
                    has.saturating_mul(WORK_PER_FILE_BYTE),
                    "read",
                )
            }
        };
        match spent.checked_add(bytes).filter(|w| *w <= limit) {
            Some(total) => {
                *spent = total;
                Ok(())
            }
            None => {
                self.exhausted = true;
                Err(Some(format!(
                    "overlapping or nested entries would make the scan {what} more than \
                     {limit} bytes; not scanned further"
                )))
            }
        }
    }
}
