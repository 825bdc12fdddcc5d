//! A pickles-only scan of a file far away (HTTP, an object store), read in
//! waves of ranges. A round trip costs more than the bytes it brings, so the
//! scan runs against the ranges fetched so far, and every range it reads that
//! is missing is collected in the same run: the missing bytes read as zeros
//! meanwhile, so the reads that follow from held bytes are found too. The
//! caller fetches the whole wave at once and runs the scan again. Only a run
//! that missed nothing gives a report: the reads and the report are then those
//! of the local pickles-only scan of the same bytes.

use std::cell::RefCell;

use crate::archive::tar as tar_archive;
use crate::archive::zip::{FileBytes, Pieces, END_RECORDS_LEN};

use super::{scan_pickles_by_reading, unsafe_globals_by_reading, Report, ScanOptions};

/// What a run against the ranges held so far settled.
#[derive(Debug)]
pub enum Wave<T> {
    /// Every byte the run read was held: its answer.
    Settled(T),
    /// Ranges to fetch, `(offset, length)`, in order and none overlapping or
    /// touching another; then run again.
    Fetch(Vec<(u64, u64)>),
    /// Ranges cannot settle it (not a zip, more entries than a reading by
    /// ranges takes, an error to report precisely): the answer needs the whole
    /// file, as the local reading of a path then maps it.
    WholeFile,
}

/// The pickles-only scan of a file of `len` bytes whose `held` ranges are in
/// memory (see the module's documentation).
pub fn scan_pickles_in_waves(len: u64, held: &Pieces, options: &ScanOptions) -> Wave<Report> {
    in_waves(len, held, |read_at| {
        scan_pickles_by_reading(len, read_at, END_RECORDS_LEN, options)
    })
}

/// [`super::unsafe_globals`] of a file of `len` bytes whose `held` ranges are
/// in memory, as [`unsafe_globals_by_reading`] answers it from reads.
pub fn unsafe_globals_in_waves(
    len: u64,
    held: &Pieces,
    options: &ScanOptions,
) -> Wave<Vec<String>> {
    in_waves(len, held, |read_at| {
        unsafe_globals_by_reading(len, read_at, END_RECORDS_LEN, options)
    })
}

/// `answer` run against `held`, every read of bytes not held collected (and
/// read as zeros meanwhile).
fn in_waves<T>(
    len: u64,
    held: &Pieces,
    answer: impl FnOnce(&dyn Fn(u64, usize) -> Option<Vec<u8>>) -> Option<T>,
) -> Wave<T> {
    let missed = RefCell::new(Vec::new());
    let read_at = |offset: u64, n: usize| -> Option<Vec<u8>> {
        // As a read of a file: nothing past its end.
        if offset.checked_add(n as u64)? > len {
            return None;
        }
        let start = usize::try_from(offset).ok()?;
        if let Some(bytes) = held.get(start..start.checked_add(n)?) {
            return Some(bytes.to_vec());
        }
        missed.borrow_mut().push((offset, n as u64));
        Some(vec![0; n])
    };
    let answer = answer(&read_at);
    let mut missed = missed.into_inner();
    if !missed.is_empty() {
        if held.holds_nothing() {
            // The first block, which a reading of a zip reads last (is it also
            // a tar?) after reads that follow from one another: asked for with
            // the end records, it costs no wave of its own.
            missed.push((0, len.min(tar_archive::BLOCK as u64)));
        }
        return Wave::Fetch(merged(missed));
    }
    answer.map_or(Wave::WholeFile, Wave::Settled)
}

/// `ranges` in order of offset, those that overlap or touch made one. Ranges
/// with a gap between them stay apart: the gap may be tensor bytes, which a
/// pickles-only scan never fetches.
fn merged(mut ranges: Vec<(u64, u64)>) -> Vec<(u64, u64)> {
    ranges.sort_unstable();
    let mut out: Vec<(u64, u64)> = Vec::with_capacity(ranges.len());
    for (offset, len) in ranges {
        let end = offset.saturating_add(len);
        match out.last_mut() {
            Some((start, n)) if offset <= start.saturating_add(*n) => {
                *n = end.max(start.saturating_add(*n)) - *start;
            }
            _ => out.push((offset, len)),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_merge_only_where_they_overlap_or_touch() {
        let ranges = vec![(100, 10), (0, 4), (105, 20), (125, 5), (200, 1), (2, 1)];
        assert_eq!(merged(ranges), [(0, 4), (100, 30), (200, 1)]);
    }
}
