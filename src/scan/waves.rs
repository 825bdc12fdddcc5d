//! A pickles-only scan of a file far away (HTTP, an object store), read in
//! waves of ranges. A round trip costs more than the bytes it brings, so the
//! scan runs against the ranges fetched so far, and every range it reads that
//! is missing is collected in the same run: the missing bytes read as zeros
//! meanwhile, so the reads that follow from held bytes are found too. The
//! caller fetches the whole wave at once and runs the scan again. Only a run
//! that missed nothing gives a report: the reads and the report are then those
//! of the local pickles-only scan of the same bytes.

use std::cell::RefCell;

use std::borrow::Cow;

use crate::archive::tar as tar_archive;
use crate::archive::zip::{FileBytes, Pieces, END_RECORDS_LEN};

use super::{
    scan_pickles_by_reading, scan_span_bytes, span_out_of_range, spans_report,
    unsafe_globals_by_reading, Report, ScanOptions, Span,
};

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

/// [`super::scan_spans`] of a file of `len` bytes whose `held` ranges are in
/// memory: each span read as a file of its own, by ranges where it needs no
/// transform and a pickles-only reading settles it (the span's tail and first
/// block first, as a file's), else whole (a compressed span, or bytes that are
/// no zip) once its reading by ranges missed nothing: a tensor chunk is never
/// fetched whole to find out it is one.
pub fn scan_spans_in_waves(
    len: u64,
    held: &Pieces,
    spans: &[Span],
    options: &ScanOptions,
) -> Wave<Report> {
    let missed = RefCell::new(Vec::new());
    let read_at = reader(len, held, &missed);
    let mut reports = Vec::with_capacity(spans.len());
    for span in spans {
        let end = span.offset.checked_add(span.length);
        if end.is_none_or(|end| end > len) {
            reports.push(span_out_of_range(span, len));
            continue;
        }
        if span.transforms.is_empty() {
            let before = missed.borrow().len();
            let within = |offset: u64, n: usize| {
                if offset.checked_add(n as u64)? > span.length {
                    return None;
                }
                read_at(span.offset.checked_add(offset)?, n)
            };
            let answer = scan_pickles_by_reading(span.length, &within, END_RECORDS_LEN, options);
            if missed.borrow().len() > before {
                let first_block = span.length.min(tar_archive::BLOCK as u64);
                if !holds(held, span.offset, first_block) {
                    missed.borrow_mut().push((span.offset, first_block));
                }
                reports.push(Report::default());
                continue;
            }
            if let Some(report) = answer {
                reports.push(report);
                continue;
            }
        }
        let whole = usize::try_from(span.offset).ok().and_then(|start| {
            held.get(start..start.checked_add(usize::try_from(span.length).ok()?)?)
        });
        match whole {
            Some(bytes) => reports.push(scan_span_bytes(Cow::Borrowed(bytes), span, options)),
            None => {
                missed.borrow_mut().push((span.offset, span.length));
                reports.push(Report::default());
            }
        }
    }
    drop(read_at);
    let missed = missed.into_inner();
    if !missed.is_empty() {
        return Wave::Fetch(merged(missed));
    }
    Wave::Settled(spans_report(spans, reports, options))
}

fn holds(held: &Pieces, offset: u64, n: u64) -> bool {
    let range = usize::try_from(offset)
        .ok()
        .zip(usize::try_from(n).ok())
        .and_then(|(start, n)| Some(start..start.checked_add(n)?));
    range.is_some_and(|range| held.get(range).is_some())
}

/// A read of a file of `len` bytes from `held`, every read of bytes not held
/// pushed to `missed` (and read as zeros meanwhile).
fn reader<'a>(
    len: u64,
    held: &'a Pieces,
    missed: &'a RefCell<Vec<(u64, u64)>>,
) -> impl Fn(u64, usize) -> Option<Vec<u8>> + 'a {
    move |offset: u64, n: usize| -> Option<Vec<u8>> {
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
    }
}

/// `answer` run against `held`, every read of bytes not held collected (and
/// read as zeros meanwhile).
fn in_waves<T>(
    len: u64,
    held: &Pieces,
    answer: impl FnOnce(&dyn Fn(u64, usize) -> Option<Vec<u8>>) -> Option<T>,
) -> Wave<T> {
    let missed = RefCell::new(Vec::new());
    let read_at = reader(len, held, &missed);
    let answer = answer(&read_at);
    drop(read_at);
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
