"""Scanning local files: one file by content (:func:`scan_file`), the files a
folder walk reads (:func:`iter_files`), and what their pointers make loaders
read (:func:`readings`, :func:`scan_reading`). :mod:`tensorplay.scanner` puts
this together with the scan of files where they live."""
from __future__ import annotations

import functools
import os
from collections.abc import Callable, Iterable, Iterator

from . import _core, _limits, _pointers
from ._findings import STDIN, GlobalFinding, Problem, ScanReport, io_problem
from ._pointers import Pointer
from ._scan_policy import EVERYTHING, Selection, Settings

_new_tuple = tuple.__new__


def scan_file(f: str | os.PathLike[str] | bytes, *, allow: Iterable[str] = (), pickles_only: bool = False,
              list_globals: bool = False, config: str | os.PathLike[str] | Settings | None = None) -> ScanReport:
    """A local file (a path, or its bytes), as :func:`tensorplay.scanner.scan` scans one."""
    if isinstance(f, str):
        source = path = f
    elif isinstance(f, (bytes, bytearray, memoryview)):
        source, path = bytes(f), "<bytes>"
    else:
        source = path = os.fspath(f)
    allow = allow if isinstance(allow, (list, tuple)) else list(allow)
    if config is not None:
        settings = config if isinstance(config, Settings) else Settings.read(config)
        allow = [*settings.allow, *allow]
        too_large = settings.selection().too_large(path) if isinstance(source, str) else None
        if too_large is not None:
            return ScanReport(path, "unknown", "unreadable", problems=(too_large,), pickles_only=pickles_only)
    # Positional, as for get_unsafe_globals_in_checkpoint: matching keywords is a
    # measurable part of a first call.
    return report_of(path, _core.scan, (source, allow, _limits.merged(None), pickles_only, list_globals),
                  pickles_only)


def iter_files(paths: Iterable[str | os.PathLike[str]], selection: Selection = EVERYTHING,
               passed_over: list[tuple[str, str]] | None = None) -> Iterator[str]:
    """Every file a scan of ``paths`` reports on, in order: a named path as given
    (``-`` is standard input; pipes and devices are read as streams), and the files
    under a named directory, following symbolic links as a loader opening the file
    by its name would (a Hugging Face cache snapshot is links into ``blobs/``).
    A directory reached twice (a link loop) is walked once. No file is passed over
    for its name, suffix or folder: TensorDict leaves (``*.memmap`` next to a
    ``meta.json``) and git's own data (``.git/``) are read as a pickle from byte 0
    (see ``byte_zero_only`` in :func:`tensorplay.scanner.scan`), everything else by content. Only
    files the selection leaves out are passed over, with the reason appended to
    ``passed_over`` when given. (What a pointer names is read whatever the
    selection: see :func:`tensorplay.scanner.scan_paths`.)"""
    for path, _, _ in targets(paths, selection, passed_over):
        yield path


GIT_FOLDER = ".git"
# Why a file of a folder walk is read only as a pickle from byte 0, by what it is.
TENSORDICT_LEAF = "a TensorDict leaf: raw tensor bytes, read only as a pickle from byte 0"
GIT_DATA = "git's own data, read only as a pickle from byte 0"


def targets(paths: Iterable[str | os.PathLike[str]], selection: Selection = EVERYTHING,
            passed_over: list[tuple[str, str]] | None = None,
            ) -> Iterator[tuple[str, Problem | None, str | None]]:
    """What :func:`iter_files` yields, each with the reason it cannot be read when a
    walk already knows it (an unlistable folder, a pipe or device inside a folder:
    reading one could wait forever), else None, and why it is read only as a
    pickle from byte 0, else None."""
    import stat

    def pass_over(path: str, why: str) -> None:
        if passed_over is not None:
            passed_over.append((path, why))

    for p in paths:
        p = os.fspath(p)
        if p == STDIN or not os.path.isdir(p):
            yield p, selection.too_large(p), None
            continue
        seen: set[tuple[int, int]] = set()
        failures: list[OSError] = []
        git_roots: list[str] = []
        for root, dirs, files in os.walk(p, followlinks=True, onerror=failures.append):
            while failures:
                e = failures.pop()
                yield e.filename or root, io_problem(e), None
            try:
                st = os.stat(root)
            except OSError as e:
                dirs.clear()
                yield root, io_problem(e), None
                continue
            if (st.st_dev, st.st_ino) in seen:
                dirs.clear()
                continue
            seen.add((st.st_dev, st.st_ino))
            if GIT_FOLDER in dirs:
                git_roots.append(os.path.join(root, GIT_FOLDER) + os.sep)
            in_git = any(root.startswith(g) or root + os.sep == g for g in git_roots)
            dirs.sort()
            names = set(files)
            for name in sorted(files):
                full = os.path.join(root, name)
                if selection is not EVERYTHING and not selection.wants(os.path.relpath(full, p)):
                    pass_over(full, "left out by the include and exclude patterns")
                    continue
                label = GIT_DATA if in_git else TENSORDICT_LEAF if is_leaf(name, names) else None
                try:
                    mode = os.stat(full).st_mode
                except OSError as e:
                    # A dangling link or a loop of links: named, never passed over.
                    yield full, io_problem(e), label
                    continue
                if stat.S_ISREG(mode):
                    yield full, selection.too_large(full), label
                else:
                    yield full, Problem("not_a_regular_file", "",
                                        "not a regular file: a pipe, socket or device inside a folder is not "
                                        "read (it could wait forever); name it to scan it as a stream"), label
        while failures:
            e = failures.pop()
            yield e.filename or p, io_problem(e), None


def is_leaf(name: str, names: set[str]) -> bool:
    """A TensorDict leaf, by the core's rule; a name that is no text (bytes that
    are not UTF-8, which tensordict never writes) is none."""
    try:
        return _core.is_tensordict_leaf(name, names)
    except UnicodeEncodeError:
        return False


def scan_target(path: str, problem: Problem | None, label: str | None, allow: list[str], pickles_only: bool,
                 list_globals: bool, pointer_problems: tuple[Problem, ...] = ()) -> ScanReport:
    if problem is not None:
        return ScanReport(path, "unknown", "unreadable", problems=(problem,), pickles_only=pickles_only)
    if path == STDIN:
        return scan_file("/dev/stdin", allow=allow, pickles_only=pickles_only,
                         list_globals=list_globals)._replace(path=STDIN)
    if label is not None:
        report = report_of(path, _core.scan, (path, allow, _limits.merged(None), pickles_only, list_globals, True),
                           pickles_only)
        report = report._replace(skipped_because=label) if report.verdict == "skipped" else report
    else:
        report = scan_file(path, allow=allow, pickles_only=pickles_only, list_globals=list_globals)
        if path.endswith(".index.json") and report.verdict != "unreadable":
            report = check_shard_index(report)
    if pointer_problems and report.verdict in ("clean", "skipped"):
        # Its own bytes read clean, yet the pointers it gives cannot be followed.
        report = report._replace(verdict="unreadable", problems=(*report.problems, *pointer_problems))
    return report


def check_shard_index(report: ScanReport) -> ScanReport:
    """A sharded checkpoint's index names the files a loader reads: one that is
    not JSON of that shape, or names a shard ``tensorplay.load`` does not open (a
    name with a folder part) makes the checkpoint unreadable. (Its shards are
    scanned as what they point at: see :func:`tensorplay.scanner.scan_paths`.)"""
    from . import _sharded

    try:
        _sharded.Index(report.path)
        return report
    except OSError as e:
        problem = io_problem(e)
    except _core.CheckpointError as e:
        problem = Problem("shard_index", "", str(e))
    # Unsafe outranks unreadable.
    verdict = "unsafe" if report.verdict == "unsafe" else "unreadable"
    return report._replace(verdict=verdict, problems=(*report.problems, problem))


def report_of(path: str, scanning: Callable[..., _core.ScanResult], args: tuple, pickles_only: bool,
              reached_from: Pointer | None = None) -> ScanReport:
    """A report from one of the core's scan results, or of why it could not be made."""
    try:
        scanned = scanning(*args)
    except OSError as e:
        return ScanReport(path, "unknown", "unreadable", problems=(io_problem(e),), pickles_only=pickles_only,
                          reached_from=reached_from)
    findings = tuple(map(GlobalFinding.of, scanned.findings))
    problems = tuple(Problem(p.kind, p.location, p.reason) for p in scanned.problems)
    listed = scanned.allowlisted
    if listed is not None:
        listed = tuple(map(GlobalFinding.of, listed))
    skipped_because = scanned.skipped_because
    if scanned.verdict == "skipped" and skipped_because is None:
        skipped_because = "an empty file" if scanned.format == "empty" else "no pickle"
    # What ScanReport(...) does, without its generated __new__: a first call of
    # that Python function was a fortieth of a pickles-only scan.
    return _new_tuple(ScanReport, (path, scanned.format, scanned.verdict, findings, problems, scanned.pickles,
                                   pickles_only, listed, skipped_because, reached_from, None))


def scan_reading(reading: _pointers.Reading, allow: list[str], pickles_only: bool,
                 list_globals: bool) -> ScanReport:
    """What a pointer reaches, read as its loader reads it."""
    pointer = reading.pointer
    where = pointer.item or ""
    if reading.outside is not None:
        # Never read: it is not part of what was handed to the scan. A finding, so
        # that every policy fails it; a problem of its own kind, that says why.
        outside = GlobalFinding(f"<a file outside the folder: {reading.outside}>", True, where, 0)
        why = Problem("pointer_outside_folder", where, f"{pointer.source} points a loader at {reading.outside!r}, "
                      "outside its folder: no writer makes such a pointer, and what it reaches was not scanned")
        return ScanReport(reading.target, "pointer", "unsafe", findings=(outside,), problems=(why,),
                          pickles_only=pickles_only, reached_from=pointer)
    if reading.problem is not None:
        kind, reason = reading.problem
        return ScanReport(reading.target, "pointer", "unreadable", problems=(Problem(kind, where, reason),),
                          pickles_only=pickles_only, reached_from=pointer)
    limits = _limits.merged(None)
    if reading.spans is None:
        return report_of(reading.target, _core.scan, (reading.target, allow, limits, pickles_only, list_globals),
                         pickles_only, pointer)
    return report_of(reading.target, _core.scan_spans,
                     (reading.target, reading.spans, allow, limits, pickles_only, list_globals), pickles_only, pointer)


def readings(files: list[tuple[str, Problem | None, str | None]],
             ) -> tuple[list[_pointers.Reading], dict[str, tuple[Problem, ...]]]:
    """What the files' pointers make loaders read, less whole files the walk
    already reads by content (a shard among the files scanned); and, by the
    pointing file's path, why its pointers could not be followed (said in that
    file's own report, unless its scan already finds it unsafe or unreadable)."""
    read_whole = {os.path.realpath(path) for path, problem, label in files if problem is None and label is None}
    found = []
    unfollowed: dict[str, tuple[Problem, ...]] = {}
    for path, problem, _ in files:
        # Only regular files: opening a pipe to look could wait forever.
        kind = _pointers.kind_of(path) if problem is None and path != STDIN and os.path.isfile(path) else None
        if kind is None:
            continue
        for reading in _pointers.follow(path, kind):
            if reading.problem is not None and reading.target == path:
                kind_, reason = reading.problem
                unfollowed[path] = (*unfollowed.get(path, ()), Problem(kind_, reading.pointer.item or "", reason))
                continue
            already = (reading.spans is None and reading.outside is None and reading.problem is None
                       and os.path.realpath(reading.target) in read_whole)
            if not already:
                found.append(reading)
    return found, unfollowed


def scan_local_paths(paths: list[str], *, jobs: int | None, allow: list[str],
                     progress: Callable[[int, int], None] | None, pickles_only: bool, selection: Selection,
                     list_globals: bool, passed_over: list[tuple[str, str]] | None,
                     on_report: Callable[[ScanReport], None] | None) -> list[ScanReport]:
    """Local files and folders, as :func:`tensorplay.scanner.scan_paths` scans them."""
    files = list(targets(paths, selection, passed_over))
    to_read, unfollowed = readings(files)
    work: list[Callable[[], ScanReport]] = [
        functools.partial(scan_target, path, problem, label, allow, pickles_only, list_globals,
                          unfollowed.get(path, ()))
        for path, problem, label in files
    ] + [functools.partial(scan_reading, reading, allow, pickles_only, list_globals) for reading in to_read]
    workers = min(jobs or os.cpu_count() or 1, len(work))
    if workers <= 1:
        # One file, the common case of a hub's per-upload call: no pool to start
        # (concurrent.futures alone was a tenth of `tensorplay scan FILE`).
        in_order = []
        for scan_one in work:
            in_order.append(scan_one())
            if on_report is not None:
                on_report(in_order[-1])
            if progress is not None:
                progress(len(in_order), len(work))
        return in_order
    from concurrent.futures import ThreadPoolExecutor, as_completed

    reports: list[ScanReport | None] = [None] * len(work)
    with ThreadPoolExecutor(max_workers=workers) as pool:
        futures = {pool.submit(scan_one): i for i, scan_one in enumerate(work)}
        for done, future in enumerate(as_completed(futures), 1):
            reports[futures[future]] = made = future.result()
            if on_report is not None:
                on_report(made)
            if progress is not None:
                progress(done, len(work))
    return [r for r in reports if r is not None]
