//! The pickle VM, alone and against the scanner.

use crate::error::{ErrorKind, Refusal};
use crate::limits::Limits;
use crate::pickle::machine::{self, StringEncoding};
use crate::scan::{self, ScanOptions};
use crate::torch::policy::UserGlobals;
use crate::torch::IdFormat;
use crate::torch::{Arena, Node, Torch};
use crate::torch::{Dense, StorageDecl, TensorKind};
use crate::torch::{Refusals, TorchHooks};
use crate::value::keys;
use crate::value::NodeId;

/// Run the VM on raw bytes in load mode with tight limits, then drop the arena.
pub fn pickle_vm(data: &[u8]) {
    let limits = Limits::tight();
    let user = UserGlobals::default();
    let mut hooks = TorchHooks::new(Refusals::Raise, &user, limits, IdFormat::Zip);
    let mut arena = Arena::new(&limits);
    let result = machine::run(data, &mut hooks, &mut arena, &limits, StringEncoding::Utf8);
    assert!(
        arena.len() as u64 <= limits.max_nodes,
        "the arena holds {} nodes, more than max_nodes",
        arena.len()
    );
    if let Ok(parsed) = result {
        assert!(parsed.end <= data.len(), "STOP past the end of the data");
        assert!(parsed.end >= 1, "a pickle of zero bytes");
        assert!(parsed.root.index() < arena.len(), "root outside the arena");
        assert!(hooks.found.is_empty(), "a load recorded scan findings");
        assert!(hooks.storages.decls().len() as u64 <= limits.max_storages);
        check_arena_ids(&arena);
        for node in arena.nodes() {
            if let Node::Domain(Torch::Tensor(t)) = node {
                if let Some(dense) = dense_of(&arena.tensor(*t).kind) {
                    let decl = hooks.storages.get(dense.storage).unwrap_or_else(|| {
                        panic!("a tensor names unknown storage {:?}", dense.storage)
                    });
                    check_extent(dense, decl);
                }
            }
        }
        // What a checkpoint load runs next; it may refuse, never panic.
        let _ = keys::check_keys(&arena, limits.max_key_values);
    }
    drop(arena);
}

/// Every id stored inside a node points into the arena.
pub(super) fn check_arena_ids(arena: &Arena) {
    let n = arena.len();
    let ok = |id: &NodeId| id.index() < n;
    for node in arena.nodes() {
        let fine = match node {
            Node::Tuple(items) => arena.items(*items).iter().all(ok),
            Node::List(items) => items.iter().all(ok),
            Node::Dict(_, d) => {
                let d = arena.dict(*d);
                d.items.iter().all(|(k, v)| ok(k) && ok(v))
                    && d.state().iter().all(ok)
                    && d.base().is_none_or(|(b, _)| ok(&b))
            }
            Node::Set(s) => s.items.iter().all(ok) && s.base.is_none_or(|(b, _)| ok(&b)),
            _ => true,
        };
        assert!(fine, "a node refers outside the arena: {node:?}");
    }
}

pub(super) fn dense_of(kind: &TensorKind) -> Option<&Dense> {
    match kind {
        TensorKind::Dense(d) => Some(d),
        TensorKind::Quantized { dense, .. } => Some(dense),
        _ => None,
    }
}

/// A dense view must lie inside its storage: the core checks this when the tensor is made.
pub(super) fn check_extent(dense: &Dense, decl: &StorageDecl) {
    assert_eq!(
        dense.shape.len(),
        dense.stride.len(),
        "rank of size and stride differ"
    );
    let extent = dense
        .extent_bytes()
        .unwrap_or_else(|| panic!("a tensor whose extent overflows was accepted: {dense:?}"));
    assert!(
        extent <= decl.nbytes,
        "a tensor needing {extent} bytes views storage '{}' of {} bytes",
        decl.key,
        decl.nbytes
    );
}

// ---------------------------------------------------------------------------
// The scanner, against the loader

/// Load and scan the same bytes. Every global a load refuses by name must be in
/// the scan's findings, and a pickle that loads must scan clean. The whole-file
/// scanner entry points must not panic either.
pub fn scanner_differential(data: &[u8]) {
    let limits = Limits::tight();
    let user = UserGlobals::default();

    let mut load_hooks = TorchHooks::new(Refusals::Raise, &user, limits, IdFormat::Zip);
    let mut load_arena = Arena::new(&limits);
    let load = machine::run(
        data,
        &mut load_hooks,
        &mut load_arena,
        &limits,
        StringEncoding::Utf8,
    );

    let mut scan_hooks = TorchHooks::new(Refusals::Record, &user, limits, IdFormat::Zip);
    let mut scan_arena = Arena::new(&limits);
    let scanned = machine::run(
        data,
        &mut scan_hooks,
        &mut scan_arena,
        &limits,
        StringEncoding::Utf8,
    );
    let found: Vec<&str> = scan_hooks.found.iter().map(|f| f.name.as_str()).collect();

    let refused_global = match &load {
        Err(e) => match e.kind() {
            ErrorKind::Unsafe(
                Refusal::UnsupportedGlobal { module, name }
                | Refusal::BlockedGlobal { module, name, .. },
            ) => Some((module, name)),
            _ => None,
        },
        Ok(_) => None,
    };
    match (&load, refused_global) {
        (Ok(parsed), _) => {
            assert!(
                found.is_empty(),
                "the pickle loads, but the scan reports {found:?}"
            );
            match &scanned {
                Ok(s) => assert_eq!(s.end, parsed.end, "load and scan stop at different bytes"),
                Err(e) => panic!("the pickle loads, but the scan fails: {e}"),
            }
        }
        (Err(_), Some((module, name))) => {
            // The scanner names a global as `module.name`, or `module` when the name is empty.
            let expected = if name.is_empty() {
                module.clone()
            } else {
                format!("{module}.{name}")
            };
            assert!(
                found.contains(&expected.as_str()),
                "the load refuses {expected}, the scan reports {found:?} ({})",
                match &scanned {
                    Ok(_) => "scan completed".to_owned(),
                    Err(e) => format!("scan failed: {e}"),
                }
            );
        }
        (Err(_), None) => {}
    }
    drop(load_arena);
    drop(scan_arena);

    let mut options = ScanOptions {
        limits,
        ..ScanOptions::default()
    };
    let report = scan::scan_bytes(data, &options);
    // Linear work however entries overlap or nest: a pickle takes at least a byte
    // of the file, of what was inflated, or of the nested entries read.
    let len = data.len() as u64;
    let inflated = len
        .saturating_mul(scan::MAX_DEFLATE_RATIO)
        .min(limits.max_inflated_bytes);
    let has = len.saturating_add(inflated);
    let bound = has.saturating_mul(scan::WORK_PER_FILE_BYTE + 1);
    assert!(
        u64::from(report.pickles) <= bound,
        "{} pickles scanned in {} bytes (at most {bound} expected)",
        report.pickles,
        data.len()
    );
    let _ = scan::unsafe_globals(data, &options);

    // Listing the allowlisted globals changes nothing else the scan reports.
    let listing = scan::scan_bytes(
        data,
        &ScanOptions {
            list_allowlisted: true,
            ..options.clone()
        },
    );
    assert_eq!(
        listing.verdict(),
        report.verdict(),
        "listing changed the verdict"
    );
    assert_eq!(
        listing.names(),
        report.names(),
        "listing changed the findings"
    );

    // The pickles-only scan checks less than the full one, never more: a file the
    // full scan passes, it passes too.
    options.pickles_only = true;
    let pickles_only = scan::scan_bytes(data, &options);
    assert!(u64::from(pickles_only.pickles) <= bound);
    if report.verdict() == scan::Verdict::Clean {
        assert_eq!(
            pickles_only.verdict(),
            scan::Verdict::Clean,
            "clean in a full scan, not in a pickles-only one: {:?} {:?}",
            pickles_only.findings,
            pickles_only.problems
        );
    }
    // Reading pieces of the file may give up, but never gives another report.
    let read_at = |offset: u64, n: usize| {
        let start = usize::try_from(offset).ok()?;
        data.get(start..start.checked_add(n)?).map(<[u8]>::to_vec)
    };
    let summary = |r: &scan::Report| (r.format, r.findings.clone(), r.problems.clone(), r.pickles);
    let by_reading =
        scan::scan_pickles_by_reading(len, &read_at, crate::archive::zip::TAIL_READ, &options);
    if let Some(by_reading) = &by_reading {
        assert_eq!(
            summary(by_reading),
            summary(&pickles_only),
            "a pickles-only scan from reads differs from the whole file's"
        );
    }
    spans_in_waves_as_in_the_file(data, &options);
    // Read in waves of ranges (a remote file), it ends, fetching only bytes of
    // the file, with the same report, or asks for the whole file when the reads
    // of a local file do.
    let mut held = crate::archive::zip::Pieces::new(data.len());
    for _ in 0..MAX_WAVES {
        match scan::scan_pickles_in_waves(len, &held, &options) {
            scan::Wave::Fetch(ranges) => {
                assert!(!ranges.is_empty(), "a wave of no ranges");
                for (offset, n) in ranges {
                    let bytes = usize::try_from(offset)
                        .ok()
                        .zip(usize::try_from(n).ok())
                        .and_then(|(o, n)| data.get(o..o.checked_add(n)?));
                    let bytes = bytes.expect("a range outside the file");
                    held.add(offset as usize, bytes.to_vec());
                }
            }
            scan::Wave::Settled(report) => {
                assert_eq!(
                    summary(&report),
                    summary(&pickles_only),
                    "waves differ from the whole file"
                );
                return;
            }
            scan::Wave::WholeFile => {
                assert!(by_reading.is_none(), "waves gave up where reads did not");
                return;
            }
        }
    }
    panic!("no report after {MAX_WAVES} waves");
}

/// Spans of a remote file (DCP items), read in waves, give the report the
/// spans of the local file give: the whole file, a middle span, one past its end.
fn spans_in_waves_as_in_the_file(data: &[u8], options: &scan::ScanOptions) {
    let len = data.len() as u64;
    let span = |offset: u64, length: u64, label: &str| scan::Span {
        offset,
        length,
        transforms: Vec::new(),
        label: label.to_owned(),
    };
    let spans = [
        span(0, len, "whole"),
        span(len / 3, len - len / 3 - len / 5, "middle"),
        span(len / 2, len, "past the end"),
    ];
    let local = scan::scan_spans(data, &spans, options, 1);
    let summary = |r: &scan::Report| (r.format, r.findings.clone(), r.problems.clone(), r.pickles);
    let mut held = crate::archive::zip::Pieces::new(data.len());
    for _ in 0..MAX_WAVES {
        match scan::scan_spans_in_waves(len, &held, &spans, options) {
            scan::Wave::Fetch(ranges) => {
                assert!(!ranges.is_empty(), "a wave of no ranges");
                for (offset, n) in ranges {
                    let start = usize::try_from(offset).expect("an offset in the file");
                    let bytes =
                        (start.checked_add(n as usize)).and_then(|end| data.get(start..end));
                    held.add(start, bytes.expect("a range outside the file").to_vec());
                }
            }
            scan::Wave::Settled(report) => {
                assert_eq!(
                    summary(&report),
                    summary(&local),
                    "spans in waves differ from the file's"
                );
                return;
            }
            scan::Wave::WholeFile => panic!("spans never ask for the whole file"),
        }
    }
    panic!("no report on spans after {MAX_WAVES} waves");
}

/// More waves than a file takes: each wave holds a read that follows from the
/// last one's bytes, and the scan's reads are bounded by its limits.
const MAX_WAVES: usize = 1024;
