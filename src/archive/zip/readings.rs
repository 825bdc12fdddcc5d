//! Where zip readers part ways. torch's reader (miniz) takes the last end record,
//! the ZIP64 record over the classic one, and as many directory records as the
//! end record counts. Python's zipfile reads records until the directory's size
//! is used up, and moves every offset when the directory does not end where its
//! end record starts. Readers that check an end record's comment length take the
//! one whose comment reaches the file's end; streaming readers walk the local
//! headers in file order. No writer makes a file they read apart, and such a file
//! is how a payload hides from a scanner reading one way while a loader reads
//! another: a load refuses it, a scan reads every reading.

use std::collections::BTreeSet;

use super::{
    bad, classic_directory, find_eocd, le16, le32, read_directory, signatures, walk_local_headers,
    Directory, Entry, FileBytes, Payloads, Pieces, Records, END_RECORD_REACH, EOCD_LEN, EOCD_SIG,
    LFH_LEN, LFH_SIG, MAX_COMMENT,
};
use crate::error::{Error, Location};

/// One way of reading the file that gives another archive than torch's reader.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Disagreement {
    /// The reading, in a few words: where its entries come from.
    pub reading: &'static str,
    pub what: String,
    /// The offset of what the other reading starts from.
    pub at: u64,
    /// The entries that reading finds and the central directory does not.
    pub entries: Vec<Entry>,
}

impl Disagreement {
    /// A load's refusal of the file.
    pub fn error(&self) -> Error {
        Error::archive(
            format!("zip readers would read this archive apart: {}", self.what),
            Location::at(self.at),
        )
    }
}

/// How the central directory was found and where its records ended.
pub(super) struct End {
    pub eocd: usize,
    pub dir: Directory,
    /// Just past the last record the end record counts.
    pub records_end: usize,
}

/// Every reading of `data` that differs from the directory at `end`, whose
/// entries are `known`. The gaps between payloads are looked at only when the
/// payloads were located. `Err` where the bytes needed are not in `data` (a
/// reader holding pieces of the file must then read it whole) or the directory
/// is malformed.
pub(super) fn disagreements<D: FileBytes + ?Sized>(
    data: &D,
    end: &End,
    known: &[Entry],
    payloads: Payloads,
    max_entries: u64,
) -> Result<Vec<Disagreement>, Error> {
    let mut found = Vec::new();
    let known_set = Known::of(known);
    let dir = end.dir;
    let dir_end = dir.offset.saturating_add(dir.size);
    if (end.records_end as u64) < dir_end {
        let more = size_implied_records(data, end, max_entries);
        found.push(Disagreement {
            reading: "the directory by its size",
            what: format!(
                "the end record counts {} entries, but its directory has room for more ({} of {} bytes read)",
                dir.entries,
                end.records_end as u64 - dir.offset,
                dir.size
            ),
            at: end.records_end as u64,
            entries: known_set.new_among(more),
        });
    }
    let prefix = dir.prefix();
    if prefix > 0 {
        let shifted = reading(data, &dir, end.eocd, prefix, max_entries);
        found.push(Disagreement {
            reading: "offsets moved by a prefix",
            what: format!(
                "the directory ends {prefix} bytes before its end record: Python's zipfile moves every offset by them"
            ),
            at: dir_end,
            entries: known_set.new_among(shifted),
        });
    }
    let (classic, _) = classic_directory(data, end.eocd)?;
    if classic.end_at != dir.end_at && !agrees_with_zip64(&classic, &dir) {
        let entries = reading(data, &classic, end.eocd, 0, max_entries);
        found.push(Disagreement {
            reading: "the classic end record",
            what: "the ZIP64 end record and the classic one describe different directories"
                .to_owned(),
            at: end.eocd as u64,
            entries: known_set.new_among(entries),
        });
    }
    if let Some(other) = end_record_owning_the_end(data, end.eocd)? {
        let entries = read_directory(data, other)
            .map(|d| reading(data, &d, other, 0, max_entries))
            .unwrap_or_default();
        found.push(Disagreement {
            reading: "the end record that reaches the end",
            what: format!(
                "the last end record (byte {}) lies in the comment of another (byte {other})",
                end.eocd
            ),
            at: other as u64,
            entries: known_set.new_among(entries),
        });
    }
    if payloads == Payloads::FromLocalHeaders {
        let spans = (known.iter())
            .map(|e| (e.header_offset, e.data_end()))
            .collect();
        found.extend(hidden_local_headers(data, spans, dir.offset, max_entries)?);
    }
    Ok(found)
}

/// The entries of the directory `dir` at `eocd`, offsets moved by `shift`, up
/// to the first record a reader of it cannot read; not located (a scan locates
/// the ones it reads).
fn reading<D: FileBytes + ?Sized>(
    data: &D,
    dir: &Directory,
    eocd: usize,
    shift: u64,
    max_entries: u64,
) -> Vec<Entry> {
    let Ok(records) = Records::at(data, dir, eocd, max_entries, shift) else {
        return Vec::new();
    };
    (records.map_while(Result::ok))
        .map(|r| r.unlocated())
        .collect()
}

/// Whether an end record other than the last lies within reach of the file's
/// end, from `from` on, in the bytes `data` holds: a reader holding pieces of
/// the file leaves such an archive to one that reads it whole.
pub(super) fn other_end_record_signature(data: &Pieces, from: u64, last: usize) -> bool {
    let from = usize::try_from(from).unwrap_or(usize::MAX);
    let lowest = data.len().saturating_sub(END_RECORD_REACH).max(from);
    // Searched piece by piece, in their bytes: a byte-by-byte look through the
    // pieces was most of a first get_unsafe_globals_in_checkpoint.
    (data.pieces.iter()).any(|(start, bytes)| {
        let from = lowest.max(*start) - start;
        let to = last
            .min(start.saturating_add(bytes.len()))
            .saturating_sub(*start);
        let window = bytes.get(from..to.saturating_add(3).min(bytes.len()));
        from < to && window.is_some_and(|w| signatures(w, EOCD_SIG).next().is_some())
    })
}

/// The records after the counted ones, up to the directory's size: what Python's
/// zipfile reads on to.
fn size_implied_records<D: FileBytes + ?Sized>(
    data: &D,
    end: &End,
    max_entries: u64,
) -> Vec<Entry> {
    let dir = end.dir;
    let mut records = Records {
        data,
        pos: end.records_end,
        end: dir.offset.saturating_add(dir.size).min(end.eocd as u64),
        remaining: max_entries,
        shift: 0,
        directory_offset: dir.offset,
    };
    let mut entries = Vec::new();
    while (records.pos as u64) < records.end {
        match records.next() {
            Some(Ok(r)) => entries.push(r.unlocated()),
            _ => break,
        }
    }
    entries
}

/// Whether the classic end record says what the ZIP64 one says, where it says
/// anything: a field at its maximum defers to the ZIP64 record.
fn agrees_with_zip64(classic: &Directory, zip64: &Directory) -> bool {
    let field = |value: u64, max: u64, wide: u64| value == max || value == wide;
    field(classic.entries, 0xffff, zip64.entries)
        && field(classic.size, 0xffff_ffff, zip64.size)
        && field(classic.offset, 0xffff_ffff, zip64.offset)
}

/// The comment length the end record at `at` declares, if it is one.
fn comment_len<D: FileBytes + ?Sized>(data: &D, at: usize) -> Option<usize> {
    (le32(data, at)? == EOCD_SIG).then_some(())?;
    le16(data, at + 20).map(usize::from)
}

/// When the last end record's comment does not reach the file's end, the end
/// record further back whose comment does: the one a reader that checks comment
/// lengths takes.
fn end_record_owning_the_end<D: FileBytes + ?Sized>(
    data: &D,
    eocd: usize,
) -> Result<Option<usize>, Error> {
    let owns_the_end =
        |at: usize| comment_len(data, at).is_some_and(|c| at + EOCD_LEN + c == data.len());
    if owns_the_end(eocd) {
        return Ok(None);
    }
    let lowest = data.len().saturating_sub(EOCD_LEN + MAX_COMMENT);
    if data.get(lowest..eocd).is_none() {
        return Err(bad(
            "the end record's comment does not reach the file's end",
            eocd as u64,
        ));
    }
    Ok((lowest..eocd).rev().find(|&at| owns_the_end(at)))
}

/// The spans between payloads (and before the first, and after the last, up to
/// the directory) long enough to hold a local header: where entries a
/// streaming reader finds and the directory does not list would lie. A shorter
/// gap hides nothing: a data descriptor (12 to 24 bytes) is the one thing a
/// writer puts there. `spans` are each entry's local header offset and
/// payload end.
fn gaps(mut spans: Vec<(u64, u64)>, directory_offset: u64) -> Vec<(u64, u64)> {
    spans.sort_unstable();
    let mut gaps = Vec::new();
    let mut from = 0u64;
    for (start, end) in spans {
        if start > from {
            gaps.push((from, start));
        }
        from = from.max(end);
    }
    if directory_offset > from {
        gaps.push((from, directory_offset));
    }
    gaps.retain(|(start, end)| end - start >= LFH_LEN as u64);
    gaps
}

/// The bytes of a gap's start that [`header_in_gap`] looks at.
pub(super) const GAP_LOOK: usize = 24 + 4;

/// Where in a gap (starting with `gap`) a local header begins, if one does:
/// after a data descriptor, with or without its signature, 32 or 64-bit.
fn header_in_gap(gap: &[u8]) -> Option<usize> {
    [0usize, 12, 16, 20, 24]
        .into_iter()
        .find(|&k| le32(gap, k) == Some(LFH_SIG))
}

/// The local headers in the gaps between the payloads `spans` (each entry's
/// local header offset and payload end): entries a streaming reader finds and
/// the directory does not list.
fn hidden_local_headers<D: FileBytes + ?Sized>(
    data: &D,
    spans: Vec<(u64, u64)>,
    directory_offset: u64,
    max_entries: u64,
) -> Result<Vec<Disagreement>, Error> {
    headers_in_gaps(data, gaps(spans, directory_offset), max_entries)
}

pub(super) fn headers_in_gaps<D: FileBytes + ?Sized>(
    data: &D,
    gaps: Vec<(u64, u64)>,
    max_entries: u64,
) -> Result<Vec<Disagreement>, Error> {
    let mut found = Vec::new();
    for (start, end) in gaps {
        let s = start as usize;
        let look = data
            .get(s..s.saturating_add(GAP_LOOK).min(end as usize))
            .ok_or_else(|| bad("bytes between entries not read", start))?;
        let Some(skip) = header_in_gap(look) else {
            continue;
        };
        let gap = data.get(s..end as usize).unwrap_or(look);
        let entries = walk_local_headers(gap.get(skip..).unwrap_or_default(), max_entries)
            .into_iter()
            .map(|mut entry| {
                let moved = start + skip as u64;
                entry.header_offset += moved;
                entry.data_offset += moved;
                entry
            })
            .collect();
        found.push(Disagreement {
            reading: "an unlisted local header",
            what: format!(
                "a local header at byte {} that the central directory does not list",
                start + skip as u64
            ),
            at: start + skip as u64,
            entries,
        });
    }
    Ok(found)
}

/// The gaps a reader that reads only some local headers checks for entries the
/// directory does not list: before the first listed local header, and after
/// the payload of each entry in `read` and of the last one, up to the next
/// listed local header or the directory. `listed` holds every record's local
/// header offset and compressed size, sorted by offset. A pickles-only scan
/// reads the headers of the pickles and of the entry before the directory, not
/// every tensor's: an entry hidden between two tensors is the full scan's to
/// find. `Err` when a header needed is not in `data`.
pub fn gaps_near<D: FileBytes + ?Sized>(
    data: &D,
    listed: &[(u64, u64)],
    read: impl Iterator<Item = u64>,
    directory_offset: u64,
) -> Result<Vec<(u64, u64)>, Error> {
    let next_after = |offset: u64| {
        let i = listed.partition_point(|&(o, _)| o <= offset);
        listed.get(i).map_or(directory_offset, |&(o, _)| o)
    };
    let offsets = read.chain(listed.last().map(|&(o, _)| o));
    let mut gaps = Vec::with_capacity(1 + offsets.size_hint().0);
    gaps.push((0, listed.first().map_or(directory_offset, |&(o, _)| o)));
    for offset in offsets {
        let i = listed.partition_point(|&(o, _)| o < offset);
        let Some(&(_, compressed_size)) = listed.get(i).filter(|&&(o, _)| o == offset) else {
            continue;
        };
        let start = usize::try_from(offset).unwrap_or(usize::MAX);
        let lfh = (data.get(start..start.saturating_add(LFH_LEN)))
            .ok_or_else(|| bad("a local header not read", offset))?;
        if let Some((_, end)) = payload_span(offset, compressed_size, lfh) {
            gaps.push((end, next_after(offset)));
        }
    }
    gaps.retain(|&(start, end)| end.saturating_sub(start) >= LFH_LEN as u64);
    gaps.sort_unstable();
    gaps.dedup();
    Ok(gaps)
}

/// The local headers in the [`gaps_near`] of the entries `read` and the last.
pub fn unlisted_local_headers_near<D: FileBytes + ?Sized>(
    data: &D,
    listed: &[(u64, u64)],
    read: impl Iterator<Item = u64>,
    directory_offset: u64,
    max_entries: u64,
) -> Result<Vec<Disagreement>, Error> {
    let gaps = gaps_near(data, listed, read, directory_offset)?;
    headers_in_gaps(data, gaps, max_entries)
}

/// The local header offset and payload end of a record whose local header's
/// fixed part is `lfh`: `None` when that is no local header.
fn payload_span(header_offset: u64, compressed_size: u64, lfh: &[u8]) -> Option<(u64, u64)> {
    if le32(lfh, 0) != Some(LFH_SIG) {
        return None;
    }
    let header = LFH_LEN as u64 + u64::from(le16(lfh, 26)?) + u64::from(le16(lfh, 28)?);
    let end = (header_offset.checked_add(header))?.checked_add(compressed_size)?;
    Some((header_offset, end))
}

/// The entries one reading found, to tell which another reading adds.
/// The directory's entries, as a set built the first time another reading
/// needs comparing: an archive every reader agrees on never builds it.
struct Known<'e> {
    entries: &'e [Entry],
    set: std::cell::OnceCell<BTreeSet<(u64, &'e [u8])>>,
}

impl<'e> Known<'e> {
    fn of(entries: &'e [Entry]) -> Known<'e> {
        Known {
            entries,
            set: std::cell::OnceCell::new(),
        }
    }

    fn new_among(&self, entries: Vec<Entry>) -> Vec<Entry> {
        let set = self.set.get_or_init(|| {
            (self.entries.iter())
                .map(|e| (e.header_offset, &e.name[..]))
                .collect()
        });
        (entries.into_iter())
            .filter(|e| !set.contains(&(e.header_offset, &e.name[..])))
            .collect()
    }
}

/// Every other end record within reach of the file's end whose directory a
/// reader could read, and what it adds to `known`: readers that search forward,
/// or skip a record they cannot use, take one of them. For scanners, on the
/// whole file; a load checks only the readers above.
pub fn other_end_records(data: &[u8], known: &[Entry], max_entries: u64) -> Vec<Disagreement> {
    let Ok(last) = find_eocd(data) else {
        return Vec::new();
    };
    let lowest = data.len().saturating_sub(END_RECORD_REACH);
    let known_set = Known::of(known);
    let mut found = Vec::new();
    // Every signature that starts before `last`, nearest first.
    let window = data
        .get(lowest..last.saturating_add(3).min(data.len()))
        .unwrap_or_default();
    for at in signatures(window, EOCD_SIG).rev().map(|i| lowest + i) {
        let Ok(dir) = read_directory(data, at) else {
            continue;
        };
        let entries = reading(data, &dir, at, 0, max_entries);
        let same = entries.len() == known.len() && known_set.new_among(entries.clone()).is_empty();
        if entries.is_empty() || same {
            continue;
        }
        found.push(Disagreement {
            reading: "another end record",
            what: format!("another end record at byte {at} describes another directory"),
            at: at as u64,
            entries: known_set.new_among(entries),
        });
        if found.len() >= 8 {
            break;
        }
    }
    found
}
