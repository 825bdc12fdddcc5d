//! Scanning one pickle stream: the VM runs in scan mode (same resolution rules as
//! a load, refusals recorded instead of raised), pickle after pickle until the
//! data ends. If a pickle breaks, a tolerant disassembly of the rest still
//! reports any GLOBAL or INST it can see.

use std::collections::BTreeSet;

use crate::error::{code, Error};
use crate::limits::Limits;
use crate::pickle::decoder::Divergence;
use crate::pickle::machine::{self, StringEncoding};
use crate::pickle::opcodes::{self, Arg};
use crate::scan::walker;
use crate::scan::{problem_kind, Finding, Report};
use crate::torch::policy::{self, FoundGlobal, UserGlobals};
use crate::torch::{Refusals, TorchHooks};
use crate::torch::IdFormat;
use crate::torch::Arena;

/// Pickles one stream may hold before the scanner stops trusting it.
const MAX_PICKLES: usize = 64;

/// The outcome of scanning one stream.
pub struct StreamScan {
    pub pickles: u32,
    /// Bytes consumed by complete pickles.
    pub end: usize,
    /// Why the stream could not be read to its end, if it could not.
    /// Where the stream stopped being read, of an `error::code` kind.
    pub problem: Option<(&'static str, String)>,
    /// Bytes handed to refused callables (`pickle.loads(b'...')`), with the
    /// offset of the call: what such a file would unpickle next.
    pub payloads: Vec<(u64, Vec<u8>)>,
    /// The first opcode broke, and the bytes were not swept for globals.
    pub unswept: bool,
}

/// What one pickle's run found.
struct Run {
    result: Result<usize, Error>,
    findings: Vec<Finding>,
    /// The globals inside the allowlist, when listed.
    allowed: Vec<Finding>,
    payloads: Vec<(u64, Vec<u8>)>,
    divergences: Vec<Divergence>,
}

fn run_one(data: &[u8], user: &UserGlobals, limits: &Limits, format: IdFormat, list: bool) -> Run {
    // The opcode walk answers only where its answer is the VM's (same end, same
    // globals at the same offsets); it knows torch zip persistent ids only. A
    // pickle with a global outside the allowlist runs in the VM too, for the
    // bytes its refused calls would unpickle.
    if format == IdFormat::Zip {
        if let Some(walk) = walker::walk(data, user, limits, list) {
            if walk.found.is_empty() {
                return Run {
                    result: Ok(walk.end),
                    findings: Vec::new(),
                    allowed: walk.allowed.into_iter().map(finding).collect(),
                    payloads: Vec::new(),
                    divergences: walk.divergences,
                };
            }
        }
    }
    let mut hooks = TorchHooks::new(Refusals::Record, user, *limits, format);
    hooks.allowed = list.then(Vec::new);
    let mut arena = Arena::new(limits);
    let result =
        machine::run(data, &mut hooks, &mut arena, limits, StringEncoding::Utf8).map(|p| p.end);
    let payloads = (hooks.payloads.iter())
        .filter_map(|(id, at)| Some((*at, arena.bytes(*id)?.to_vec())))
        .collect();
    Run {
        result,
        findings: hooks.found.into_iter().map(finding).collect(),
        allowed: hooks.allowed.into_iter().flatten().map(finding).collect(),
        payloads,
        divergences: hooks.divergences,
    }
}

fn finding(f: FoundGlobal) -> Finding {
    Finding {
        name: f.name,
        module_len: f.module_len,
        dangerous: f.dangerous,
        location: String::new(),
        offset: f.offset,
        wrappers: Vec::new(),
    }
}

/// Scan up to `max_pickles` pickles of `data` (all of them when `None`), adding
/// findings to `report` under `location`.
pub fn scan_stream(
    data: &[u8],
    location: &str,
    user: &UserGlobals,
    limits: &Limits,
    format: IdFormat,
    max_pickles: Option<usize>,
    report: &mut Report,
) -> StreamScan {
    let mut pos = 0usize;
    let mut pickles = 0u32;
    let mut payloads = Vec::new();
    let wanted = max_pickles.unwrap_or(MAX_PICKLES);
    while (pickles as usize) < wanted {
        let rest = data.get(pos..).unwrap_or_default();
        let run = run_one(rest, user, limits, format, report.allowlisted.is_some());
        let placed = |mut f: Finding| {
            f.offset = f.offset.saturating_add(pos as u64);
            f.location = location.to_owned();
            f
        };
        for f in run.findings {
            report.add(placed(f));
        }
        if let Some(listed) = report.allowlisted.as_mut() {
            listed.extend(run.allowed.into_iter().map(placed));
        }
        let here = pos as u64;
        payloads.extend((run.payloads.into_iter()).map(|(at, b)| (at.saturating_add(here), b)));
        for d in run.divergences {
            let at = pos.saturating_add(d.offset);
            let op = opcodes::opcode_name(d.op);
            report.problem(
                location,
                problem_kind::PARSER_DISAGREEMENT,
                format!("readers disagree at byte {at} ({op}): {}", d.what),
            );
            // What a reader that goes on from elsewhere would reach.
            if let Some(resumes_at) = d.resumes_at {
                sweep_rest(data, pos.saturating_add(resumes_at), location, user, report);
            }
        }
        match run.result {
            Ok(end) => {
                pickles += 1;
                pos += end;
                if pos >= data.len() || max_pickles.is_some_and(|m| pickles as usize >= m) {
                    return StreamScan {
                        pickles,
                        end: pos,
                        problem: None,
                        payloads,
                        unswept: false,
                    };
                }
            }
            Err(e) => {
                let offset = e
                    .location()
                    .and_then(|l| l.offset)
                    .unwrap_or(0)
                    .saturating_add(pos as u64);
                let problem = if pickles > 0 && offset == pos as u64 {
                    let reason = format!(
                        "{} bytes after the end of pickle {pickles} are not a pickle",
                        data.len() - pos
                    );
                    (code::MALFORMED_PICKLE, reason)
                } else {
                    let reason = format!(
                        "{}: {} (at byte {offset})",
                        if pickles > 0 {
                            "a later pickle breaks"
                        } else {
                            "the pickle breaks"
                        },
                        e.reason()
                    );
                    (e.kind().code(), reason)
                };
                // Bytes whose first opcode already breaks are no pickle: every
                // unpickler stops there, and what looks like a GLOBAL further on
                // (a line of text) is read by none. The caller sweeps them when
                // they may be unwrapped first (see `StreamScan::unswept`).
                let unswept = offset == 0;
                if !unswept {
                    sweep_rest(data, offset as usize, location, user, report);
                }
                return StreamScan {
                    pickles,
                    end: pos,
                    problem: Some(problem),
                    payloads,
                    unswept,
                };
            }
        }
    }
    let problem = (pos < data.len()).then(|| {
        let reason = format!("more than {wanted} pickles in one stream");
        (code::MALFORMED_ARCHIVE, reason)
    });
    StreamScan {
        pickles,
        end: pos,
        problem,
        payloads,
        unswept: false,
    }
}

/// The globals of the pickle an unpickler would read from the start of `data`,
/// which need not be a pickle at all: where that reading breaks is no problem,
/// nothing after the break is swept, and only names a module could have count
/// (a line of a header and tensor bytes read as GLOBAL's names imports nothing).
/// A reading that goes on until a limit stops it is returned: past the limit,
/// an unpickler could still reach a global.
pub fn scan_leading_pickle(
    data: &[u8],
    location: &str,
    user: &UserGlobals,
    limits: &Limits,
    report: &mut Report,
) -> Option<Error> {
    if !data.first().copied().is_some_and(opcodes::is_opcode) {
        return None;
    }
    let run = run_one(data, user, limits, IdFormat::Zip, false);
    for mut f in (run.findings.into_iter()).filter(|f| is_identifier_path(&f.name)) {
        f.location = location.to_owned();
        report.add(f);
    }
    run.result.err().filter(Error::is_limit)
}

/// After a break, walk the remaining bytes as opcodes (skipping bytes that are no
/// opcode) and report every GLOBAL/INST name and every STACK_GLOBAL whose two
/// strings are in plain sight.
pub fn sweep_rest(
    data: &[u8],
    from: usize,
    location: &str,
    user: &UserGlobals,
    report: &mut Report,
) {
    let mut pos = from;
    let mut recent: Vec<String> = Vec::new();
    // The VM and sweeps from other places may have passed the same opcodes.
    let mut seen: BTreeSet<u64> = (report.findings.iter())
        .filter(|f| f.location == location)
        .map(|f| f.offset)
        .collect();
    let mut record = |module: &str, name: &str, at: usize, report: &mut Report| {
        if seen.insert(at as u64) {
            record(module, name, at, location, user, report);
        }
    };
    while let Some(&op) = data.get(pos) {
        let start = pos;
        pos += 1;
        let Some((_, arg)) = opcodes::info(op) else {
            continue;
        };
        let rest = data.get(pos..).unwrap_or_default();
        let line = |bytes: &[u8]| bytes.iter().position(|b| *b == b'\n');
        match arg {
            Arg::None if op == opcodes::STACK_GLOBAL => {
                if let [.., module, name] = recent.as_slice() {
                    record(module, name, start, report);
                }
            }
            Arg::TwoLines => {
                let Some(first) = line(rest) else { break };
                let after = rest.get(first + 1..).unwrap_or_default();
                // pickle.py reads a last line without its newline less its last
                // byte, and imports what that names before it fails.
                let second = line(after).unwrap_or(after.len().saturating_sub(1));
                let module =
                    String::from_utf8_lossy(rest.get(..first).unwrap_or_default()).into_owned();
                let name =
                    String::from_utf8_lossy(after.get(..second).unwrap_or_default()).into_owned();
                if is_identifier_path(&module) && is_identifier_path(&name) {
                    record(&module, &name, start, report);
                    pos += first + 1 + second + 1;
                }
            }
            Arg::Counted(width) => {
                let width = usize::from(width);
                if rest.len() < width {
                    break;
                }
                // A body that runs past the end: go on from the next byte.
                let Some(len) = opcodes::arg_len(arg, rest) else {
                    continue;
                };
                let is_text = matches!(
                    op,
                    opcodes::SHORT_BINUNICODE | opcodes::BINUNICODE | opcodes::BINUNICODE8
                );
                if let (true, Some(body)) = (is_text, rest.get(width..len)) {
                    recent.push(String::from_utf8_lossy(body).into_owned());
                    if recent.len() > 2 {
                        recent.remove(0);
                    }
                }
                pos += len;
            }
            // A line without its newline, an argument cut short: nothing more to read.
            arg => match opcodes::arg_len(arg, rest) {
                Some(len) => pos += len,
                None => break,
            },
        }
    }
}

fn is_identifier_path(s: &str) -> bool {
    !s.is_empty()
        && s.len() < 256
        && s.chars()
            .all(|c| c.is_alphanumeric() || c == '_' || c == '.')
}

fn record(
    module: &str,
    name: &str,
    offset: usize,
    location: &str,
    user: &UserGlobals,
    report: &mut Report,
) {
    let (module, name) = policy::map_py2(module, name);
    let found = Finding {
        location: location.to_owned(),
        ..finding(FoundGlobal::new(&module, &name, offset as u64))
    };
    match policy::resolve(&module, &name, user) {
        policy::Resolution::Allowed(_) => {
            if let Some(listed) = report.allowlisted.as_mut() {
                listed.push(found);
            }
        }
        _ => report.add(found),
    }
}
