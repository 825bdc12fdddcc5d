//! A strict, zero-copy ZIP/ZIP64 reader over `&[u8]`: the central directory is
//! the truth, every range is checked to lie inside the input, and entries may not
//! overlap, repeat a name or be encrypted. Nothing is allocated from a declared
//! count before that count is checked against the bytes that could hold it.
//!
//! We read the format ourselves rather than through a zip crate because the checks
//! that matter here (encryption flags, local/central disagreements, overlapping
//! ranges, exact payload offsets) need every header field, and the general-purpose
//! readers keep some of them private.

use std::borrow::Cow;

use crate::archive::decompress;
use crate::archive::entry_name::EntryName;
use crate::archive::method::Method;
use crate::error::{check_limit, Error, Location};
use crate::limits::Limit;

mod by_reading;
mod directory;
mod payload;
mod readings;

pub use directory::{archive_sequence, first_archive_end, holds_end_record_signature};
use directory::*;
pub use by_reading::{END_RECORDS_LEN, TAIL_READ, check_signature, read_directory_by_reading, read_entries_by_reading, read_entry_into, read_local_header_into, read_record, unlisted_local_headers_by_reading};
pub use payload::Payload;
pub use readings::{other_end_records, unlisted_local_headers_near, Disagreement};

const EOCD_SIG: u32 = 0x0605_4b50;
const EOCD_LEN: usize = 22;
const ZIP64_LOCATOR_SIG: u32 = 0x0706_4b50;
const ZIP64_LOCATOR_LEN: usize = 20;
const ZIP64_EOCD_SIG: u32 = 0x0606_4b50;
const ZIP64_EOCD_LEN: usize = 56;
const CDH_SIG: u32 = 0x0201_4b50;
const CDH_LEN: usize = 46;
const LFH_SIG: u32 = 0x0403_4b50;
const LFH_LEN: usize = 30;
const ZIP64_EXTRA: u16 = 0x0001;
const MAX_COMMENT: usize = 0xffff;
/// How far back from a file's end an end record is looked for: the record, the
/// longest comment, and the 1 KiB more Go's reader searches (66,560 bytes in all;
/// minizip 66,559; Python's zipfile, Java's and miniz, torch's, 65,557). An end
/// record further back is one none of them finds.
const END_RECORD_REACH: usize = EOCD_LEN + MAX_COMMENT + 1024;

/// General-purpose flag bits that mean the payload is encrypted, or (bit 13)
/// that the local headers are masked; torch's reader refuses all three.
const FLAG_ENCRYPTED: u16 = 0x0001;
const FLAG_STRONG_ENCRYPTION: u16 = 0x0040;
const FLAG_MASKED_HEADERS: u16 = 0x2000;
const FLAGS_ENCRYPTION: u16 = FLAG_ENCRYPTED | FLAG_STRONG_ENCRYPTION | FLAG_MASKED_HEADERS;
/// A payload that is a binary patch against a file the archive does not hold.
const FLAG_PATCH_DATA: u16 = 0x0020;

/// Why an entry with these general-purpose flags cannot be read, if it cannot.
fn unsupported_flags(flags: u16) -> Option<&'static str> {
    if flags & FLAGS_ENCRYPTION != 0 {
        Some("encrypted entries are not supported")
    } else if flags & FLAG_PATCH_DATA != 0 {
        Some("patch data entries (flag bit 5) are not supported")
    } else {
        None
    }
}

/// One entry, as the central directory describes it, with its payload located
/// through the local header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub name: EntryName,
    pub method: Method,
    pub flags: u16,
    pub crc32: u32,
    pub compressed_size: u64,
    pub uncompressed_size: u64,
    pub header_offset: u64,
    /// Where the (possibly compressed) payload starts.
    pub data_offset: u64,
    /// How the local header contradicts the central directory (name, method or
    /// sizes), if it does. A strict read refuses such an entry; a scanner reports it.
    pub disagreement: Option<&'static str>,
}

impl Entry {
    pub fn name_lossy(&self) -> String {
        String::from_utf8_lossy(&self.name).into_owned()
    }

    pub fn data_end(&self) -> u64 {
        self.data_offset.saturating_add(self.compressed_size)
    }

    /// Where the payload lies and how it is stored: how its bytes are read.
    pub fn payload(&self) -> Payload {
        Payload {
            offset: self.data_offset,
            stored_size: self.compressed_size,
            method: self.method,
            flags: self.flags,
        }
    }

    /// The payload's raw (possibly compressed) bytes.
    pub fn raw<'d, D: FileBytes + ?Sized>(&self, data: &'d D) -> Result<&'d [u8], Error> {
        self.payload().stored(data, || self.name_lossy())
    }

    /// The payload, decoded: borrowed from `data` when stored (its compressed size
    /// of bytes, whatever the other size says: the strict readers refuse such an
    /// entry before they read it), else decompressed into a buffer of exactly the
    /// size the entry declares, which may be at most `cap` bytes (past it, a
    /// `limit` error, before anything is allocated).
    pub fn read<'d, D: FileBytes + ?Sized>(
        &self,
        data: &'d D,
        limit: Limit,
        cap: u64,
    ) -> Result<Cow<'d, [u8]>, Error> {
        let raw = self.raw(data)?;
        if self.method == Method::Stored {
            return Ok(Cow::Borrowed(raw));
        }
        let name = self.name_lossy();
        decompress::check_entry(
            self.method,
            self.compressed_size,
            self.uncompressed_size,
            &name,
        )?;
        check_limit(limit, self.uncompressed_size, cap, || {
            Location::entry(&name)
        })?;
        let len = usize::try_from(self.uncompressed_size)
            .map_err(|_| Error::limit(limit, cap, Location::entry(&name)))?;
        let mut out = vec![0u8; len];
        self.payload().read_into(data, &mut out, || name.clone())?;
        Ok(Cow::Owned(out))
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Index {
    pub entries: Vec<Entry>,
    /// Offset of the central directory.
    pub directory_offset: u64,
    /// Where other zip readers read the file differently (see [`readings`]).
    pub disagreements: Vec<Disagreement>,
    /// Just past the end record and its comment: where the archive ends in a
    /// stream that goes on after it. None when the directory does not end where
    /// its end records begin: then the end records may be those of something
    /// after the archive (a stream of several, read from the last one's end).
    pub archive_end: Option<u64>,
}

/// The bytes of an archive file as the reader sees them, addressed by file
/// offset: the whole file in memory (a map or a buffer), or only the pieces of it
/// a reader fetched (see [`Pieces`]). A range the bytes do not hold is `None`,
/// exactly like a range past the end of the file.
pub trait FileBytes {
    /// The length of the whole file.
    fn len(&self) -> usize;
    fn get(&self, range: std::ops::Range<usize>) -> Option<&[u8]>;

    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The whole file, when it is all in memory.
    fn whole(&self) -> Option<&[u8]> {
        None
    }

    /// Copy `dst.len()` bytes from `offset` into `dst`; `None` when the range
    /// lies outside the file. A source with a file copies with `pread`.
    fn copy_into(&self, offset: u64, dst: &mut [u8]) -> Option<std::io::Result<()>> {
        let start = usize::try_from(offset).ok()?;
        dst.copy_from_slice(self.get(start..start.checked_add(dst.len())?)?);
        Some(Ok(()))
    }
}

impl FileBytes for [u8] {
    fn len(&self) -> usize {
        <[u8]>::len(self)
    }

    fn get(&self, range: std::ops::Range<usize>) -> Option<&[u8]> {
        <[u8]>::get(self, range)
    }

    fn whole(&self) -> Option<&[u8]> {
        Some(self)
    }
}

/// Some ranges of a file, read into memory at their offsets, kept in order of
/// offset so that finding one of thousands of local headers is a binary search.
pub struct Pieces {
    len: usize,
    pieces: Vec<(usize, Vec<u8>)>,
    /// `reach[i]`: the furthest end of `pieces[..=i]`. Pieces may overlap (a read
    /// of a header that runs into the next), so a range can lie in an earlier
    /// piece than the last one starting before it; this bounds how far back to look.
    reach: Vec<usize>,
}

impl Pieces {
    pub fn new(len: usize) -> Pieces {
        Pieces {
            len,
            pieces: Vec::new(),
            reach: Vec::new(),
        }
    }

    pub fn add(&mut self, offset: usize, bytes: Vec<u8>) {
        let at = self.pieces.partition_point(|(start, _)| *start <= offset);
        let end = offset.saturating_add(bytes.len());
        self.pieces.insert(at, (offset, bytes));
        let before = at.checked_sub(1).and_then(|i| self.reach.get(i)).copied();
        self.reach.insert(at, before.unwrap_or(0).max(end));
        for reach in self.reach.iter_mut().skip(at + 1) {
            *reach = (*reach).max(end);
        }
    }

    /// Whether no bytes are held yet.
    pub fn holds_nothing(&self) -> bool {
        self.pieces.is_empty()
    }

    /// Drop every piece that holds none of `offsets`. Freed before the next reads,
    /// their memory can take them: a process's first scan pays a page fault for
    /// each fresh page it fills (GPT-2 small: 4 of 15 were the spent directory's).
    pub fn keep_holding(&mut self, offsets: &[u64]) {
        let holds = |(start, bytes): &(usize, Vec<u8>)| {
            let end = start.saturating_add(bytes.len());
            (offsets.iter()).any(|&o| usize::try_from(o).is_ok_and(|o| *start <= o && o < end))
        };
        let kept: Vec<(usize, Vec<u8>)> = std::mem::take(&mut self.pieces)
            .into_iter()
            .filter(holds)
            .collect();
        self.reach.clear();
        for (start, bytes) in kept {
            self.add(start, bytes);
        }
    }
}

impl FileBytes for Pieces {
    fn len(&self) -> usize {
        self.len
    }

    fn get(&self, range: std::ops::Range<usize>) -> Option<&[u8]> {
        fn within<'p>(
            (start, bytes): &'p (usize, Vec<u8>),
            range: &std::ops::Range<usize>,
        ) -> Option<&'p [u8]> {
            let from = range.start.checked_sub(*start)?;
            let to = range.end.checked_sub(*start)?;
            bytes.get(from..to)
        }
        let last = self
            .pieces
            .partition_point(|(start, _)| *start <= range.start);
        let candidates = self.pieces.get(..last).unwrap_or_default();
        let reaches = self.reach.get(..last).unwrap_or_default();
        candidates
            .iter()
            .zip(reaches)
            .rev()
            .take_while(|(_, reach)| **reach >= range.end)
            .find_map(|(p, _)| within(p, &range))
    }
}

/// Read and validate the central directory of `data`.
pub fn read_index(data: &[u8], max_entries: u64) -> Result<Index, Error> {
    let index = read_entries(data, max_entries)?;
    validate(&index)?;
    Ok(index)
}

/// The whole-archive rules a load insists on: no encrypted entry, no local header
/// that contradicts the central directory, no shared bytes, no repeated name.
pub fn validate(index: &Index) -> Result<(), Error> {
    if let Some(d) = index.disagreements.first() {
        return Err(d.error());
    }
    let mut disagreeing = index.entries.iter();
    if let Some((e, what)) = disagreeing.find_map(|e| e.disagreement.map(|what| (e, what))) {
        return Err(disagreement_error(e, what));
    }
    validate_entries(index)
}

/// [`validate`] but for the disagreements of readers (other readings, local
/// headers that contradict the directory), which a scanner reports one by one.
pub fn validate_entries(index: &Index) -> Result<(), Error> {
    for e in &index.entries {
        if let Some(why) = unsupported_flags(e.flags) {
            return Err(Error::archive(why, entry_location(e)));
        }
    }
    check_layout(&index.entries, index.directory_offset)
}

/// The rules of [`validate`] that the central directory alone settles (no
/// encrypted entry, no repeated name among the entries `read`), for an index
/// of [`read_directory_only`].
pub fn validate_directory<'i>(
    index: &'i Index,
    read: impl Iterator<Item = &'i Entry>,
) -> Result<(), Error> {
    for e in &index.entries {
        if let Some(why) = unsupported_flags(e.flags) {
            return Err(Error::archive(why, entry_location(e)));
        }
    }
    check_names(read)
}

pub fn disagreement_error(entry: &Entry, what: &str) -> Error {
    Error::archive(
        format!("the local header and the central directory disagree: {what}"),
        entry_location(entry),
    )
}

/// The central directory's entries with no local header read: every payload
/// unlocated until [`locate_entry`] reads its header.
pub fn read_directory_only(data: &[u8], max_entries: u64) -> Result<Index, Error> {
    read_entries_with(data, max_entries, Payloads::Unlocated, false)
}

/// Locate one entry's payload through its local header, reporting (not
/// refusing) a header that contradicts the central directory.
pub fn locate_entry<D: FileBytes + ?Sized>(data: &D, entry: &Entry) -> Result<Entry, Error> {
    locate_payload(data, &Record::of(entry))
}

/// Read the central directory without the whole-archive checks (duplicates,
/// overlaps), so a scanner can still look inside a file that breaks them.
pub fn read_entries(data: &[u8], max_entries: u64) -> Result<Index, Error> {
    read_entries_with(data, max_entries, Payloads::FromLocalHeaders, false)
}

/// The central directory of an archive that may follow other bytes (a zip glued
/// after a pickle, a self-extractor): offsets are shifted by the prefix, as
/// Python's zipfile and Info-ZIP do. For scanners; a load never does this.
pub fn read_entries_after_prefix(data: &[u8], max_entries: u64) -> Result<Index, Error> {
    read_entries_with(data, max_entries, Payloads::FromLocalHeaders, true)
}

/// The entry a search of a directory is for. An archive's layout may place it
/// relative to its first entry (torch's records live in the first entry's folder).
pub trait Wanted {
    /// The entry's name in an archive whose first entry is `first`.
    fn name_in(&self, first: &[u8]) -> String;
    /// Whether `name` names the entry called `wanted` (by [`Wanted::name_in`]).
    fn is(&self, wanted: &[u8], name: &[u8]) -> bool;
    /// What the entry is called, for refusals (`data.pkl`).
    fn what(&self) -> &str;
}

/// The one entry `wanted` names, found as torch's reader finds a record: through
/// the central directory, then that entry's own local header only. A big
/// checkpoint has a local header every few megabytes; reading only one keeps a
/// scan to a few pages of the file. Refused like a load refuses them: a second
/// entry `wanted` takes (names that differ only in case), an encrypted entry, a
/// local header that contradicts the directory.
pub fn find_record<D: FileBytes + ?Sized, W: Wanted + ?Sized>(
    data: &D,
    max_entries: u64,
    wanted: &W,
) -> Result<Entry, Error> {
    let (entry, directory_offset) = find_unlocated(data, max_entries, wanted)?;
    locate(data, &entry, directory_offset)
}

/// The entry `wanted` names, as the central directory describes it, its payload
/// not yet located, and the directory's offset (which no payload may reach).
pub fn find_unlocated<D: FileBytes + ?Sized, W: Wanted + ?Sized>(
    data: &D,
    max_entries: u64,
    wanted: &W,
) -> Result<(Entry, u64), Error> {
    // Every record is read (a malformed one fails the archive as it fails a
    // load), but none is copied: a directory of 50,000 names is searched in place.
    let eocd = find_eocd(data)?;
    let dir = read_directory(data, eocd)?;
    let mut records = Records::at(data, &dir, eocd, max_entries, 0)?;
    let directory_offset = records.directory_offset;
    let first = records
        .next()
        .ok_or_else(|| Error::archive("the archive has no entries", Location::default()))??;
    let wanted_name = wanted.name_in(first.name);
    let (mut found, mut twin) = (None, None);
    for r in std::iter::once(Ok(first)).chain(records.by_ref()) {
        let r = r?;
        if !wanted.is(wanted_name.as_bytes(), r.name) {
            continue;
        }
        if found.is_none() {
            found = Some(r);
        } else if twin.is_none() {
            twin = Some(r);
        }
    }
    let end = readings::End {
        eocd,
        dir,
        records_end: records.pos,
    };
    if let Some(d) =
        readings::disagreements(data, &end, &[], Payloads::Unlocated, max_entries)?.first()
    {
        return Err(d.error());
    }
    let entry = found.map(|r| r.unlocated()).ok_or_else(|| {
        Error::archive(
            format!("the archive has no {} record", wanted.what()),
            Location::entry(&wanted_name),
        )
    })?;
    if let Some(twin) = twin {
        return Err(Error::archive(
            "two records whose names differ only in case",
            entry_location(&twin.unlocated()),
        ));
    }
    if let Some(why) = unsupported_flags(entry.flags) {
        return Err(Error::archive(why, entry_location(&entry)));
    }
    Ok((entry, directory_offset))
}

/// The bytes `locate` reads for `entry`: its local header, name and extra field.
/// `None` until the fixed part of the header (at `header_offset`) is available.
pub fn local_header_span<D: FileBytes + ?Sized>(data: &D, entry: &Entry) -> Option<(u64, usize)> {
    let start = usize::try_from(entry.header_offset).ok()?;
    let lfh = data.get(start..start.checked_add(LFH_LEN)?)?;
    let name_len = usize::from(le16(lfh, 26)?);
    let extra_len = usize::from(le16(lfh, 28)?);
    Some((entry.header_offset, LFH_LEN + name_len + extra_len))
}

/// Find the payload of an entry from `find_unlocated` through its own local
/// header, refusing a header that contradicts the central directory.
pub fn locate<D: FileBytes + ?Sized>(
    data: &D,
    entry: &Entry,
    directory_offset: u64,
) -> Result<Entry, Error> {
    let located = locate_entry(data, entry)?;
    if let Some(what) = located.disagreement {
        return Err(disagreement_error(entry, what));
    }
    if located.data_end() > directory_offset {
        return Err(Error::archive(
            "the record's data runs into the central directory",
            entry_location(entry),
        ));
    }
    Ok(located)
}

fn entry_location(e: &Entry) -> Location {
    Location {
        entry: Some(e.name_lossy()),
        offset: Some(e.header_offset),
        opcode: None,
    }
}

/// How payload offsets are found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Payloads {
    /// Leave them unknown (0), for a reader that locates the entries it reads.
    Unlocated,
    /// Read each local header for its name and extra lengths.
    FromLocalHeaders,
}

fn read_entries_with<D: FileBytes + ?Sized>(
    data: &D,
    max_entries: u64,
    payloads: Payloads,
    prefix: bool,
) -> Result<Index, Error> {
    let eocd = find_eocd(data)?;
    let dir = read_directory(data, eocd)?;
    let shift = if prefix { dir.prefix() } else { 0 };
    let mut records = Records::at(data, &dir, eocd, max_entries, shift)?;
    let directory_offset = records.directory_offset;
    let mut entries = Vec::with_capacity(records.remaining as usize);
    for record in records.by_ref() {
        let r = record?;
        entries.push(match payloads {
            Payloads::Unlocated => r.unlocated(),
            Payloads::FromLocalHeaders => locate_payload(data, &r)?,
        });
    }
    let mut index = Index {
        entries,
        directory_offset,
        disagreements: Vec::new(),
        archive_end: dir.is_contiguous().then(|| archive_end(data, eocd)),
    };
    // A zip after a prefix is already another reader's reading of the file.
    if !prefix {
        let end = readings::End {
            eocd,
            dir,
            records_end: records.pos,
        };
        index.disagreements =
            readings::disagreements(data, &end, &index.entries, payloads, max_entries)?;
    }
    Ok(index)
}

/// One central directory record, borrowed from the archive's bytes.
struct Record<'d> {
    name: &'d [u8],
    method: u16,
    flags: u16,
    crc32: u32,
    compressed_size: u64,
    uncompressed_size: u64,
    header_offset: u64,
}

impl<'d> Record<'d> {
    fn of(entry: &'d Entry) -> Self {
        Record {
            name: &entry.name,
            method: entry.method.code(),
            flags: entry.flags,
            crc32: entry.crc32,
            compressed_size: entry.compressed_size,
            uncompressed_size: entry.uncompressed_size,
            header_offset: entry.header_offset,
        }
    }

    fn unlocated(&self) -> Entry {
        Entry {
            name: self.name.into(),
            method: Method::from_code(self.method),
            flags: self.flags,
            crc32: self.crc32,
            compressed_size: self.compressed_size,
            uncompressed_size: self.uncompressed_size,
            header_offset: self.header_offset,
            data_offset: 0,
            disagreement: None,
        }
    }
}

/// The records of a central directory, in order, checked as they are read: the
/// first malformed one ends the iteration with its error.
struct Records<'d, D: ?Sized> {
    data: &'d D,
    pos: usize,
    end: u64,
    remaining: u64,
    /// How far a prefix before the archive moves every offset.
    shift: u64,
    directory_offset: u64,
}

impl<'d, D: FileBytes + ?Sized> Records<'d, D> {
    /// The records of `dir` (whose end record is at `eocd`), every offset moved
    /// by `shift`.
    fn at(
        data: &'d D,
        dir: &Directory,
        eocd: usize,
        max_entries: u64,
        shift: u64,
    ) -> Result<Self, Error> {
        let mut dir = Directory { ..*dir };
        dir.offset = dir.offset.saturating_add(shift);
        check_limit(Limit::ZipEntries, dir.entries, max_entries, || {
            Location::at(eocd as u64)
        })?;
        let end = dir
            .offset
            .checked_add(dir.size)
            .filter(|end| *end <= eocd as u64);
        let end = end.ok_or_else(|| bad("central directory lies outside the file", dir.offset))?;
        // Each record takes at least 46 bytes: a count the directory cannot hold is a lie.
        if dir.entries.saturating_mul(CDH_LEN as u64) > dir.size {
            return Err(bad(
                format!(
                    "{} entries cannot fit in a central directory of {} bytes",
                    dir.entries, dir.size
                ),
                dir.offset,
            ));
        }
        Ok(Records {
            data,
            pos: dir.offset as usize,
            end,
            remaining: dir.entries,
            shift,
            directory_offset: dir.offset,
        })
    }

    fn read(&mut self) -> Result<Record<'d>, Error> {
        let (data, pos, end) = (self.data, self.pos, self.end);
        let at = pos as u64;
        let head = data
            .get(pos..pos + CDH_LEN)
            .filter(|_| pos as u64 + CDH_LEN as u64 <= end);
        let head = head.ok_or_else(|| bad("central directory truncated", at))?;
        if le32(head, 0) != Some(CDH_SIG) {
            return Err(bad("bad central directory header signature", at));
        }
        let h16 = |o: usize| le16(head, o).unwrap_or(0);
        let h32 = |o: usize| le32(head, o).unwrap_or(0);
        // The disk an entry starts on: torch's reader takes 1 as well as 0.
        if h16(34) > 1 {
            return Err(bad("multi-disk zip archives are not supported", at));
        }
        let (name_len, extra_len, comment_len) = (
            usize::from(h16(28)),
            usize::from(h16(30)),
            usize::from(h16(32)),
        );
        let record_end = pos + CDH_LEN + name_len + extra_len + comment_len;
        if record_end as u64 > end {
            return Err(bad("central directory record runs past the directory", at));
        }
        let name = data
            .get(pos + CDH_LEN..pos + CDH_LEN + name_len)
            .unwrap_or_default();
        let extra = data
            .get(pos + CDH_LEN + name_len..pos + CDH_LEN + name_len + extra_len)
            .unwrap_or_default();
        let (mut usize_, mut csize, mut offset) =
            (u64::from(h32(24)), u64::from(h32(20)), u64::from(h32(42)));
        apply_zip64(extra, &mut usize_, &mut csize, &mut offset, at)?;
        self.pos = record_end;
        Ok(Record {
            name,
            method: h16(10),
            flags: h16(8),
            crc32: h32(16),
            compressed_size: csize,
            uncompressed_size: usize_,
            header_offset: offset.saturating_add(self.shift),
        })
    }
}

impl<'d, D: FileBytes + ?Sized> Iterator for Records<'d, D> {
    type Item = Result<Record<'d>, Error>;

    fn next(&mut self) -> Option<Self::Item> {
        self.remaining = self.remaining.checked_sub(1)?;
        let record = self.read();
        if record.is_err() {
            self.remaining = 0;
        }
        Some(record)
    }
}

/// Find the payload through the local header, whose name and extra lengths may
/// differ from the central directory's.
fn locate_payload<D: FileBytes + ?Sized>(data: &D, record: &Record) -> Result<Entry, Error> {
    let &Record {
        name,
        method,
        compressed_size,
        uncompressed_size,
        header_offset,
        ..
    } = record;
    let fail = |reason: &str| {
        Error::archive(
            reason,
            Location {
                entry: Some(String::from_utf8_lossy(name).into_owned()),
                offset: Some(header_offset),
                opcode: None,
            },
        )
    };
    let lfh = usize::try_from(header_offset)
        .ok()
        .and_then(|o| Some((o, data.get(o..o.checked_add(LFH_LEN)?)?)));
    let (lfh_pos, lfh) = lfh.ok_or_else(|| fail("local header lies outside the file"))?;
    if le32(lfh, 0) != Some(LFH_SIG) {
        return Err(fail("bad local header signature"));
    }
    let (name_len, extra_len) = (
        usize::from(le16(lfh, 26).unwrap_or(0)),
        usize::from(le16(lfh, 28).unwrap_or(0)),
    );
    let local_name = data.get(lfh_pos + LFH_LEN..lfh_pos + LFH_LEN + name_len);
    let local_method = le16(lfh, 8).unwrap_or(0);
    let local_sizes = (le32(lfh, 18).unwrap_or(0), le32(lfh, 22).unwrap_or(0));
    let sizes_in_descriptor = le16(lfh, 6).unwrap_or(0) & 0x0008 != 0;
    let zip64_sizes = local_sizes.0 == u32::MAX || local_sizes.1 == u32::MAX;
    let disagreement = if local_name != Some(name) {
        Some("name")
    } else if local_method != method {
        Some("compression method")
    } else if !sizes_in_descriptor
        && !zip64_sizes
        && (u64::from(local_sizes.0) != compressed_size
            || u64::from(local_sizes.1) != uncompressed_size)
    {
        Some("sizes")
    } else if method == 0 && compressed_size != uncompressed_size {
        Some("a stored entry with two different sizes")
    } else {
        None
    };
    let data_offset = header_offset + (LFH_LEN + name_len + extra_len) as u64;
    let fits = data_offset
        .checked_add(compressed_size)
        .is_some_and(|end| end <= data.len() as u64);
    if !fits {
        return Err(fail("entry data runs past the end of the file"));
    }
    Ok(Entry {
        data_offset,
        disagreement,
        ..record.unlocated()
    })
}

/// No two entries may share a name or a byte, and none may reach into the directory.
pub fn check_layout(entries: &[Entry], directory_offset: u64) -> Result<(), Error> {
    check_names(entries.iter())?;
    let mut by_offset: Vec<&Entry> = entries.iter().collect();
    by_offset.sort_unstable_by_key(|e| e.header_offset);
    for pair in by_offset.windows(2) {
        if let [a, b] = pair {
            if a.data_end() > b.header_offset {
                return Err(Error::archive(
                    format!("entry overlaps entry '{}'", a.name_lossy()),
                    Location {
                        entry: Some(b.name_lossy()),
                        offset: Some(b.header_offset),
                        opcode: None,
                    },
                ));
            }
        }
    }
    if let Some(last) = by_offset.last() {
        if last.data_end() > directory_offset {
            return Err(Error::archive(
                "entry data overlaps the central directory",
                Location {
                    entry: Some(last.name_lossy()),
                    offset: Some(last.header_offset),
                    opcode: None,
                },
            ));
        }
    }
    Ok(())
}

fn check_names<'e>(entries: impl Iterator<Item = &'e Entry>) -> Result<(), Error> {
    let entries: Vec<&Entry> = entries.collect();
    let is_twin = |i: usize, e: &&Entry| entries.iter().take(i).any(|p| p.name == e.name);
    let twin = if entries.len() <= FEW_NAMES {
        // A hash set's `RandomState` seeds itself from the OS on first use: a
        // system call that a one-pickle scan would pay to compare one name.
        (entries.iter().enumerate()).find_map(|(i, e)| is_twin(i, e).then_some(*e))
    } else {
        let mut names = std::collections::HashSet::with_capacity(entries.len());
        entries.iter().copied().find(|e| !names.insert(&*e.name))
    };
    match twin {
        Some(twin) => Err(Error::archive("duplicate entry name", entry_location(twin))),
        None => Ok(()),
    }
}

/// Up to this many names are compared pairwise instead of hashed.
const FEW_NAMES: usize = 8;

/// Local headers read one after another from the start, as a streaming reader
/// sees an archive whose central directory is missing or damaged. For scanners:
/// what such a reader could extract is what must be inspected.
pub fn walk_local_headers(data: &[u8], max_entries: u64) -> Vec<Entry> {
    let mut entries = Vec::new();
    let mut pos = 0usize;
    while (entries.len() as u64) < max_entries {
        let Some(head) = data.get(pos..pos.saturating_add(LFH_LEN)) else {
            break;
        };
        if le32(head, 0) != Some(LFH_SIG) {
            break;
        }
        let h16 = |o: usize| le16(head, o).unwrap_or(0);
        let h32 = |o: usize| le32(head, o).unwrap_or(0);
        let (flags, method, name_len, extra_len) =
            (h16(6), h16(8), usize::from(h16(26)), usize::from(h16(28)));
        let start = pos + LFH_LEN + name_len + extra_len;
        let Some(name) = data.get(pos + LFH_LEN..pos + LFH_LEN + name_len) else {
            break;
        };
        let declared = u64::from(h32(18));
        let size = if flags & 0x0008 != 0 && declared == 0 {
            // Sizes live in a data descriptor: the entry runs to the next signature.
            let rest = data.get(start..).unwrap_or_default();
            let next = rest
                .windows(4)
                .position(|w| w == b"PK\x07\x08" || w == b"PK\x03\x04" || w == b"PK\x01\x02");
            next.unwrap_or(rest.len()) as u64
        } else {
            declared
        };
        let Some(end) = (start as u64)
            .checked_add(size)
            .filter(|end| *end <= data.len() as u64)
        else {
            break;
        };
        entries.push(Entry {
            name: name.into(),
            method: Method::from_code(method),
            flags,
            crc32: h32(14),
            compressed_size: size,
            uncompressed_size: u64::from(h32(22)),
            header_offset: pos as u64,
            data_offset: start as u64,
            disagreement: None,
        });
        pos = end as usize;
        if data.get(pos..pos + 4) == Some(b"PK\x07\x08") {
            pos += 16;
        }
    }
    entries
}
