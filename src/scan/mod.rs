//! The scanner model hubs run on every upload. It recognises files by content
//! (torch zip, legacy torch, raw pickles, numpy `.npy`/`.npz`, zip and tar
//! archives, nested ones included), reads only pickle bytes, and reports every
//! global outside the allowlist, each marked dangerous or not. A file it cannot
//! fully parse is never reported clean. Bytes that are two formats at once get
//! both readings: a tar is whatever CPython's `tarfile` opens, and a legacy
//! torch file or a zip that it opens is read as a tar too.
//!
//! One [`Scan`] walks one file: the options, the [`Budget`] of work the file may
//! cost, and the [`Report`] it fills. The file kinds are read in `kind`, `zip`,
//! `npy` and `tar`; the pickles in `stream` and `walker`.

mod budget;
mod kind;
mod npy;
pub mod readers;
mod report;
mod safetensors;
mod sevenzip;
pub mod stream;
mod tar;
pub mod walker;
mod waves;
mod zip;

use crate::archive::streams::{Compression, StreamError};
use crate::archive::tar as tar_archive;
use crate::archive::zip::{self as archive_zip, Entry, FileBytes};
use crate::checkpoint::{self, LoadOptions};
use crate::error::{code, Error, Location};
use crate::limits::{Limit, Limits};
use crate::pickle::opcodes;
use crate::torch::policy::UserGlobals;
use crate::torch::records::{self, Record};
use crate::torch::IdFormat;

pub use budget::{Budget, Work, MAX_DEFLATE_RATIO, WORK_PER_FILE_BYTE};
pub use kind::{is_tensordict_leaf, Kind};

use kind::{named_like_a_model, NotAPickle};
pub use report::{problem_kind, Finding, Format, Problem, Report, Verdict};
pub use waves::{scan_pickles_in_waves, scan_spans_in_waves, unsafe_globals_in_waves, Wave};

use budget::MAX_DEPTH;
use zip::{TorchPayloads, ZipLayout, ZipReading};

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
    /// Also list the globals inside the allowlist (`Report::allowlisted`): what a
    /// reviewer reads to see everything a pickle imports. Every pickle is then
    /// walked, the main one of a checkpoint a load accepts too.
    pub list_allowlisted: bool,
    /// Read the bytes only as the pickle an unpickler given them reads from byte
    /// 0: for files no loader is expected to unpickle (a TensorDict leaf's raw
    /// tensor, git's own objects), which are still never exempt from that
    /// reading. It counts when it names a global or stops at a limit; else the
    /// file is skipped.
    pub byte_zero_only: bool,
}

/// One file's scan: what it may do, and what it found.
struct Scan<'o> {
    options: &'o ScanOptions,
    /// The file's name, when it has one: a name that says model makes bytes
    /// that are no model unreadable, not skipped.
    name: Option<&'o str>,
    budget: Budget,
    report: Report,
    /// Why a load would refuse the file, kept until the scan shows whether an
    /// unsafe global explains it: a problem of the refusal's kind.
    pending_refusal: Option<Problem>,
    /// How many times the scan stopped short of something (the nesting depth,
    /// the work budget): never dropped with a speculative reading's problems.
    stopped_short: usize,
    /// Reading bytes a refused call hands on (see [`Scan::payload`]).
    in_payload: bool,
    /// The location of the torch.export tensor record being read, if one is:
    /// bytes there that are no pickle are a tensor's, not of an unknown format.
    tensor_record: Option<String>,
}

impl<'o> Scan<'o> {
    fn new(len: usize, options: &'o ScanOptions, name: Option<&'o str>) -> Self {
        Scan {
            options,
            name,
            budget: Budget::for_file(len, &options.limits),
            report: Report {
                allowlisted: options.list_allowlisted.then(Vec::new),
                ..Report::default()
            },
            pending_refusal: None,
            stopped_short: 0,
            in_payload: false,
            tensor_record: None,
        }
    }

    /// A problem that means the scan did not look at everything.
    fn stop_short(&mut self, location: &str, problem: impl Into<String>) {
        self.stopped_short += 1;
        self.problem(location, code::LIMIT, problem.into());
    }

    /// The report, with a load's refusal as a problem when no unsafe global
    /// explains it.
    fn finish(mut self) -> Report {
        if let Some(refusal) = self.pending_refusal.take() {
            if self.report.findings.is_empty() {
                self.report.problems.push(refusal);
            }
        }
        self.report
    }

    fn problem(&mut self, location: &str, kind: &'static str, reason: impl std::fmt::Display) {
        self.report.problem(location, kind, reason);
    }

    /// Account for reading `bytes` of a nested entry; `false` (reported once)
    /// when that passes the budget, and nothing nested is read after that.
    fn charge(&mut self, bytes: u64, work: Work, location: &str) -> bool {
        match self.budget.charge(bytes, work) {
            Ok(()) => true,
            Err(Some(problem)) => {
                self.stop_short(location, problem);
                false
            }
            Err(None) => false,
        }
    }

    /// Scan `data`, whatever it is; `top` for the file itself, not a nested entry.
    fn bytes(&mut self, data: &[u8], location: &str, depth: u32, top: bool) {
        let kind = Kind::of(data);
        if top {
            self.report.format = match kind {
                Kind::Empty => Format::Empty,
                Kind::Zip => Format::Zip,
                Kind::Npy => Format::Npy,
                Kind::Tar => Format::Tar,
                Kind::SevenZip => Format::SevenZip,
                Kind::TorchLegacy => Format::TorchLegacy,
                Kind::Safetensors => Format::Safetensors,
                Kind::Compressed(c) => Format::Compressed(c),
                Kind::Pickle => Format::Pickle,
            };
        }
        if depth > MAX_DEPTH {
            self.stop_short(location, "archives nested too deeply to inspect");
            return;
        }
        match kind {
            Kind::Empty => {}
            Kind::Safetensors => self.safetensors(data, location),
            Kind::Zip if top => self.zip(data, location, depth, top),
            Kind::Zip => self.wrapped("zip", |scan| scan.zip(data, location, depth, top)),
            Kind::Npy => self.npy(data, location, depth),
            Kind::Tar => {
                let before = self.report.findings.len();
                self.wrapped("tar", |scan| scan.tar(data, location, depth));
                let tar_found = self.report.findings.len() > before;
                self.beside_tar(data, location, depth, top, tar_found);
            }
            Kind::SevenZip => self.wrapped("7z", |scan| scan.sevenzip(data, location, depth)),
            Kind::TorchLegacy => self.legacy(data, location, depth, top),
            Kind::Compressed(c) => self.compressed(c, data, location, depth, top),
            Kind::Pickle => self.pickle(data, location, depth, top),
        }
        // Kinds recognised before a tar is: tarfile may open their bytes too.
        if matches!(kind, Kind::Zip | Kind::Npy) && tar_archive::may_be_tar(data) {
            self.also_a_tar(data, location, depth);
        }
        if kind.also_read_as_a_pickle(data) {
            self.leading_pickle(data, location);
        }
        if kind != Kind::Zip {
            self.trailing_zip(data, location, depth);
        }
    }

    /// The tar reading of bytes read as another format first, kept only where
    /// it finds something: only a tar reader, which no loader of that format
    /// is, would read it.
    fn also_a_tar(&mut self, data: &[u8], location: &str, depth: u32) {
        self.unless_nothing_found(|scan| {
            scan.wrapped("tar", |scan| scan.tar(data, location, depth))
        });
    }

    /// Bytes of another format whose first byte is an opcode (a tar's first member
    /// name, a safetensors header's length, bzip2's and zstd's magic) may also be a
    /// pickle, and a loader that unpickles them runs what that reading names. Its
    /// globals are reported; a reading stopped by a limit could go on, and is never
    /// passed over.
    fn leading_pickle(&mut self, data: &[u8], location: &str) {
        let options = self.options;
        let stopped = stream::scan_leading_pickle(
            data,
            location,
            &options.user_globals,
            &options.limits,
            &mut self.report,
        );
        if let Some(e) = stopped {
            self.stop_short(location, format!("read as a pickle from byte 0: {e}"));
        }
    }

    /// Run `scan` on what `wrapper` (a compression or a container) holds: the
    /// findings made inside name it as one of their wrappers.
    fn wrapped(&mut self, wrapper: &'static str, scan: impl FnOnce(&mut Self)) {
        let before = self.report.findings.len();
        let listed_before = self.report.allowlisted.as_ref().map_or(0, Vec::len);
        scan(self);
        let listed = self
            .report
            .allowlisted
            .iter_mut()
            .flatten()
            .skip(listed_before);
        for finding in self.report.findings.iter_mut().skip(before).chain(listed) {
            finding.wrappers.insert(0, wrapper);
        }
    }

    /// A compressed file: what it decompresses to (within the budget) is scanned
    /// as a file of its own. zlib's and LZMA-alone's headers are two or five
    /// bytes that may also start with an opcode, and a loader that unpickles
    /// such bytes reads them as a pickle: they are scanned as one too.
    fn compressed(&mut self, c: Compression, data: &[u8], location: &str, depth: u32, top: bool) {
        let room = self.budget.room(Work::Inflate);
        let (inner, end) = c.decode_prefix(data, room);
        // A two- or five-byte header that other bytes share: a stream that does
        // not decode is no stream of that kind (Python's decompressors fail at
        // once), and the bytes are whatever else they are.
        let weak = matches!(c, Compression::Zlib | Compression::LzmaAlone);
        let weak_magic = weak && data.first().copied().is_some_and(opcodes::is_opcode);
        match end {
            Ok(()) => {
                self.decompressed(c, &inner, location, depth);
                if weak_magic {
                    self.unless_nothing_found(|scan| scan.pickle(data, location, depth, false));
                }
            }
            Err(StreamError::Corrupt(_)) if weak => {
                if top {
                    self.report.format = Format::Pickle;
                }
                self.pickle(data, location, depth, top);
            }
            Err(StreamError::TooLarge(_)) => {
                self.charge(room.saturating_add(1), Work::Inflate, location);
            }
            Err(e) => {
                // What decoded before the break has been handed out by then;
                // the break itself keeps the file from being clean.
                if !inner.is_empty() {
                    self.unless_nothing_found(|scan| scan.decompressed(c, &inner, location, depth));
                }
                self.problem(
                    location,
                    code::MALFORMED_ARCHIVE,
                    format!("{} stream: {e}", c.name()),
                );
            }
        }
    }

    /// What a compressed file decompresses to, scanned as a file of its own.
    fn decompressed(&mut self, c: Compression, inner: &[u8], location: &str, depth: u32) {
        if self.charge(inner.len() as u64, Work::Inflate, location) {
            let here = nested(location, c.name());
            self.wrapped(c.name(), |scan| scan.bytes(inner, &here, depth + 1, false));
        }
    }

    /// A safetensors file: its header checked as a reader checks it.
    fn safetensors(&mut self, data: &[u8], location: &str) {
        if let Some((kind, reason)) = safetensors::header_problem(data) {
            self.problem(location, kind, reason);
        }
    }

    /// Bytes that are no pickle: skipped when they are text or a format that
    /// holds none, unreadable when binary of no known format or named like a model.
    /// An entry of an archive is judged by its own name, the file by the file's.
    fn not_a_pickle(&mut self, data: &[u8], location: &str, top: bool) {
        let name = if top {
            self.report.format = Format::NotAPickle;
            self.name
        } else {
            location.rsplit(NESTED).next()
        };
        let named_model = name.is_some_and(|n| named_like_a_model(n.as_bytes()));
        match NotAPickle::of(data) {
            _ if records::is_mobile_flatbuffer(data) => self.problem(
                location,
                problem_kind::MOBILE_BYTECODE,
                records::MOBILE_REASON,
            ),
            // A clone of a model repository without its large files: what a
            // loader would read was never fetched, so it was not scanned either.
            _ if named_model && data.starts_with(GIT_LFS_POINTER) => self.problem(
                location,
                problem_kind::UNKNOWN_FORMAT,
                "a Git LFS pointer, not the file it names: fetch it (git lfs pull) to scan it",
            ),
            _ if named_model => self.problem(
                location,
                problem_kind::UNKNOWN_FORMAT,
                "named like a model or a pickle, yet no pickle, archive or compressed file",
            ),
            NotAPickle::Unknown if self.tensor_record.as_deref() == Some(location) => {}
            NotAPickle::Unknown => self.problem(
                location,
                problem_kind::UNKNOWN_FORMAT,
                "binary data of no format the scanner knows",
            ),
            NotAPickle::Text if top => self.report.skipped_because = Some("text, no pickle"),
            NotAPickle::Known(format) if top => self.report.skipped_because = Some(format),
            NotAPickle::Text | NotAPickle::Known(_) => {}
        }
    }

    /// A legacy torch file: five pickles and the storages' bytes.
    fn legacy(&mut self, data: &[u8], location: &str, depth: u32, top: bool) {
        if top && !self.options.pickles_only {
            let accepted = self.validated_load(data, None, location).is_some();
            // A listing walks an accepted file's pickles too, for their allowlisted globals.
            if accepted && !self.options.list_allowlisted {
                self.report.pickles += 5;
                return;
            }
        }
        let s = self.stream(data, location, depth, IdFormat::Legacy, Some(5));
        if s.problem.is_none() && s.pickles < 5 {
            self.problem(
                location,
                code::MALFORMED_ARCHIVE,
                "a legacy torch file with fewer than five pickles",
            );
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
        &mut self,
        data: &[u8],
        entries: Option<archive_zip::Index>,
        location: &str,
    ) -> Option<Vec<u64>> {
        let load = LoadOptions {
            limits: self.options.limits,
            user_globals: self.options.user_globals.clone(),
            ..LoadOptions::default()
        };
        let validated = match entries {
            Some(index) => checkpoint::validate_zip(data, index, &load),
            None => checkpoint::validate(data, &load),
        };
        validated
            .map_err(|e| {
                self.pending_refusal = Some(Problem {
                    kind: e.kind().code(),
                    location: location.to_owned(),
                    reason: format!("a load would refuse it: {e}"),
                })
            })
            .ok()
    }

    /// Every pickle of a stream, from its start on (at most `max_pickles`),
    /// findings and a problem reported under `location`.
    fn stream(
        &mut self,
        data: &[u8],
        location: &str,
        depth: u32,
        format: IdFormat,
        max_pickles: Option<usize>,
    ) -> stream::StreamScan {
        let s = self.read_stream(data, location, depth, format, max_pickles);
        if let Some((kind, reason)) = &s.problem {
            self.problem(location, kind, reason);
        }
        s
    }

    /// [`Scan::stream`] leaving the problem to the caller. The bytes its
    /// refused calls would unpickle are scanned as nested files.
    fn read_stream(
        &mut self,
        data: &[u8],
        location: &str,
        depth: u32,
        format: IdFormat,
        max_pickles: Option<usize>,
    ) -> stream::StreamScan {
        let options = self.options;
        let mut s = stream::scan_stream(
            data,
            location,
            &options.user_globals,
            &options.limits,
            format,
            max_pickles,
            &mut self.report,
        );
        self.report.pickles += s.pickles;
        if s.unswept && self.in_payload {
            // Bytes a refused call hands on may be unwrapped (marshal, base64)
            // before anything unpickles them: what they spell is reported.
            stream::sweep_rest(data, 0, location, &options.user_globals, &mut self.report);
        }
        for (at, payload) in std::mem::take(&mut s.payloads) {
            let here = nested(location, &format!("bytes passed at byte {at}"));
            self.payload(&payload, &here, depth + 1);
        }
        s
    }

    /// Bytes a refused call would unpickle (or open as a checkpoint): what they
    /// hold is reported; that they are no pickle is not (they may be any data).
    /// Nor are globals without a name: any byte 0x82 reads as an extension code,
    /// and CPython registers none.
    fn payload(&mut self, data: &[u8], location: &str, depth: u32) {
        if !self.charge(data.len() as u64, Work::Read, location) {
            return;
        }
        // Said even when nothing else is found: bytes a refused call may unpickle
        // and the scan cannot look into are never passed over.
        if depth > MAX_DEPTH {
            self.stop_short(location, "archives nested too deeply to inspect");
            return;
        }
        let before = self.report.findings.len();
        let outer = std::mem::replace(&mut self.in_payload, true);
        self.unless_nothing_found(|scan| {
            scan.wrapped("pickle", |scan| scan.bytes(data, location, depth, false));
            let mut index = 0;
            scan.report.findings.retain(|f| {
                index += 1;
                index <= before || !f.name.starts_with('<')
            });
        });
        self.in_payload = outer;
    }

    /// Run `scan`, keeping the problems it reports only if it found something:
    /// for a reading of bytes that need not be what it looks for.
    /// A reading that stopped short of something keeps its problems: what it
    /// could not look at is never passed over.
    fn unless_nothing_found(&mut self, scan: impl FnOnce(&mut Self)) {
        let (findings, problems) = (self.report.findings.len(), self.report.problems.len());
        let stopped_short = self.stopped_short;
        scan(self);
        if self.report.findings.len() == findings && self.stopped_short == stopped_short {
            self.report.problems.truncate(problems);
        }
    }

    /// A raw pickle (or several in a row); bytes that are no pickle from their
    /// first opcode on, with nothing found, are some other kind of file: nothing
    /// here can unpickle them.
    fn pickle(&mut self, data: &[u8], location: &str, depth: u32, top: bool) {
        let before = self.report.findings.len();
        let s = self.read_stream(data, location, depth, IdFormat::Zip, None);
        if let Some((kind, problem)) = s.problem {
            let not_a_pickle = s.pickles == 0
                && self.report.findings.len() == before
                && !data.starts_with(&[0x80]);
            if not_a_pickle {
                self.not_a_pickle(data, location, top);
            } else {
                self.problem(location, kind, problem);
            }
        }
    }
}

/// Where a nested entry or a wrapper's contents are: `parent > name`.
fn nested(parent: &str, name: &str) -> String {
    if parent.is_empty() || name.is_empty() {
        format!("{parent}{name}")
    } else {
        format!("{parent}{NESTED}{name}")
    }
}

const NESTED: &str = " > ";

/// How a Git LFS pointer file starts.
const GIT_LFS_POINTER: &[u8] = b"version https://git-lfs.github.com/spec/";

/// Scan a whole file's bytes.
pub fn scan_bytes(data: &[u8], options: &ScanOptions) -> Report {
    scan_file(data, None, options, None)
}

/// Scan a whole file's bytes, given the entries of the zip it is when they were
/// read without touching `data` ([`archive_zip::read_entries_by_reading`]): the
/// scan then reads only the pickles from `data`. `name` is the file's name.
pub fn scan_file(
    data: &[u8],
    entries: Option<archive_zip::Index>,
    options: &ScanOptions,
    name: Option<&str>,
) -> Report {
    let mut scan = Scan::new(data.len(), options, name);
    if options.byte_zero_only {
        scan.report.format = Format::NotAPickle;
        scan.report.skipped_because = Some("read only as a pickle from byte 0");
        scan.leading_pickle(data, "");
        return scan.finish();
    }
    match entries {
        // End records apart from their directory: the file may be several archives.
        Some(mut index) if Kind::of(data) == Kind::Zip && index.archive_end.is_some() => {
            let more = archive_zip::other_end_records(
                data,
                &index.entries,
                options.limits.max_zip_entries,
            );
            index.disagreements.extend(more);
            let layout = ZipLayout::of_file(&index, data, true, &options.limits);
            scan.zip_entries(data, index, &layout, &ZipReading::whole_file());
            if tar_archive::may_be_tar(data) {
                scan.also_a_tar(data, "", 0);
            }
        }
        _ => scan.bytes(data, "", 0, true),
    }
    scan.finish()
}

/// A span of a file that a loader reads as a file of its own, because another
/// file points it there (a DCP item: the bytes `torch.load` is handed, once the
/// stream transforms its writer applied are undone), and how the report names it.
#[derive(Debug, Clone)]
pub struct Span {
    pub offset: u64,
    pub length: u64,
    /// Compressions to undo, in order, before the bytes are what the loader reads.
    pub transforms: Vec<Compression>,
    pub label: String,
}

/// Scan each span of `data` as a file of its own, into one report whose
/// findings and problems are placed under their span's label. A span that
/// reaches past the end of `data` is unreadable, as a problem of its own kind,
/// and so is one whose transforms cannot be undone. The spans are scanned on up
/// to `threads` threads; the report lists them in the order given.
pub fn scan_spans(data: &[u8], spans: &[Span], options: &ScanOptions, threads: usize) -> Report {
    let mut reports: Vec<Report> = spans.iter().map(|_| Report::default()).collect();
    let jobs: Vec<_> = spans.iter().zip(reports.iter_mut()).collect();
    let size = |(span, _): &(&Span, &mut Report)| span.length as usize;
    let scan = |(span, out): (&Span, &mut Report)| {
        *out = scan_span(data, span, options);
        Ok::<(), std::convert::Infallible>(())
    };
    let Ok(()) = crate::parallel::run_by_size(jobs, threads, size, scan);
    spans_report(spans, reports, options)
}

/// The spans' own reports as one, each finding and problem placed under its
/// span's label.
pub(super) fn spans_report(spans: &[Span], reports: Vec<Report>, options: &ScanOptions) -> Report {
    let mut merged = Report {
        format: Format::Items,
        allowlisted: options.list_allowlisted.then(Vec::new),
        ..Report::default()
    };
    for (span, report) in spans.iter().zip(reports) {
        let placed = |mut f: Finding| {
            f.location = nested(&span.label, &f.location);
            f
        };
        merged
            .findings
            .extend(report.findings.into_iter().map(placed));
        if let (Some(all), Some(listed)) = (merged.allowlisted.as_mut(), report.allowlisted) {
            all.extend(listed.into_iter().map(placed));
        }
        for p in report.problems {
            merged.problem(&nested(&span.label, &p.location), p.kind, p.reason);
        }
        merged.pickles = merged.pickles.saturating_add(report.pickles);
    }
    merged
}

/// One span's scan, its locations relative to the span.
fn scan_span(data: &[u8], span: &Span, options: &ScanOptions) -> Report {
    let bytes = usize::try_from(span.offset)
        .ok()
        .zip(usize::try_from(span.length).ok())
        .and_then(|(start, len)| data.get(start..start.checked_add(len)?));
    match bytes {
        Some(bytes) => scan_span_bytes(std::borrow::Cow::Borrowed(bytes), span, options),
        None => span_out_of_range(span, data.len() as u64),
    }
}

/// The report on a span that reaches past the end of its file of `len` bytes.
pub(super) fn span_out_of_range(span: &Span, len: u64) -> Report {
    let mut report = Report::default();
    report.problem(
        "",
        problem_kind::POINTER_OUT_OF_RANGE,
        format!(
            "{} bytes at byte {} reach past the end of the file ({len} bytes)",
            span.length, span.offset
        ),
    );
    report
}

/// The scan of a span's `bytes`, once its transforms are undone.
pub(super) fn scan_span_bytes(
    mut bytes: std::borrow::Cow<'_, [u8]>,
    span: &Span,
    options: &ScanOptions,
) -> Report {
    for transform in &span.transforms {
        match transform.decode(&bytes, options.limits.max_inflated_bytes) {
            Ok(decoded) => bytes = std::borrow::Cow::Owned(decoded),
            Err(e) => {
                let mut report = Report::default();
                let kind = match e {
                    StreamError::TooLarge(_) => code::LIMIT,
                    StreamError::Corrupt(_) => code::MALFORMED_ARCHIVE,
                };
                report.problem("", kind, format!("{} stream: {e}", transform.name()));
                return report;
            }
        }
    }
    scan_file(&bytes, None, options, None)
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
    first_tail: usize,
    options: &ScanOptions,
) -> Option<Report> {
    if !options.pickles_only {
        return None;
    }
    let max_entries = options.limits.max_zip_entries;
    let mut payloads = TorchPayloads::default();
    let (index, mut pieces, listed) = archive_zip::read_directory_by_reading(
        len,
        read_at,
        first_tail,
        max_entries,
        &mut |name| payloads.skip(name),
    )?;
    let mut layout = ZipLayout::of(&index);
    // A torch.export archive's configs say which records torch reads raw.
    let configs: Vec<&Entry> = layout.pt2_configs(&index).into_iter().map(|(entry, _)| entry).collect();
    for entry in configs {
        archive_zip::read_entry_into(&mut pieces, entry, read_at)?;
    }
    layout.mark_raw_pt2_records(&pieces, &index, false, &options.limits);
    let wanted: Vec<&Entry> = layout.pickles(&index).collect();
    let bytes = wanted
        .iter()
        .map(|e| e.compressed_size)
        .try_fold(0u64, u64::checked_add);
    if wanted.len() > MAX_READ_ENTRIES || bytes? > MAX_READ_ENTRY_BYTES {
        return None;
    }
    // The last entry's local header bounds the gap before the directory, where
    // an entry no directory lists may hide.
    let last = listed.last().map(|&(offset, _)| offset);
    if let Some(last) = last {
        archive_zip::read_local_header_into(&mut pieces, last, read_at)?;
    }
    // The directory is spent once indexed.
    let read: Vec<u64> = wanted.iter().map(|e| e.header_offset).collect();
    let headers: Vec<u64> = read.iter().copied().chain(last).collect();
    pieces.keep_holding(&headers);
    for entry in &wanted {
        archive_zip::read_entry_into(&mut pieces, entry, read_at)?;
    }
    archive_zip::check_signature(&mut pieces, read_at)?;
    // Entries only a streaming reader finds, near those read: left to the
    // whole-file scan, which reads and reports them.
    let unlisted = archive_zip::unlisted_local_headers_by_reading(
        &mut pieces,
        &listed,
        &read,
        index.directory_offset,
        max_entries,
        read_at,
    )?;
    if !unlisted.is_empty() {
        return None;
    }
    // A zip whose first block tarfile would read as a header is also a tar:
    // the whole-file scan reads it that way too. The first entry's read
    // mostly holds that block already.
    let head = usize::try_from(len.min(tar_archive::BLOCK as u64)).ok()?;
    let first_block = match pieces.get(0..head) {
        Some(block) => block.to_vec(),
        None => read_at(0, head)?,
    };
    if tar_archive::may_open(&first_block) {
        return None;
    }
    let mut scan = Scan::new(usize::try_from(len).ok()?, options, None);
    scan.zip_entries(&pieces, index, &layout, &ZipReading::whole_file());
    Some(scan.finish())
}

/// torch's `get_unsafe_globals_in_checkpoint`, for every format: the globals of a
/// checkpoint's pickles that the allowlist (built-in plus user) does not cover.
/// torch lists those of a zip checkpoint's `data.pkl`, all that its `load`
/// reads; these are the globals of every pickle a pickles-only scan finds in the
/// file (`data.pkl` first), so that `[]` also means no other reader of the
/// archive reaches one: entries readers disagree on, bytes after a STOP, nested
/// payloads.
pub fn unsafe_globals(data: &[u8], options: &ScanOptions) -> Result<Vec<String>, Error> {
    let options = &ScanOptions {
        pickles_only: true,
        ..options.clone()
    };
    match Kind::of(data) {
        Kind::Zip => {
            let report = scan_file(data, None, options, None);
            // An archive a load refuses may still hold what other readers
            // unpickle: the globals a scan finds, or the load's refusal. An
            // archive of another reader's (a `.pt2`) answers for its pickles.
            let max = options.limits.max_zip_entries;
            if report.findings.is_empty() {
                if let Err(e) = archive_zip::find_record(data, max, &Record(records::DATA_PKL)) {
                    let kind = (archive_zip::read_index(data, max).ok()).and_then(|index| {
                        records::ArchiveKind::of(index.entries.iter().map(|e| &e.name[..]))
                    });
                    if kind.is_none() {
                        return Err(e);
                    }
                }
            }
            outcome(report)
        }
        Kind::Empty => Err(Error::archive("the file is empty", Location::default())),
        _ => outcome(scan_file(data, None, options, None)),
    }
}

/// `unsafe_globals` of a zip checkpoint of `len` bytes, reading only the pieces
/// a pickles-only scan needs with `read_at` (see [`scan_pickles_by_reading`]).
/// `None` when those pieces do not settle it, or the answer is an error: the
/// caller then runs `unsafe_globals` on the whole file for the same answer or
/// the precise error.
pub fn unsafe_globals_by_reading(
    len: u64,
    read_at: &dyn Fn(u64, usize) -> Option<Vec<u8>>,
    first_tail: usize,
    options: &ScanOptions,
) -> Option<Vec<String>> {
    let options = &ScanOptions {
        pickles_only: true,
        ..options.clone()
    };
    let report = scan_pickles_by_reading(len, read_at, first_tail, options)?;
    // A load needs data.pkl: without one, the whole-file answer says why.
    if report.pickles == 0 {
        return None;
    }
    outcome(report).ok()
}

/// The most bytes a pickle read from an archive entry may decompress to.
fn pickle_cap(limits: &Limits) -> u64 {
    limits.max_pickle_bytes.min(limits.max_inflated_bytes)
}

/// An entry's bytes, decompressed if needed (never past its declared size or
/// the cap on one pickle).
fn entry_data<'d, D: FileBytes + ?Sized>(
    entry: &Entry,
    data: &'d D,
    limits: &Limits,
) -> Result<std::borrow::Cow<'d, [u8]>, Error> {
    entry.read(data, Limit::InflatedBytes, pickle_cap(limits))
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
