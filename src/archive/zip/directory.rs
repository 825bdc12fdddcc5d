//! The end records and the central directory: where an archive ends, how many
//! entries it lists and where each one's local header lies, ZIP64 included.

use super::*;

pub(super) fn le16<D: FileBytes + ?Sized>(data: &D, at: usize) -> Option<u16> {
    let b = data.get(at..at.checked_add(2)?)?;
    Some(u16::from_le_bytes([*b.first()?, *b.get(1)?]))
}

pub(super) fn le32<D: FileBytes + ?Sized>(data: &D, at: usize) -> Option<u32> {
    let b: [u8; 4] = data.get(at..at.checked_add(4)?)?.try_into().ok()?;
    Some(u32::from_le_bytes(b))
}

pub(super) fn le64<D: FileBytes + ?Sized>(data: &D, at: usize) -> Option<u64> {
    let b: [u8; 8] = data.get(at..at.checked_add(8)?)?.try_into().ok()?;
    Some(u64::from_le_bytes(b))
}

pub(super) fn bad(reason: impl Into<String>, offset: u64) -> Error {
    Error::archive(reason, Location::at(offset))
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Directory {
    pub(super) entries: u64,
    pub(super) size: u64,
    pub(super) offset: u64,
    /// Where the directory must end: the (ZIP64) end record that follows it.
    pub(super) end_at: u64,
    /// The ZIP64 end record runs up to its locator, as writers leave it (always
    /// so without one). Not so when the locator is another archive's, after it.
    pub(super) end_records_adjoin: bool,
}

impl Directory {
    /// How far the directory ends before its end record: bytes Python's zipfile
    /// takes for a prefix glued before the archive, moving every offset by them.
    pub(super) fn prefix(&self) -> u64 {
        (self.end_at).saturating_sub(self.offset.saturating_add(self.size))
    }

    /// Directory and end records one after another, nothing between them: the
    /// archive ends with the end record that was read.
    pub(super) fn is_contiguous(&self) -> bool {
        self.end_records_adjoin && self.offset.saturating_add(self.size) == self.end_at
    }
}

/// Find the end-of-central-directory record: the last signature whose record and
/// comment fit. Trailing bytes after it are tolerated, as torch's reader does.
pub(super) fn find_eocd<D: FileBytes + ?Sized>(data: &D) -> Result<usize, Error> {
    if data.len() < EOCD_LEN {
        return Err(bad("file too short to be a zip archive", 0));
    }
    let lowest = data.len().saturating_sub(END_RECORD_REACH);
    let mut pos = data.len() - EOCD_LEN;
    loop {
        if le32(data, pos) == Some(EOCD_SIG) {
            return Ok(pos);
        }
        if pos == lowest {
            return Err(bad(
                "no end of central directory record: not a zip archive or truncated",
                data.len() as u64,
            ));
        }
        pos -= 1;
    }
}

/// Where the first whole archive at the start of `data` ends, when more follows
/// it (a stream that goes on with other objects, even other archives): just past
/// the first end record whose directory ends right before it (or before its
/// ZIP64 records), as a writer that started at offset 0 leaves them. The search
/// starts after the entries, walked by their local headers.
pub fn first_archive_end(data: &[u8], max_entries: u64) -> Option<usize> {
    let entries = walk_local_headers(data, max_entries);
    let mut from = entries.last().map_or(0, |e| e.data_end() as usize);
    while let Some(found) = signatures(data.get(from..)?, EOCD_SIG).next() {
        let eocd = from + found;
        if read_directory(data, eocd).is_ok_and(|dir| dir.is_contiguous()) {
            return usize::try_from(archive_end(data, eocd)).ok();
        }
        from = eocd + 1;
    }
    None
}

/// The archives, one right after another, that make up `data` (a stream that
/// several `torch.save` calls wrote, as a distributed checkpoint's `.distcp`
/// files are), each as its byte range. None unless there are at least two and
/// they cover `data` to its last byte.
pub fn archive_sequence(data: &[u8], max_entries: u64) -> Option<Vec<std::ops::Range<usize>>> {
    let mut parts = Vec::new();
    let mut start = 0usize;
    while start < data.len() {
        let rest = data.get(start..)?;
        if le32(rest, 0) != Some(LFH_SIG) {
            return None;
        }
        let end = start.checked_add(first_archive_end(rest, max_entries)?)?;
        parts.push(start..end);
        start = end;
    }
    (parts.len() >= 2).then_some(parts)
}

/// Where `signature` starts in `bytes`, first to last (`.rev()` for nearest the
/// end first): found by its last byte, a vectorised search, then checked whole.
/// A byte-by-byte look through a zip's end-record window was half of a
/// full scan.
pub(crate) fn signatures(
    bytes: &[u8],
    signature: u32,
) -> impl DoubleEndedIterator<Item = usize> + '_ {
    let sig = signature.to_le_bytes();
    memchr::memchr_iter(sig[3], bytes)
        .filter_map(|i| i.checked_sub(3))
        .filter(move |&i| bytes.get(i..i + 4) == Some(&sig[..]))
}

/// Does `bytes` hold an end record's signature anywhere? Every pickle a scan
/// reads is searched for one (a zip glued after it).
pub fn holds_end_record_signature(bytes: &[u8]) -> bool {
    signatures(bytes, EOCD_SIG).next().is_some()
}

/// Just past the end record at `eocd` and the comment it declares, within the file.
pub(super) fn archive_end<D: FileBytes + ?Sized>(data: &D, eocd: usize) -> u64 {
    let comment = le16(data, eocd + 20).map_or(0, usize::from);
    (eocd.saturating_add(EOCD_LEN).saturating_add(comment)).min(data.len()) as u64
}

/// The directory the classic end record at `eocd` describes, and whether it
/// describes a split archive.
pub(super) fn classic_directory<D: FileBytes + ?Sized>(
    data: &D,
    eocd: usize,
) -> Result<(Directory, bool), Error> {
    // The record at once: each field read through pieces would look them up again.
    let record = (data.get(eocd..eocd.saturating_add(EOCD_LEN)))
        .ok_or_else(|| bad("truncated end of central directory", eocd as u64))?;
    let field16 = |at: usize| le16(record, at).map_or(0, u64::from);
    let field32 = |at: usize| le32(record, at).map_or(0, u64::from);
    // Disk numbers, and a count of this disk's entries other than the total, are
    // what a split archive has. Where a ZIP64 record follows, its fields stand
    // for these, as they do for torch's reader and Python's zipfile.
    let multi_disk = field16(4) != 0 || field16(6) != 0 || field16(8) != field16(10);
    let dir = Directory {
        entries: field16(10),
        size: field32(12),
        offset: field32(16),
        end_at: eocd as u64,
        end_records_adjoin: true,
    };
    Ok((dir, multi_disk))
}

pub(super) fn read_directory<D: FileBytes + ?Sized>(data: &D, eocd: usize) -> Result<Directory, Error> {
    let (mut dir, multi_disk) = classic_directory(data, eocd)?;
    // A ZIP64 locator sits right before the classic record; torch always writes one.
    let locator = eocd
        .checked_sub(ZIP64_LOCATOR_LEN)
        .filter(|&at| le32(data, at) == Some(ZIP64_LOCATOR_SIG));
    let Some(locator) = locator else {
        if multi_disk {
            return Err(bad(
                "multi-disk zip archives are not supported",
                eocd as u64,
            ));
        }
        let saturated =
            dir.entries == 0xffff || dir.size == 0xffff_ffff || dir.offset == 0xffff_ffff;
        if saturated {
            return Err(bad(
                "ZIP64 values are needed but the ZIP64 locator is missing",
                eocd as u64,
            ));
        }
        return Ok(dir);
    };
    let z64 =
        le64(data, locator + 8).ok_or_else(|| bad("truncated ZIP64 locator", locator as u64))?;
    if le32(data, locator + 16) != Some(1) {
        return Err(bad(
            "multi-disk zip archives are not supported",
            locator as u64,
        ));
    }
    let z64 = usize::try_from(z64).ok().filter(|z| {
        z.checked_add(ZIP64_EOCD_LEN)
            .is_some_and(|end| end <= locator)
    });
    let z64 = z64.ok_or_else(|| {
        bad(
            "ZIP64 end of central directory lies outside the file",
            locator as u64,
        )
    })?;
    if le32(data, z64) != Some(ZIP64_EOCD_SIG) {
        return Err(bad(
            "bad ZIP64 end of central directory signature",
            z64 as u64,
        ));
    }
    let field = |at: usize| {
        le64(data, z64 + at)
            .ok_or_else(|| bad("truncated ZIP64 end of central directory", z64 as u64))
    };
    // The record's size counts what follows its first 12 bytes.
    if field(4)? < (ZIP64_EOCD_LEN - 12) as u64 {
        return Err(bad(
            "the ZIP64 end of central directory record is too short",
            z64 as u64,
        ));
    }
    if le32(data, z64 + 16) != Some(0)
        || le32(data, z64 + 20) != Some(0)
        || field(24)? != field(32)?
    {
        return Err(bad("multi-disk zip archives are not supported", z64 as u64));
    }
    let record_end = field(4)?
        .checked_add(12)
        .and_then(|n| n.checked_add(z64 as u64));
    dir = Directory {
        entries: field(32)?,
        size: field(40)?,
        offset: field(48)?,
        end_at: z64 as u64,
        end_records_adjoin: record_end == Some(locator as u64),
    };
    Ok(dir)
}

/// Values a ZIP64 extra field overrides: each 0xffffffff field takes the next u64.
pub(super) fn apply_zip64(
    extra: &[u8],
    usize_: &mut u64,
    csize: &mut u64,
    offset: &mut u64,
    at: u64,
) -> Result<(), Error> {
    let needs = [
        *usize_ == 0xffff_ffff,
        *csize == 0xffff_ffff,
        *offset == 0xffff_ffff,
    ];
    if !needs.iter().any(|n| *n) {
        return Ok(());
    }
    let mut pos = 0usize;
    while pos + 4 <= extra.len() {
        let id = le16(extra, pos).unwrap_or(0);
        let len = usize::from(le16(extra, pos + 2).unwrap_or(0));
        let body = extra
            .get(pos + 4..pos + 4 + len)
            .ok_or_else(|| bad("extra field runs past its header", at))?;
        if id == ZIP64_EXTRA {
            let mut values = body
                .chunks_exact(8)
                .map(|c| c.try_into().map(u64::from_le_bytes));
            for (need, slot) in needs.iter().zip([usize_, csize, offset]) {
                if *need {
                    *slot = values
                        .next()
                        .and_then(Result::ok)
                        .ok_or_else(|| bad("ZIP64 extra field too short", at))?;
                }
            }
            return Ok(());
        }
        pos += 4 + len;
    }
    Err(bad(
        "ZIP64 values are needed but the ZIP64 extra field is missing",
        at,
    ))
}
