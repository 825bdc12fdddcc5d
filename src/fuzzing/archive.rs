//! The zip layer (and the tar model on the same bytes), whole checkpoints and
//! the legacy format.

use std::sync::Arc;

use crate::archive::source::Source;
use crate::archive::tar;
use crate::archive::zip::{self, Entry, Index};
use crate::checkpoint::{self, Checkpoint, LoadOptions, StorageData};
use crate::limits::Limits;
use crate::pickle::machine::StringEncoding;
use crate::torch::legacy;
use crate::torch::policy::{UnknownGlobals, UserGlobals};
use crate::torch::records::{self, Layout, Record};
use crate::torch::{Node, Torch};

use super::vm::{check_arena_ids, check_extent, dense_of};

/// Every reader of the zip layer, with the invariants on what each returns.
pub fn zip_archive(data: &[u8]) {
    let max = Limits::tight().max_zip_entries;
    let len = data.len() as u64;

    let strict = zip::read_index(data, max);
    if let Ok(index) = &strict {
        check_index(index, len, max, true);
        let _ = Layout::new(index.clone(), data);
    }
    let read_at = |offset: u64, n: usize| {
        let start = usize::try_from(offset).ok()?;
        data.get(start..start.checked_add(n)?).map(<[u8]>::to_vec)
    };
    let by_reading = zip::read_entries_by_reading(len, &read_at, max);
    if let Ok(index) = zip::read_entries(data, max) {
        check_index(&index, len, max, false);
        // Reading pieces may give up, but never gives another index.
        if let Some(pieces) = &by_reading {
            assert_eq!(
                pieces, &index,
                "read_entries_by_reading differs from read_entries"
            );
        }
        // The strict read is exactly this one plus validation.
        assert_eq!(
            strict.is_ok(),
            zip::validate(&index).is_ok(),
            "read_index disagrees with read_entries + validate"
        );
    } else {
        assert!(
            strict.is_err(),
            "read_index accepted what read_entries refused"
        );
        assert!(
            by_reading.is_none(),
            "read_entries_by_reading accepted what read_entries refused"
        );
    }
    // One record found alone is the one the whole directory describes, from the
    // whole file or from pieces of it.
    let found = zip::find_record(data, max, &Record(records::DATA_PKL));
    if let (Ok(entry), Ok(index)) = (&found, zip::read_entries(data, max)) {
        assert!(
            index.entries.contains(entry),
            "find_record gave an entry read_entries does not have"
        );
    }
    if let Some((entry, pieces)) =
        zip::read_record(len, &read_at, max, &Record(records::DATA_PKL), u64::MAX)
    {
        assert_eq!(
            found.as_ref().ok(),
            Some(&entry),
            "read_record differs from find_record"
        );
        let start = usize::try_from(entry.data_offset).unwrap_or(usize::MAX);
        let size = usize::try_from(entry.compressed_size).unwrap_or(usize::MAX);
        let range = start..start.saturating_add(size);
        assert_eq!(
            zip::FileBytes::get(&pieces, range.clone()),
            data.get(range),
            "read_record's pieces do not hold the payload's bytes"
        );
    }
    if let Ok(index) = zip::read_entries_after_prefix(data, max) {
        check_index(&index, len, max, false);
    }
    let walked = zip::walk_local_headers(data, max);
    assert!(
        walked.len() as u64 <= max,
        "walk_local_headers exceeded max entries"
    );
    for e in &walked {
        check_entry_in_bounds(e, len);
    }
    tar_archive(data);
}

/// The model of CPython's tarfile on the same bytes (any bytes reach it: every
/// scan and every legacy load asks it): `tarfile.open`'s answer is the full
/// reading's, and what a member hands out lies in the data or within the
/// bytes it may make.
fn tar_archive(data: &[u8]) {
    const MAX_MADE: u64 = 1 << 16;
    let opened = tar::tarfile_open(data);
    match tar::open(data, &Limits::tight()) {
        Ok(archive) => {
            assert!(opened.is_ok(), "tarfile_open refused what open read");
            assert!(archive.members.len() as u64 <= Limits::tight().max_zip_entries);
            for m in &archive.members {
                assert!(
                    m.offset_data <= data.len() as u64,
                    "member data past the end"
                );
                for content in [
                    m.file_content(data, MAX_MADE),
                    m.extracted_content(data, MAX_MADE),
                ] {
                    let bound = (data.len() as u64).max(MAX_MADE);
                    assert!(
                        content.bytes.len() as u64 <= bound,
                        "content past its bound"
                    );
                }
            }
        }
        Err(e) => assert_eq!(opened, Err(e), "tarfile_open and open disagree"),
    }
}

fn check_entry_in_bounds(e: &Entry, len: u64) {
    assert!(
        e.header_offset <= e.data_offset,
        "entry '{}' has its data before its header",
        e.name_lossy()
    );
    let end = e.data_offset.checked_add(e.compressed_size);
    assert!(
        end.is_some_and(|end| end <= len),
        "entry '{}' data [{}, +{}) lies outside the {len} input bytes",
        e.name_lossy(),
        e.data_offset,
        e.compressed_size
    );
}

fn check_index(index: &Index, len: u64, max: u64, strict: bool) {
    assert!(
        index.entries.len() as u64 <= max,
        "more entries than max_zip_entries"
    );
    for e in &index.entries {
        check_entry_in_bounds(e, len);
    }
    if !strict {
        return;
    }
    let mut by_offset: Vec<&Entry> = index.entries.iter().collect();
    by_offset.sort_by_key(|e| e.header_offset);
    for pair in by_offset.windows(2) {
        if let [a, b] = pair {
            assert!(
                a.data_end() <= b.header_offset,
                "entries '{}' and '{}' overlap",
                a.name_lossy(),
                b.name_lossy()
            );
        }
    }
    if let Some(last) = by_offset.last() {
        assert!(
            last.data_end() <= index.directory_offset,
            "entry '{}' reaches into the central directory",
            last.name_lossy()
        );
    }
    let mut names: Vec<&[u8]> = index.entries.iter().map(|e| &*e.name).collect();
    names.sort_unstable();
    assert!(
        names.windows(2).all(|w| w.first() != w.get(1)),
        "a strict index holds a duplicate name"
    );
    for e in &index.entries {
        assert!(
            e.disagreement.is_none(),
            "a strict index holds a disagreeing entry"
        );
        assert_eq!(
            e.flags & 0x2061,
            0,
            "a strict index holds an encrypted or patch-data entry"
        );
    }
}

// ---------------------------------------------------------------------------
// A whole checkpoint

/// `checkpoint::open` on the bytes with tight limits, then every storage read back.
pub fn checkpoint_open(data: &[u8]) {
    let options = LoadOptions {
        limits: Limits::tight(),
        ..LoadOptions::default()
    };
    if let Ok(ckpt) = checkpoint::open(Arc::new(Source::from_vec(data.to_vec())), &options) {
        check_checkpoint(&ckpt, &options.limits);
    }
}

fn check_checkpoint(ckpt: &Checkpoint, limits: &Limits) {
    let len = ckpt.source.bytes().len() as u64;
    assert!(
        ckpt.root.index() < ckpt.arena.len(),
        "root outside the arena"
    );
    assert!(ckpt.storages.len() as u64 <= limits.max_storages);
    check_arena_ids(&ckpt.arena);
    for node in ckpt.arena.nodes() {
        if let Node::Domain(Torch::Tensor(t)) = node {
            if let Some(dense) = dense_of(&ckpt.arena.tensor(*t).kind) {
                let s = ckpt.storage(dense.storage).unwrap_or_else(|| {
                    panic!("a tensor names unknown storage {:?}", dense.storage)
                });
                check_extent(dense, &s.decl);
            }
        }
    }
    let mut total = 0u64;
    for (i, s) in ckpt.storages.iter().enumerate() {
        let id = crate::torch::StorageId(i as u32);
        match s.data {
            StorageData::Stored { offset } => {
                let end = offset.checked_add(s.decl.nbytes);
                assert!(
                    end.is_some_and(|end| end <= len),
                    "stored storage '{}' lies outside the file",
                    s.decl.key
                );
            }
            StorageData::Deflated { offset, compressed } => {
                assert!(
                    offset.checked_add(compressed).is_some_and(|end| end <= len),
                    "deflated storage '{}' lies outside the file",
                    s.decl.key
                );
            }
            StorageData::View { root, offset } => {
                let r = ckpt
                    .storage(root)
                    .unwrap_or_else(|| panic!("view of unknown storage {root:?}"));
                assert!(
                    offset
                        .checked_add(s.decl.nbytes)
                        .is_some_and(|end| end <= r.decl.nbytes),
                    "view storage '{}' lies outside its root",
                    s.decl.key
                );
                // A view is read through its root, never by itself.
                assert!(ckpt.read_storage(id, &mut []).is_err());
                continue;
            }
        }
        if let Some((start, n)) = ckpt.mapped_range(id) {
            assert!(
                (start as u64)
                    .checked_add(n as u64)
                    .is_some_and(|e| e <= len),
                "mapped range outside the file"
            );
        }
        let _ = ckpt.data_offset(id);
        // Storages are read whole; their sizes are bounded by the file (stored) or
        // by max_inflated_bytes (deflated), so this allocation is bounded.
        total = total.saturating_add(s.decl.nbytes);
        assert!(
            total <= len.saturating_add(limits.max_inflated_bytes),
            "storages add up to more than the file and the inflate limit"
        );
        let Ok(n) = usize::try_from(s.decl.nbytes) else {
            continue;
        };
        let mut buf = vec![0u8; n];
        let whole = ckpt.read_storage(id, &mut buf);
        if matches!(s.data, StorageData::Stored { .. }) {
            assert!(
                whole.is_ok(),
                "a validated stored storage cannot be read: {whole:?}"
            );
            let mut chunk = vec![0u8; n / 2];
            if ckpt.read_stored_chunk(id, n - n / 2, &mut chunk).is_ok() {
                assert_eq!(
                    chunk.as_slice(),
                    buf.get(n - n / 2..).unwrap_or_default(),
                    "a chunk read differs from the whole read"
                );
            }
        }
        // A wrong-sized destination is refused, never written past.
        let mut one = [0u8; 1];
        let wrong: &mut [u8] = match buf.len() {
            0 => &mut one,
            n => buf.get_mut(..n - 1).unwrap_or_default(),
        };
        assert!(
            ckpt.read_storage(id, wrong).is_err(),
            "a wrong-sized read was accepted"
        );
    }
}

// ---------------------------------------------------------------------------
// The legacy format

/// The legacy stream parser with tight limits, and the format sniffer.
pub fn legacy(data: &[u8]) {
    let _ = legacy::is_legacy(data);
    let limits = Limits::tight();
    let user = UserGlobals::default();
    let Ok(parsed) = legacy::parse(
        data,
        &user,
        UnknownGlobals::Refuse,
        &limits,
        StringEncoding::Utf8,
    ) else {
        return;
    };
    let len = data.len() as u64;
    assert!(
        parsed.root.index() < parsed.arena.len(),
        "root outside the arena"
    );
    assert!(
        parsed
            .pickle_offsets
            .windows(2)
            .all(|w| w.first() < w.get(1)),
        "the five pickles are not in order: {:?}",
        parsed.pickle_offsets
    );
    for (id, offset) in &parsed.offsets {
        let decl = parsed
            .storages
            .get(*id)
            .unwrap_or_else(|| panic!("an offset for unknown storage {id:?}"));
        assert!(
            !parsed.storages.is_view(*id),
            "view '{}' has bytes of its own",
            decl.key
        );
        assert!(
            offset
                .checked_add(decl.nbytes)
                .is_some_and(|end| end <= len),
            "legacy storage '{}' lies outside the file",
            decl.key
        );
    }
    for (view, root, offset) in parsed.storages.views() {
        let (Some(v), Some(r)) = (parsed.storages.get(*view), parsed.storages.get(*root)) else {
            panic!("a view between unknown storages");
        };
        assert!(
            offset
                .checked_add(v.nbytes)
                .is_some_and(|end| end <= r.nbytes),
            "legacy view '{}' lies outside its root '{}'",
            v.key,
            r.key
        );
    }
    check_arena_ids(&parsed.arena);
    for node in parsed.arena.nodes() {
        if let Node::Domain(Torch::Tensor(t)) = node {
            if let Some(dense) = dense_of(&parsed.arena.tensor(*t).kind) {
                let decl = parsed.storages.get(dense.storage).unwrap_or_else(|| {
                    panic!("a tensor names unknown storage {:?}", dense.storage)
                });
                check_extent(dense, decl);
            }
        }
    }
}
