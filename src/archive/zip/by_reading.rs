//! An archive read in pieces through `read_at` instead of a map of the whole
//! file: the end records, the central directory, and the local headers and
//! payloads asked for. A remote file, or a multi-gigabyte one of which a scan
//! needs a few kilobytes, is read this way.

use super::*;

/// A directory bigger than this is read through a map rather than into memory.
const MAX_READ_DIRECTORY: u64 = 64 << 20;

/// The entry `wanted` names in an archive of `len` bytes, read in pieces with `read_at`
/// instead of mapping the whole file: the end (for the directory records), the
/// central directory, the record's local header and payload (one read), and the
/// signature (held by that read when the record comes first, as torch writes
/// data.pkl). Mapping a multi-gigabyte file to read a few kilobytes costs more in
/// page tables than the reads do. `None` whenever the pieces cannot settle it (not a zip, a huge
/// directory, any error): the caller then reads the file through a map, which
/// gives the same answer or the precise error.
pub fn read_record<W: Wanted + ?Sized>(
    len: u64,
    read_at: &dyn Fn(u64, usize) -> Option<Vec<u8>>,
    max_entries: u64,
    wanted: &W,
    max_payload: u64,
) -> Option<(Entry, Pieces)> {
    let mut pieces = read_end_and_directory(len, read_at, TAIL_READ)?;
    let (entry, directory_offset) = find_unlocated(&pieces, max_entries, wanted).ok()?;
    if entry.compressed_size > max_payload {
        return None;
    }
    // The directory is spent: dropped first, its memory can take the record.
    pieces.keep_holding(&[entry.header_offset]);
    read_entry_into(&mut pieces, &entry, read_at)?;
    check_signature(&mut pieces, read_at)?;
    let located = locate(&pieces, &entry, directory_offset).ok()?;
    Some((located, pieces))
}

/// Every record's local header offset and compressed size, sorted by offset.
pub type Listed = Vec<(u64, u64)>;

/// What [`read_directory_only`] gives on the whole file, from a read of its end,
/// with that piece for [`read_entry_into`] to add to, less the entries `skip`
/// names: a caller that will never open them need not build them (an encrypted
/// entry is always kept, for [`validate_directory`] to report). `skip` sees each
/// record's name in directory order. `None` when the reads cannot settle it. The
/// caller checks the signature ([`check_signature`]) once it has read the
/// entries it wants: torch writes data.pkl first, so its read usually holds the
/// signature too. Also every record's local header offset and compressed size,
/// sorted by offset, for [`unlisted_local_headers_by_reading`].
pub fn read_directory_by_reading(
    len: u64,
    read_at: &dyn Fn(u64, usize) -> Option<Vec<u8>>,
    first_tail: usize,
    max_entries: u64,
    skip: &mut dyn FnMut(&[u8]) -> bool,
) -> Option<(Index, Pieces, Listed)> {
    let pieces = read_end_and_directory(len, read_at, first_tail)?;
    let eocd = find_eocd(&pieces).ok()?;
    let dir = read_directory(&pieces, eocd).ok()?;
    // Another end record in the directory or after it: the readings of other
    // readers are for a scan of the whole file. (Not in bytes before the
    // directory, held or not as the first read's size falls: the same reads
    // then decide the same, near or far.)
    if readings::other_end_record_signature(&pieces, dir.offset, eocd) {
        return None;
    }
    let mut records = Records::at(&pieces, &dir, eocd, max_entries, 0).ok()?;
    let directory_offset = records.directory_offset;
    let mut entries = Vec::new();
    // The count is the end record's claim: a bound on the memory it may reserve.
    let claimed = usize::try_from(dir.entries.min(max_entries)).unwrap_or(0);
    let mut listed = Vec::with_capacity(claimed.min(MAX_READ_HEADERS));
    for record in records.by_ref() {
        let r = record.ok()?;
        listed.push((r.header_offset, r.compressed_size));
        if !skip(r.name) || unsupported_flags(r.flags).is_some() {
            entries.push(r.unlocated());
        }
    }
    // Other readers' readings are scanned from the whole file.
    let end = readings::End {
        eocd,
        dir,
        records_end: records.pos,
    };
    let disagreements =
        readings::disagreements(&pieces, &end, &[], Payloads::Unlocated, max_entries).ok()?;
    if !disagreements.is_empty() {
        return None;
    }
    listed.sort_unstable();
    let index = Index {
        entries,
        directory_offset,
        disagreements: Vec::new(),
        archive_end: dir.is_contiguous().then(|| archive_end(&pieces, eocd)),
    };
    Some((index, pieces, listed))
}

/// `Some` when the file starts with a local header, as torch requires of a zip
/// checkpoint (a file with anything before its first entry loads differently).
pub fn check_signature(
    pieces: &mut Pieces,
    read_at: &dyn Fn(u64, usize) -> Option<Vec<u8>>,
) -> Option<()> {
    ensure(pieces, 0, 4, read_at)?;
    (pieces.get(0..4)? == LFH_SIG.to_le_bytes()).then_some(())
}

/// Read `entry`'s local header and payload into `pieces`: in one read when the
/// header's extra field is no longer than torch's padding. `None` when they
/// cannot be read or the header does not locate a payload inside the file.
pub fn read_entry_into(
    pieces: &mut Pieces,
    entry: &Entry,
    read_at: &dyn Fn(u64, usize) -> Option<Vec<u8>>,
) -> Option<()> {
    let start = usize::try_from(entry.header_offset).ok()?;
    let both = (LFH_LEN + entry.name.len() + LOCAL_EXTRA_GUESS)
        .checked_add(usize::try_from(entry.compressed_size).ok()?)?
        .min(pieces.len().checked_sub(start)?);
    ensure(pieces, entry.header_offset, both, read_at)?;
    ensure_local_header(pieces, entry, read_at)?;
    let located = locate_entry(pieces, entry).ok()?;
    let payload_len = usize::try_from(located.compressed_size).ok()?;
    ensure(pieces, located.data_offset, payload_len, read_at)
}

/// Every entry of a zip archive of `len` bytes, located through its local
/// header: what [`read_entries`] gives on the whole file, from reads of the end,
/// the directory and each local header, so that no payload is touched. Reading
/// a local header costs a scan far less than faulting in the page of a map that
/// holds it (and, with large folios, its neighbours). `None` whenever the
/// pieces cannot settle it (more than [`MAX_READ_HEADERS`] entries, a huge
/// directory, any error): the caller then reads the file through a map, which
/// gives the same index or the precise error.
pub fn read_entries_by_reading(
    len: u64,
    read_at: &dyn Fn(u64, usize) -> Option<Vec<u8>>,
    max_entries: u64,
) -> Option<Index> {
    let mut pieces = read_end_and_directory(len, read_at, TAIL_READ)?;
    let unlocated = read_entries_with(&pieces, max_entries, Payloads::Unlocated, false).ok()?;
    if unlocated.entries.len() > MAX_READ_HEADERS {
        return None;
    }
    for entry in &unlocated.entries {
        ensure_local_header(&mut pieces, entry, read_at)?;
    }
    read_entries_with(&pieces, max_entries, Payloads::FromLocalHeaders, false).ok()
}

/// Above this many entries, reading each local header costs more than mapping
/// the file: their pages are few and dense (50,000 tiny tensors in 17 MB).
const MAX_READ_HEADERS: usize = 1024;

/// The end records and the whole central directory of an archive of `len`
/// bytes, as one piece from the directory to the end, so no record straddles two.
fn read_end_and_directory(
    len: u64,
    read_at: &dyn Fn(u64, usize) -> Option<Vec<u8>>,
    first_tail: usize,
) -> Option<Pieces> {
    let len_usize = usize::try_from(len).ok()?;
    // The end record is the last 22 bytes of a file without an archive comment;
    // the whole window it may hide in is read only when a short tail lacks it.
    let read_tail = |tail_len: usize| {
        let start = len_usize - tail_len.min(len_usize);
        let mut pieces = Pieces::new(len_usize);
        pieces.add(start, read_at(start as u64, len_usize - start)?);
        let eocd = find_eocd(&pieces).ok()?;
        Some((pieces, start, eocd))
    };
    let (pieces, tail_start, eocd) = match read_tail(first_tail) {
        Some(found) => found,
        // No end record in the last bytes: rarely a zip (a legacy checkpoint, a
        // raw pickle), which its first bytes tell before the whole window is read.
        None => {
            (read_at(0, 4)? == LFH_SIG.to_le_bytes()).then_some(())?;
            read_tail(END_RECORD_REACH)?
        }
    };
    // End records apart from their directory may be another archive's, after
    // this one: a question for a reading of the whole file.
    let dir = read_directory(&pieces, eocd)
        .ok()
        .filter(Directory::is_contiguous)?;
    if dir.offset >= tail_start as u64 {
        return Some(pieces);
    }
    if len.saturating_sub(dir.offset) > MAX_READ_DIRECTORY {
        return None;
    }
    // The tail is spent: freed first, its memory can take the directory.
    drop(pieces);
    let mut pieces = Pieces::new(len_usize);
    let start = usize::try_from(dir.offset).ok()?;
    pieces.add(start, read_at(dir.offset, len_usize.checked_sub(start)?)?);
    Some(pieces)
}

/// Read `entry`'s whole local header (name and extra field) unless it is held.
/// The first read guesses a name as long as the directory's and torch's
/// alignment padding in the extra field, so one read is usually enough.
fn ensure_local_header(
    pieces: &mut Pieces,
    entry: &Entry,
    read_at: &dyn Fn(u64, usize) -> Option<Vec<u8>>,
) -> Option<()> {
    let start = usize::try_from(entry.header_offset).ok()?;
    let guess = (LFH_LEN + entry.name.len() + LOCAL_EXTRA_GUESS)
        .min(pieces.len().checked_sub(start)?)
        .max(LFH_LEN);
    ensure(pieces, entry.header_offset, guess, read_at)?;
    let (span_start, span_len) = local_header_span(pieces, entry)?;
    ensure(pieces, span_start, span_len, read_at)
}

/// torch pads the extra field so payloads start on 64-byte boundaries; a ZIP64
/// extra field adds 20 bytes.
const LOCAL_EXTRA_GUESS: usize = 64 + 20;

/// Read `n` bytes at `offset` into `pieces` unless a piece already holds them.
fn ensure(
    pieces: &mut Pieces,
    offset: u64,
    n: usize,
    read_at: &dyn Fn(u64, usize) -> Option<Vec<u8>>,
) -> Option<()> {
    let start = usize::try_from(offset).ok()?;
    if pieces.get(start..start.checked_add(n)?).is_none() {
        pieces.add(start, read_at(offset, n)?);
    }
    Some(())
}

/// Read into `pieces` the fixed part of the local header at `offset`.
pub fn read_local_header_into(
    pieces: &mut Pieces,
    offset: u64,
    read_at: &dyn Fn(u64, usize) -> Option<Vec<u8>>,
) -> Option<()> {
    let left = pieces.len().checked_sub(usize::try_from(offset).ok()?)?;
    ensure(pieces, offset, LFH_LEN.min(left), read_at)
}

/// [`unlisted_local_headers_near`] from a few reads: the start of each gap it
/// looks at is read into `pieces` once they hold the local headers of the
/// entries `read` and of the last one. `listed` as for [`readings::gaps_near`].
pub fn unlisted_local_headers_by_reading(
    pieces: &mut Pieces,
    listed: &[(u64, u64)],
    read: &[u64],
    directory_offset: u64,
    max_entries: u64,
    read_at: &dyn Fn(u64, usize) -> Option<Vec<u8>>,
) -> Option<Vec<Disagreement>> {
    let gaps = readings::gaps_near(pieces, listed, read.iter().copied(), directory_offset).ok()?;
    for &(start, end) in &gaps {
        let look =
            usize::try_from(end - start).map_or(readings::GAP_LOOK, |n| n.min(readings::GAP_LOOK));
        ensure(pieces, start, look, read_at)?;
    }
    readings::headers_in_gaps(pieces, gaps, max_entries).ok()
}

/// What [`read_record`] reads of the end first: one page, which holds the end
/// records and a directory of up to about 60 entries (torch writes about 60
/// bytes per entry); a bigger directory costs one more read, of exactly the
/// directory. Each page a first call fills is a fresh one here (a page fault,
/// 1.3-2 us): a 16 KiB first read cost a first `get_unsafe_globals_in_checkpoint`
/// of a 26-entry checkpoint three more faults (59 -> 52 us when cut to a page),
/// while GPT-2 small (154 entries, a 9 KiB directory) pays the second read about
/// what the page it no longer fills saved (78 vs 79 us).
pub const TAIL_READ: usize = 4 << 10;

/// The end records of a ZIP64 archive without a comment: the least a first read
/// of the end may take and still find them, where each read is a round trip and
/// the bytes before them are tensor payload.
pub const END_RECORDS_LEN: usize = ZIP64_EOCD_LEN + ZIP64_LOCATOR_LEN + EOCD_LEN;
