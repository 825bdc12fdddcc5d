//! The scanner model hubs run on every upload. It recognises files by content
//! (torch zip, legacy torch, raw pickles, numpy `.npy`/`.npz`, zip and tar
//! archives, nested ones included), reads only pickle bytes, and reports every
//! global outside the allowlist, each marked dangerous or not. A file it cannot
//! fully parse is never reported clean.

#![cfg_attr(
    not(test),
    deny(
        clippy::unwrap_used,
        clippy::expect_used,
        clippy::indexing_slicing,
        clippy::panic
    )
)]

pub mod stream;
pub mod walker;

use crate::archive::inflate::inflated_len;
use crate::archive::method::Method;
use crate::archive::zip::{self, Entry};
use crate::checkpoint::{self, is_tar, LoadOptions};
use crate::error::{Error, Location};
use crate::limits::{Limit, Limits};
use crate::torch::legacy;
use crate::torch::policy::UserGlobals;
use crate::torch::records::{self, Record};
use crate::torch::storages::IdFormat;

/// Archives nested deeper than this are reported, not opened.
const MAX_DEPTH: u32 = 4;

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

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    /// `module.name`, or a `<...>` description of a global without a name.
    pub name: String,
    pub dangerous: bool,
    /// The file, archive entry or pickle it was found in.
    pub location: String,
    /// Byte offset inside that location.
    pub offset: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    Clean,
    Unsafe,
    Unreadable,
}

impl Verdict {
    pub fn name(self) -> &'static str {
        match self {
            Verdict::Clean => "clean",
            Verdict::Unsafe => "unsafe",
            Verdict::Unreadable => "unreadable",
        }
    }
}

#[derive(Debug, Clone, Default)]
pub struct Report {
    /// What the file turned out to be (`torch-zip`, `pickle`, `npz`...).
    pub format: String,
    pub findings: Vec<Finding>,
    /// Why (part of) the file could not be read.
    pub problems: Vec<String>,
    /// How many pickles were read.
    pub pickles: u32,
    /// Why a load would refuse the file, kept until the scan shows whether an
    /// unsafe global explains it.
    pending_refusal: Option<(String, String)>,
    /// Work so far, in bytes of nested entries read and of inflated output.
    file_len: u64,
    stored_read: u64,
    inflated: u64,
    inflate_limit: u64,
    work_exhausted: bool,
}

impl Report {
    pub fn add(&mut self, finding: Finding) {
        self.findings.push(finding);
    }

    fn for_file(len: usize, limits: &Limits) -> Report {
        Report {
            file_len: len as u64,
            inflate_limit: (len as u64)
                .saturating_mul(MAX_DEFLATE_RATIO)
                .min(limits.max_inflated_bytes),
            ..Report::default()
        }
    }

    /// Account for reading `bytes` of a nested entry, stored or inflated; `false`
    /// (reported once) when that passes a work limit, and nothing nested is read
    /// after that.
    fn charge(&mut self, bytes: u64, inflate: bool, location: &str) -> bool {
        if self.work_exhausted {
            return false;
        }
        let (spent, limit, what) = if inflate {
            (&mut self.inflated, self.inflate_limit, "inflate")
        } else {
            let has = self.file_len.saturating_add(self.inflated);
            (
                &mut self.stored_read,
                has.saturating_mul(WORK_PER_FILE_BYTE),
                "read",
            )
        };
        match spent.checked_add(bytes).filter(|w| *w <= limit) {
            Some(total) => {
                *spent = total;
                true
            }
            None => {
                self.work_exhausted = true;
                self.problem(
                    location,
                    format!(
                        "overlapping or nested entries would make the scan {what} more than \
                         {limit} bytes; not scanned further"
                    ),
                );
                false
            }
        }
    }

    fn problem(&mut self, location: &str, reason: impl std::fmt::Display) {
        if location.is_empty() {
            self.problems.push(reason.to_string());
        } else {
            self.problems.push(format!("{location}: {reason}"));
        }
    }

    /// Unsafe outranks unreadable: a malformed file with a dangerous global before
    /// the break is unsafe.
    pub fn verdict(&self) -> Verdict {
        if !self.findings.is_empty() {
            Verdict::Unsafe
        } else if !self.problems.is_empty() {
            Verdict::Unreadable
        } else {
            Verdict::Clean
        }
    }

    /// The distinct global names, in order of first appearance.
    pub fn names(&self) -> Vec<String> {
        first_appearances(self.findings.iter().map(|f| f.name.clone()))
    }
}

#[derive(Debug, Clone, Default)]
pub struct ScanOptions {
    pub limits: Limits,
    /// Entries the user allowlists on top of the built-in allowlist.
    pub user_globals: UserGlobals,
    /// Read only the archive's directory and its pickles, as a security gate
    /// needs: no load dry run, no payload's local header, no inflating of
    /// compressed payloads. "Clean" then means every pickle was read to its end
    /// and holds only allowlisted globals, not that a load would accept the file.
    pub pickles_only: bool,
}

const NPY_MAGIC: &[u8] = b"\x93NUMPY";

/// What the bytes of a file or entry look like.
fn sniff(data: &[u8]) -> &'static str {
    if data.is_empty() {
        "empty"
    } else if data.starts_with(b"PK\x03\x04") || data.starts_with(b"PK\x05\x06") {
        "zip"
    } else if data.starts_with(NPY_MAGIC) {
        "npy"
    } else if is_tar(data) {
        "tar"
    } else if legacy::is_legacy(data) {
        "torch-legacy"
    } else if is_safetensors(data) {
        "safetensors"
    } else {
        "pickle"
    }
}

/// safetensors: a little-endian u64 header length, then a JSON object.
fn is_safetensors(data: &[u8]) -> bool {
    let Some(len) = data
        .get(..8)
        .and_then(|b| <[u8; 8]>::try_from(b).ok())
        .map(u64::from_le_bytes)
    else {
        return false;
    };
    len > 1 && len <= data.len() as u64 - 8 && data.get(8) == Some(&b'{')
}

/// Scan a whole file's bytes.
pub fn scan_bytes(data: &[u8], options: &ScanOptions) -> Report {
    scan_file(data, None, options)
}

/// Scan a whole file's bytes, given the entries of the zip it is when they were
/// read without touching `data` ([`zip::read_entries_by_reading`]): the scan then
/// reads only the pickles from `data`.
pub fn scan_file(data: &[u8], entries: Option<zip::Index>, options: &ScanOptions) -> Report {
    let mut report = Report::for_file(data.len(), &options.limits);
    match entries {
        Some(index) if sniff(data) == "zip" => {
            let layout = ZipLayout::of(&index);
            scan_whole_zip(data, index, &layout, options, &mut report);
        }
        _ => scan_into(data, "", 0, options, &mut report, true),
    }
    if let Some((location, reason)) = report.pending_refusal.take() {
        if report.findings.is_empty() {
            report.problem(&location, format!("a load would refuse it: {reason}"));
        }
    }
    report
}

/// Entries, and bytes of them, a pickles-only scan reads one by one before it
/// maps the file instead: each read is a system call and a piece kept in order,
/// where a map of the file costs the same for any number of entries.
const MAX_READ_ENTRIES: usize = 1024;
const MAX_READ_ENTRY_BYTES: u64 = 64 << 20;

/// [`scan_file`] with `pickles_only` for a zip of `len` bytes, from reads of its
/// end (the directory), each entry the scan opens (local header and bytes) and
/// its signature, never a map of the file. `None` when those reads cannot settle
/// it (not a zip, an error in the directory or in a header, more than
/// [`MAX_READ_ENTRIES`] entries or [`MAX_READ_ENTRY_BYTES`] bytes to read): the
/// caller then scans the whole file, for the same report or the fallbacks of
/// other readers.
pub fn scan_pickles_by_reading(
    len: u64,
    read_at: &dyn Fn(u64, usize) -> Option<Vec<u8>>,
    options: &ScanOptions,
) -> Option<Report> {
    if !options.pickles_only {
        return None;
    }
    let max_entries = options.limits.max_zip_entries;
    let mut payloads = TorchPayloads::default();
    let (index, mut pieces) =
        zip::read_directory_by_reading(len, read_at, max_entries, &mut |name| payloads.skip(name))?;
    let layout = ZipLayout::of(&index);
    let wanted: Vec<&Entry> = layout.pickles(&index).collect();
    let bytes = wanted
        .iter()
        .map(|e| e.compressed_size)
        .try_fold(0u64, u64::checked_add);
    if wanted.len() > MAX_READ_ENTRIES || bytes? > MAX_READ_ENTRY_BYTES {
        return None;
    }
    // The directory is spent once indexed.
    let headers: Vec<u64> = wanted.iter().map(|e| e.header_offset).collect();
    pieces.keep_holding(&headers);
    for entry in wanted {
        zip::read_entry_into(&mut pieces, entry, read_at)?;
    }
    zip::check_signature(&mut pieces, read_at)?;
    let mut report = Report::for_file(usize::try_from(len).ok()?, &options.limits);
    scan_whole_zip(&pieces, index, &layout, options, &mut report);
    Some(report)
}

/// A file that is a zip, from an index read as a load reads it.
fn scan_whole_zip<D: zip::FileBytes + ?Sized>(
    data: &D,
    index: zip::Index,
    layout: &ZipLayout,
    options: &ScanOptions,
    report: &mut Report,
) {
    scan_zip_entries(data, index, layout, true, "", 0, options, report, true);
}

fn scan_into(
    data: &[u8],
    location: &str,
    depth: u32,
    options: &ScanOptions,
    report: &mut Report,
    top: bool,
) {
    let kind = sniff(data);
    if top {
        report.format = kind.to_owned();
    }
    if depth > MAX_DEPTH {
        report.problem(location, "archives nested too deeply to inspect");
        return;
    }
    match kind {
        "empty" | "safetensors" => {}
        "zip" => scan_zip(data, location, depth, options, report, top),
        "npy" => scan_npy(data, location, options, report),
        "tar" => scan_tar(data, location, depth, options, report),
        "torch-legacy"
            if top
                && !options.pickles_only
                && validated_load(data, None, location, options, report).is_some() =>
        {
            report.pickles += 5;
        }
        "torch-legacy" => {
            let s = stream::scan_stream(
                data,
                location,
                &options.user_globals,
                &options.limits,
                IdFormat::Legacy,
                Some(5),
                report,
            );
            report.pickles += s.pickles;
            if let Some(p) = s.problem {
                report.problem(location, p);
            } else if s.pickles < 5 {
                report.problem(location, "a legacy torch file with fewer than five pickles");
            }
        }
        _ => scan_pickle(data, location, options, report, top),
    }
    if kind != "zip" {
        scan_trailing_zip(data, location, depth, options, report);
    }
}

/// Would a load accept the checkpoint `data`? It runs everything a load checks
/// (so a tensor outside its storage, or a limit, makes the file unreadable, not
/// clean) and reports whether it passed; a file that passes holds no global
/// outside the allowlist, so its main pickle needs no scan of its own. A refusal
/// is recorded only if the scan that follows finds nothing unsafe to explain it.
/// `entries` is the zip's index when it was read as strictly as a load reads it.
/// A file that passes gives where the compressed storages the load would
/// inflate start (see [`checkpoint::validate`]).
fn validated_load(
    data: &[u8],
    entries: Option<zip::Index>,
    location: &str,
    options: &ScanOptions,
    report: &mut Report,
) -> Option<Vec<u64>> {
    let load = LoadOptions {
        limits: options.limits,
        user_globals: options.user_globals.clone(),
        ..LoadOptions::default()
    };
    let validated = match entries {
        Some(index) => checkpoint::validate_zip(data, index, &load),
        None => checkpoint::validate(data, &load),
    };
    validated
        .map_err(|e| report.pending_refusal = Some((location.to_owned(), e.to_string())))
        .ok()
}

/// A zip glued after another file (a pickle, an .npy): Python's zipfile opens it.
fn scan_trailing_zip(
    data: &[u8],
    location: &str,
    depth: u32,
    options: &ScanOptions,
    report: &mut Report,
) {
    let tail_start = data.len().saturating_sub(22 + 0xffff + 64);
    if !data.get(tail_start..).is_some_and(has_end_record_signature) {
        return;
    }
    if let Ok(index) = zip::read_entries_after_prefix(data, options.limits.max_zip_entries) {
        if !index.entries.is_empty() {
            report.problem(location, "a zip archive is appended to the file");
            scan_zip(data, location, depth + 1, options, report, false);
        }
    }
}

/// Does `data` hold `PK\x05\x06` anywhere? Every pickle the scanner reads is
/// searched, so it looks for a `P` 32 bytes at a time, in a loop the compiler
/// turns into vector compares (a byte-by-byte window search was a tenth of a
/// pickles-only scan of a checkpoint, a word-at-a-time one still a fifteenth).
fn has_end_record_signature(data: &[u8]) -> bool {
    const SIGNATURE: &[u8] = b"PK\x05\x06";
    const CHUNK: usize = 32;
    let at = |i: usize| {
        data.get(i..)
            .is_some_and(|rest| rest.starts_with(SIGNATURE))
    };
    let from = |start: usize, chunk: &[u8]| {
        (chunk.iter().enumerate()).any(|(i, &b)| b == b'P' && at(start + i))
    };
    let mut chunks = data.chunks_exact(CHUNK);
    let mut start = 0usize;
    for chunk in &mut chunks {
        // `fold`, not `any`: no early exit, so no branch per byte.
        let has_p = chunk.iter().fold(false, |seen, &b| seen | (b == b'P'));
        if has_p && from(start, chunk) {
            return true;
        }
        start += CHUNK;
    }
    from(start, chunks.remainder())
}

fn scan_pickle(data: &[u8], location: &str, options: &ScanOptions, report: &mut Report, top: bool) {
    let before = report.findings.len();
    let s = stream::scan_stream(
        data,
        location,
        &options.user_globals,
        &options.limits,
        IdFormat::Zip,
        None,
        report,
    );
    report.pickles += s.pickles;
    if let Some(problem) = s.problem {
        // Bytes that are no pickle from their first opcode on, with nothing found,
        // are some other kind of file: nothing here can unpickle them.
        let not_a_pickle =
            s.pickles == 0 && report.findings.len() == before && !data.starts_with(&[0x80]);
        if not_a_pickle && top {
            report.format = "not-a-pickle".into();
        } else {
            report.problem(location, problem);
        }
    }
}

fn entry_location(parent: &str, entry: &Entry) -> String {
    if parent.is_empty() {
        entry.name_lossy()
    } else {
        format!("{parent}!{}", entry.name_lossy())
    }
}

fn scan_zip(
    data: &[u8],
    location: &str,
    depth: u32,
    options: &ScanOptions,
    report: &mut Report,
    top: bool,
) {
    let max = options.limits.max_zip_entries;
    let mut strict = true;
    let read = if options.pickles_only {
        zip::read_directory_only
    } else {
        zip::read_entries
    };
    let index = match read(data, max) {
        Ok(index) => index,
        // Other readers still extract something: a zip after a prefix (Python's
        // zipfile shifts the offsets), or, with no directory, the local headers.
        Err(e) => match zip::read_entries_after_prefix(data, max) {
            Ok(index) => {
                strict = false;
                report.problem(
                    location,
                    "the archive follows other bytes; offsets are shifted by them",
                );
                index
            }
            Err(_) => {
                strict = false;
                report.problem(
                    location,
                    format!("{e}; reading the local headers one by one instead"),
                );
                let entries = zip::walk_local_headers(data, max);
                zip::Index {
                    entries,
                    directory_offset: data.len() as u64,
                }
            }
        },
    };
    let layout = ZipLayout::of(&index);
    scan_zip_entries(
        data, index, &layout, strict, location, depth, options, report, top,
    );
}

/// Scan the entries of a zip; `strict` when `index` was read as a load reads it,
/// not by the fallbacks of other readers. With `pickles_only`, a strict index may
/// leave payloads unlocated: an entry is located when it is read.
#[allow(clippy::too_many_arguments)]
fn scan_zip_entries<D: zip::FileBytes + ?Sized>(
    data: &D,
    index: zip::Index,
    layout: &ZipLayout,
    strict: bool,
    location: &str,
    depth: u32,
    options: &ScanOptions,
    report: &mut Report,
    top: bool,
) {
    let unlocated = strict && options.pickles_only;
    let valid = if unlocated {
        // A repeated name leaves readers to pick one of its entries: only the
        // pickles' choice matters to a gate that reads no tensor.
        zip::validate_directory(&index, layout.pickles(&index))
    } else {
        zip::validate(&index)
    };
    if let Err(e) = valid {
        report.problem(location, e);
    }
    let root = &layout.root;
    if top {
        report.format = match (
            root,
            index
                .entries
                .iter()
                .any(|e| e.name.ends_with(b"/constants.pkl")),
        ) {
            (Some(_), true) => "torchscript-zip".into(),
            (Some(_), false) => "torch-zip".into(),
            (None, _) if index.entries.iter().all(|e| e.name.ends_with(b".npy")) => "npz".into(),
            _ => "zip".into(),
        };
    }
    // A checkpoint a load accepts has only allowlisted globals in its data.pkl,
    // and the compressed payloads the load reads are what it inflates: those
    // of the storages its pickle names, and the metadata records it checked.
    let inflated_by_load = if top && !options.pickles_only && root.is_some() {
        data.whole().and_then(|whole| {
            validated_load(
                whole,
                strict.then(|| index.clone()),
                location,
                options,
                report,
            )
        })
    } else {
        None
    };
    let loadable = inflated_by_load.is_some();
    debug_assert_eq!(layout.unpickled.len(), index.entries.len());
    for (entry, &unpickled) in index.entries.iter().zip(&layout.unpickled) {
        if loadable && layout.is_main_pickle(&entry.name) {
            report.pickles += 1;
            continue;
        }
        if !unpickled {
            let unread = inflated_by_load
                .as_ref()
                .is_some_and(|read| read.binary_search(&entry.data_offset).is_err());
            if entry.method != Method::Stored && !options.pickles_only && !unread {
                let here = entry_location(location, entry);
                if !report.charge(entry.uncompressed_size, true, &here) {
                    return;
                }
                check_compressed_payload(data, entry, &here, report);
            }
            continue;
        }
        let here = entry_location(location, entry);
        let charged = match entry.method {
            Method::Stored => report.charge(entry.compressed_size, false, &here),
            _ => report.charge(entry.uncompressed_size, true, &here),
        };
        if !charged {
            return;
        }
        let located;
        let entry = if unlocated {
            located = match zip::locate_entry(data, entry) {
                Ok(e) => e,
                Err(e) => {
                    report.problem(&here, e);
                    continue;
                }
            };
            if let Some(what) = located.disagreement {
                report.problem(location, zip::disagreement_error(&located, what));
            }
            &located
        } else {
            entry
        };
        let bytes = match entry_data(entry, data, &options.limits) {
            Ok(b) => b,
            Err(e) => {
                report.problem(&here, e);
                continue;
            }
        };
        let by_name = [
            ".pkl", ".pickle", ".joblib", ".pt", ".pth", ".bin", ".ckpt", ".npy", ".dat", ".data",
        ];
        let scan_it = by_name
            .iter()
            .any(|ext| records::ends_with_ignoring_case(&entry.name, ext.as_bytes()))
            || !matches!(sniff(&bytes), "pickle" | "empty");
        if scan_it || bytes.first() == Some(&0x80) {
            scan_into(&bytes, &here, depth + 1, options, report, false);
        }
    }
}

/// What a zip's names say about which of its entries are never unpickled.
struct ZipLayout {
    /// The root folder of a torch checkpoint: every entry under it, with a data.pkl.
    root: Option<Vec<u8>>,
    /// Per entry of the index, in order: whether a reader may unpickle it.
    unpickled: Vec<bool>,
}

impl ZipLayout {
    fn of(index: &zip::Index) -> ZipLayout {
        let root = (index.entries.first())
            .and_then(|e| records::root_of(&e.name))
            .filter(|&r| {
                (index.entries.iter()).any(|e| records::is_record(r, &e.name, records::DATA_PKL))
            });
        // Only TensorDict leaves need to know their neighbours.
        let names: Option<std::collections::HashSet<String>> =
            (index.entries.iter().any(|e| e.name.ends_with(b".memmap")))
                .then(|| index.entries.iter().map(Entry::name_lossy).collect());
        let never_unpickled = |name: &[u8]| {
            records::is_payload(root, name)
                || name.ends_with(b"/")
                || names.as_ref().is_some_and(|names| {
                    name.ends_with(b".memmap")
                        && is_tensordict_leaf(names, &String::from_utf8_lossy(name))
                })
        };
        ZipLayout {
            unpickled: (index.entries.iter())
                .map(|e| !never_unpickled(&e.name))
                .collect(),
            root: root.map(<[u8]>::to_vec),
        }
    }

    /// The checkpoint's main pickle, `<root>/data.pkl`.
    fn is_main_pickle(&self, name: &[u8]) -> bool {
        (self.root.as_deref()).is_some_and(|r| records::is_record(r, name, records::DATA_PKL))
    }

    /// The entries of `index` (the one this layout is of) that a reader may unpickle.
    fn pickles<'i>(&'i self, index: &'i zip::Index) -> impl Iterator<Item = &'i Entry> {
        (index.entries.iter().zip(&self.unpickled)).filter_map(|(e, &u)| u.then_some(e))
    }
}

/// The directory records a pickles-only scan of a torch checkpoint need not
/// build: those [`ZipLayout`] sets aside as torch payload (most of a checkpoint's
/// entries), from the record after `<root>/data.pkl` on. torch writes data.pkl
/// first; any payload before it is built and set aside by the layout as usual,
/// so the layout of the entries kept is the layout of them all.
#[derive(Default)]
struct TorchPayloads {
    /// The first record's folder, once a record has been seen.
    root: Option<Option<Vec<u8>>>,
    holds_main_pickle: bool,
}

impl TorchPayloads {
    fn skip(&mut self, name: &[u8]) -> bool {
        let root = (self.root).get_or_insert_with(|| records::root_of(name).map(<[u8]>::to_vec));
        let Some(root) = root.as_deref() else {
            return false;
        };
        if !self.holds_main_pickle {
            self.holds_main_pickle = records::is_record(root, name, records::DATA_PKL);
            return false;
        }
        records::is_payload(Some(root), name)
    }
}

/// A TensorDict leaf (`<key>.memmap`, `<key>.shape.memmap`) next to the level's
/// `meta.json`: raw tensor bytes that no reader unpickles, so random data in them
/// is never mistaken for a broken pickle.
fn is_tensordict_leaf(names: &std::collections::HashSet<String>, name: &str) -> bool {
    let meta = match name.rsplit_once('/') {
        Some((folder, _)) => format!("{folder}/meta.json"),
        None => "meta.json".to_owned(),
    };
    names.contains(&meta)
}

/// A compressed storage record must inflate to exactly what it declares (a load
/// would find out only when copying it); counted without keeping the output.
fn check_compressed_payload<D: zip::FileBytes + ?Sized>(
    data: &D,
    entry: &Entry,
    location: &str,
    report: &mut Report,
) {
    if entry.method != Method::Deflate {
        return;
    }
    let start = usize::try_from(entry.data_offset).ok();
    let raw = start
        .and_then(|s| data.get(s..s.checked_add(usize::try_from(entry.compressed_size).ok()?)?));
    match raw.map(|raw| inflated_len(raw, entry.uncompressed_size)) {
        Some(Ok(n)) if n == entry.uncompressed_size => {}
        Some(Ok(n)) => report.problem(
            location,
            format!(
                "inflates to {n} bytes, declares {}",
                entry.uncompressed_size
            ),
        ),
        Some(Err(e)) => report.problem(location, e),
        None => report.problem(location, "entry data lies outside the file"),
    }
}

/// An entry's bytes, decompressed if needed (never past its declared size or
/// the cap on one pickle).
fn entry_data<'d, D: zip::FileBytes + ?Sized>(
    entry: &Entry,
    data: &'d D,
    limits: &Limits,
) -> Result<std::borrow::Cow<'d, [u8]>, Error> {
    let cap = limits.max_pickle_bytes.min(limits.max_inflated_bytes);
    entry.read(data, Limit::InflatedBytes, cap)
}

/// `.npy`: only object arrays hold a pickle, after the header.
fn scan_npy(data: &[u8], location: &str, options: &ScanOptions, report: &mut Report) {
    let Some(&major) = data.get(6) else {
        return report.problem(location, "truncated .npy header");
    };
    let (len, start) = match major {
        1 => (
            data.get(8..10)
                .and_then(|b| <[u8; 2]>::try_from(b).ok())
                .map(|b| u64::from(u16::from_le_bytes(b))),
            10usize,
        ),
        2 | 3 => (
            data.get(8..12)
                .and_then(|b| <[u8; 4]>::try_from(b).ok())
                .map(|b| u64::from(u32::from_le_bytes(b))),
            12,
        ),
        _ => (None, 0),
    };
    let header = len.and_then(|l| data.get(start..start.checked_add(usize::try_from(l).ok()?)?));
    let Some(header) = header else {
        return report.problem(location, "malformed .npy header");
    };
    let text = String::from_utf8_lossy(header);
    let object = text.contains("'|O'")
        || text.contains("'O'")
        || text.contains("\"|O\"")
        || text.contains("'O',")
        || text.contains("'|O',");
    if object {
        let body = data.get(start + header.len()..).unwrap_or_default();
        let s = stream::scan_stream(
            body,
            location,
            &options.user_globals,
            &options.limits,
            IdFormat::Zip,
            None,
            report,
        );
        report.pickles += s.pickles;
        if let Some(p) = s.problem {
            report.problem(location, p);
        }
    }
}

/// A POSIX tar archive: every regular member is scanned by content.
fn scan_tar(data: &[u8], location: &str, depth: u32, options: &ScanOptions, report: &mut Report) {
    let mut pos = 0usize;
    let mut members = 0u64;
    while let Some(header) = data.get(pos..pos + 512) {
        if header.iter().all(|b| *b == 0) {
            return;
        }
        members += 1;
        if members > options.limits.max_zip_entries {
            return report.problem(location, "too many tar members");
        }
        let name = String::from_utf8_lossy(header.get(..100).unwrap_or_default())
            .trim_end_matches('\0')
            .to_owned();
        let size_text = String::from_utf8_lossy(header.get(124..136).unwrap_or_default())
            .trim_matches(|c: char| c == '\0' || c == ' ')
            .to_owned();
        let Ok(size) = u64::from_str_radix(&size_text, 8) else {
            return report.problem(location, "malformed tar header");
        };
        let kind = header.get(156).copied().unwrap_or(0);
        let body_start = pos + 512;
        let Some(body) = usize::try_from(size)
            .ok()
            .and_then(|s| data.get(body_start..body_start.checked_add(s)?))
        else {
            return report.problem(location, format!("tar member {name} runs past the end"));
        };
        if matches!(kind, b'0' | 0) {
            let here = if location.is_empty() {
                name
            } else {
                format!("{location}!{name}")
            };
            if !report.charge(body.len() as u64, false, &here) {
                return;
            }
            scan_into(body, &here, depth + 1, options, report, false);
        }
        pos = body_start + body.len().div_ceil(512) * 512;
    }
    report.problem(location, "truncated tar archive");
}

/// torch's `get_unsafe_globals_in_checkpoint`, for every format: the globals of a
/// checkpoint's pickles that the allowlist (built-in plus user) does not cover.
/// A torch zip checkpoint is judged by its `data.pkl`, which is all `load` reads.
pub fn unsafe_globals(data: &[u8], options: &ScanOptions) -> Result<Vec<String>, Error> {
    match sniff(data) {
        "zip" => {
            let entry = zip::find_record(
                data,
                options.limits.max_zip_entries,
                &Record(records::DATA_PKL),
            )?;
            globals_of_main_pickle(&entry, data, options)
        }
        "empty" => Err(Error::archive("the file is empty", Location::default())),
        _ => {
            let mut report = Report::for_file(data.len(), &options.limits);
            scan_into(data, "", 0, options, &mut report, true);
            outcome(report)
        }
    }
}

/// `unsafe_globals` of a zip checkpoint of `len` bytes, reading only the pieces
/// it needs with `read_at` (see [`zip::read_record`]). `None` when those pieces
/// do not settle it, or the answer is an error: the caller then runs
/// `unsafe_globals` on the whole file for the same answer or the precise error.
pub fn unsafe_globals_by_reading(
    len: u64,
    read_at: &dyn Fn(u64, usize) -> Option<Vec<u8>>,
    options: &ScanOptions,
) -> Option<Vec<String>> {
    let limits = &options.limits;
    let max_payload = limits.max_pickle_bytes.min(limits.max_inflated_bytes);
    let (entry, pieces) = zip::read_record(
        len,
        read_at,
        limits.max_zip_entries,
        &Record(records::DATA_PKL),
        max_payload,
    )?;
    globals_of_main_pickle(&entry, &pieces, options).ok()
}

/// The globals outside the allowlist in a zip checkpoint's data.pkl, `entry`.
fn globals_of_main_pickle<D: zip::FileBytes + ?Sized>(
    entry: &Entry,
    data: &D,
    options: &ScanOptions,
) -> Result<Vec<String>, Error> {
    let bytes = entry_data(entry, data, &options.limits)?;
    if let Some(walk) = walker::walk(&bytes, &options.user_globals, &options.limits) {
        return Ok(first_appearances(walk.found.into_iter().map(|f| f.name)));
    }
    let mut report = Report::default();
    let name = entry.name_lossy();
    let s = stream::scan_stream(
        &bytes,
        &name,
        &options.user_globals,
        &options.limits,
        IdFormat::Zip,
        Some(1),
        &mut report,
    );
    if let Some(p) = s.problem {
        report.problem(&name, p);
    }
    outcome(report)
}

/// Each name once, in order of first appearance. A B-tree set, not a hash set:
/// see [`UserGlobals`] for the cost a `RandomState` adds to a one-file scan.
fn first_appearances(names: impl Iterator<Item = String>) -> Vec<String> {
    let mut seen = std::collections::BTreeSet::new();
    names.filter(|n| seen.insert(n.clone())).collect()
}

/// The findings of a scan, or why it could not read the pickle when it found none.
fn outcome(report: Report) -> Result<Vec<String>, Error> {
    if report.findings.is_empty() {
        if let Some(problem) = report.problems.first() {
            return Err(Error::pickle(
                format!("cannot read the whole checkpoint: {problem}"),
                Location::default(),
            ));
        }
    }
    Ok(report.names())
}

#[cfg(test)]
mod tests {
    use super::has_end_record_signature;

    #[test]
    fn the_end_record_search_finds_what_a_window_search_finds() {
        let signature = b"PK\x05\x06";
        for len in 0..100 {
            for at in 0..len {
                // `P`s and partial signatures everywhere, the whole one at `at` or nowhere.
                let mut data: Vec<u8> = (0..len).map(|i| b"PPK\x05x"[i % 5]).collect();
                assert!(!has_end_record_signature(&data), "{data:?}");
                if at + 4 <= len {
                    data[at..at + 4].copy_from_slice(signature);
                }
                let expected = data.windows(4).any(|w| w == signature);
                assert_eq!(has_end_record_signature(&data), expected, "{data:?}");
            }
        }
    }
}
