"""Scanning untrusted files: what model hubs run on every upload.

Files are recognised by content, not by extension: torch zip checkpoints (every
pickle in the archive), legacy torch files, raw pickles, numpy ``.npy``/``.npz``
with object arrays, zip, tar and 7z archives and compressed files (nested ones
too), safetensors files (their headers checked), and TensorDict folders with
pickle sidecars. Only pickle bytes and headers are read, never tensor payloads.
A policy (what fails, the extra allowlist, which files of a folder) is a
:class:`Policy`, and can live in a settings file (:class:`Settings`).
"""
from __future__ import annotations

import functools
import os
from collections.abc import Callable, Iterable, Iterator

from .. import _core, _limits, _paths, _pointers
from .._pointers import Pointer

__all__ = ["EVERYTHING", "FAIL_ON", "STDIN", "GlobalFinding", "Pointer", "Policy", "Problem", "ScanReport",
           "Selection", "Settings", "SettingsError", "byte_size", "denylist", "iter_files", "scan", "scan_paths"]

# Records are named tuples, not dataclasses (`dataclasses` imports `inspect`), made
# by collections.namedtuple, not typing.NamedTuple (`typing` took 3 ms of a 28 ms
# `tensorplay scan FILE` process, which hubs start once per upload). Type checkers
# read the same fields, typed, from the first branch.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, NamedTuple

    from .._http import Client
    from .._remote import Readers, RemoteRead

    class _FindingFields(NamedTuple):
        name: str
        dangerous: bool
        location: str
        offset: int
        module: str = ""
        wrappers: tuple[str, ...] = ()

    class _ReportFields(NamedTuple):
        path: str
        format: str
        verdict: str
        findings: tuple[GlobalFinding, ...] = ()
        problems: tuple[Problem, ...] = ()
        pickles: int = 0
        pickles_only: bool = False
        allowlisted: tuple[GlobalFinding, ...] | None = None
        skipped_because: str | None = None
        reached_from: Pointer | None = None
        remote: RemoteRead | None = None
else:
    from collections import namedtuple

    _FindingFields = namedtuple("GlobalFinding", "name dangerous location offset module wrappers",
                                defaults=("", ()))
    _ReportFields = namedtuple(
        "ScanReport",
        "path format verdict findings problems pickles pickles_only allowlisted skipped_because reached_from remote",
        defaults=((), (), 0, False, None, None, None, None)
    )


class GlobalFinding(_FindingFields):
    """A global a pickle names; in a report's ``findings``, one outside the
    allowlist: ``dangerous`` when it is on the denylist of
    names that run code, touch files or the network, or unpickle nested data.
    ``name`` is ``module.qualname`` (or a ``<...>`` description of a global named
    by no text: an extension code, a computed name), found at byte ``offset`` of
    ``location`` (an archive entry, or nested ``outer > inner``), inside the
    compressions and archives ``wrappers`` names, outermost first."""

    __slots__ = ()

    @property
    def qualname(self) -> str:
        return self.name[len(self.module) + 1:] if self.module and self.module != self.name else ""

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "module": self.module, "qualname": self.qualname, "dangerous": self.dangerous,
                "location": self.location, "offset": self.offset, "wrappers": list(self.wrappers)}


class Problem(str):
    """Why (part of) a file could not be read: the text a person reads
    (``location: reason``), with the parts a program reads. ``kind`` is stable:
    an exception's ``.kind`` (``malformed_archive``, ``malformed_pickle``,
    ``limit``, ``tensor_bounds``, ``unsupported``, ``io``...; a load's refusal
    of a file the scan read is reported with the refusal's kind), or one only
    a scan meets: ``parser_disagreement`` (two readers of the bytes would read
    different things), ``unknown_format`` (binary data where a model was
    expected), ``not_a_regular_file`` (a pipe or device inside a folder),
    ``too_large`` (over the scan's ``max_file_size``), ``shard_index`` (a
    sharded checkpoint's index names what cannot be loaded), ``dcp_metadata``
    (a DCP metadata file whose items cannot be listed), ``pointer_out_of_range``
    (an item's span past its file's end), ``pointer_outside_folder`` (a
    pointer out of the folder scanned, also a dangerous finding), ``torchscript``
    (a TorchScript archive, whose code torch.jit.load runs), ``torch_package``
    (a torch.package archive, whose modules PackageImporter imports) or
    ``mobile_bytecode`` (lite interpreter bytecode, which torch's mobile loader
    runs) or ``aoti_package`` (a ``.pt2`` of compiled code, which
    ``aoti_load_package`` runs): the last four make a file unsafe under every
    policy (``runs_code``)."""

    kind: str
    location: str
    reason: str

    def __new__(cls, kind: str, location: str, reason: str) -> Problem:
        self = super().__new__(cls, f"{location}: {reason}" if location else reason)
        self.kind, self.location, self.reason = kind, location, reason
        return self

    def __reduce__(self) -> tuple[type[Problem], tuple[str, str, str]]:
        return Problem, (self.kind, self.location, self.reason)

    @property
    def runs_code(self) -> bool:
        """Whether the file's reader runs code the file carries (TorchScript,
        torch.package, mobile bytecode, an AOTInductor package)."""
        return self.kind in _core.RUNS_CODE_KINDS

    def to_json(self) -> dict[str, str]:
        return {"kind": self.kind, "location": self.location, "message": self.reason}


def _io_problem(e: OSError, location: str = "") -> Problem:
    return Problem("io", location, f"{type(e).__name__}: {e}")


class ScanReport(_ReportFields):
    """One file's scan. ``verdict`` is ``"clean"``, ``"unsafe"`` (globals found;
    outranks unreadable), ``"unreadable"`` or ``"skipped"`` (no pickle and no
    model format: ``skipped_because`` says what it is); with ``pickles_only`` only the
    directory and the pickles were read, so ``"clean"`` does not say a load would
    accept the file. ``allowlisted`` holds the globals inside the allowlist when
    the scan was asked to list them (``list_globals``), else None. A report on
    what another file points a loader at (a DCP item, a shard) says which in
    ``reached_from`` (a :class:`Pointer`), else None. A file scanned where it
    lives (a URL) says what was read in ``remote``: the object (its size, ETag
    and the other validators a server gave), round trips, requests and bytes."""

    __slots__ = ()

    @property
    def globals(self) -> tuple[str, ...]:
        """The distinct global names, in order of first appearance."""
        return tuple(dict.fromkeys(f.name for f in self.findings))

    @property
    def wrappers(self) -> list[str]:
        """The compressions and archives any finding was inside, each once."""
        return list(dict.fromkeys(w for f in self.findings for w in f.wrappers))

    @property
    def imports(self) -> list[tuple[GlobalFinding, bool]]:
        """Every global the pickles name, each with whether the allowlist holds
        it, in file order (needs ``list_globals``: else only the findings)."""
        listed = [(f, False) for f in self.findings] + [(f, True) for f in self.allowlisted or ()]
        return sorted(listed, key=lambda item: (item[0].location, item[0].offset))

    def to_json(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "format": self.format,
            "verdict": self.verdict,
            "skipped_because": self.skipped_because,
            "wrappers": self.wrappers,
            "globals": [f.to_json() for f in self.findings],
            "allowlisted_globals": None if self.allowlisted is None else [f.to_json() for f in self.allowlisted],
            "problems": [p.to_json() for p in self.problems],
            "pickles": self.pickles,
            "pickles_only": self.pickles_only,
            "reached_from": None if self.reached_from is None else dict(self.reached_from._asdict()),
            "remote": None if self.remote is None else self.remote.to_json(),
        }


_new_tuple = tuple.__new__


def scan(f: str | os.PathLike[str] | bytes, *, allow: Iterable[str] = (), pickles_only: bool = False,
         list_globals: bool = False, config: str | os.PathLike[str] | Settings | None = None,
         full: bool = False, client: Client | None = None) -> ScanReport:
    """Scan one file (a path, its bytes, or a URL: ``http(s)://``, ``hf://``,
    ``s3://`` or another fsspec URL). ``allow`` adds ``module.name`` entries
    to the built-in allowlist. ``list_globals`` also lists the globals inside the
    allowlist (``ScanReport.allowlisted``, ``ScanReport.imports``): everything the
    pickles import. ``config`` is a settings file (see :class:`Settings`), or
    one already read: its ``allow`` adds to ``allow``, and a path over its
    ``max-file-size`` is unreadable without being read.

    By default a file is clean only if a weights-only load would also accept it:
    the scan runs the load's every check without copying a tensor, and so reads
    each archive entry's local header too. ``pickles_only=True`` is the security
    gate alone: it reads the archive's directory and its pickles, and nothing
    else, so clean means no global outside the allowlist in any pickle, each read
    to its end, whether or not a load would accept the tensors.

    A URL is scanned where it lives, by ranges (see :mod:`tensorplay._remote`):
    a pickles-only scan whatever ``pickles_only`` says, unless ``full`` fetches
    the whole file (within the settings' ``max-file-size``) for a full scan.
    ``client`` is the :class:`tensorplay._http.Client` to read an http(s) or
    hf:// URL with (its timeouts, retries, credentials and allowed redirects);
    by default a new one. An ``s3://`` URL is read by a file system the scan
    makes, configured by the environment (see :mod:`tensorplay._objects`)."""
    if _paths.is_url(f):
        from .. import _remote_folders

        if _remote_folders.is_folder(str(f)):
            raise ValueError(f"{f} names a folder: scan_paths([{str(f)!r}]) reports on each of its files")
        return _scan_urls([str(f)], allow=list(allow), config=config, full=full, list_globals=list_globals,
                          client=client)[0]
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
    return _report(path, _core.scan, (source, allow, _limits.merged(None), pickles_only, list_globals),
                   pickles_only)


STDIN = "-"
"""The path that names standard input (``tensorplay scan -``), read as a stream."""


# What fails a scan, from the most lenient policy to the strictest (the default).
FAIL_ON = ("dangerous", "unsafe", "unreadable")
"""The levels of ``--fail-on`` (``Policy.fail_on``), most lenient first."""


class Selection:
    """Which files of a folder walk are scanned: those matching an ``include``
    pattern (all when there is none) and no ``exclude`` pattern, each an
    ``fnmatch`` glob tried on the path relative to the folder named and on the
    file's name (``*.bin``, ``snapshots/*/pytorch_model*``). A file named itself
    is always scanned. Files over ``max_file_size`` bytes are reported unreadable
    (kind ``too_large``), never passed over."""

    def __init__(self, include: Iterable[str] = (), exclude: Iterable[str] = (), max_file_size: int | None = None):
        self.include, self.exclude, self.max_file_size = tuple(include), tuple(exclude), max_file_size

    def wants(self, relative: str) -> bool:
        from fnmatch import fnmatch

        def matches(patterns: tuple[str, ...]) -> bool:
            name = os.path.basename(relative)
            return any(fnmatch(relative, p) or fnmatch(name, p) for p in patterns)

        return (not self.include or matches(self.include)) and not matches(self.exclude)

    def too_large(self, path: str) -> Problem | None:
        if self.max_file_size is None or path == STDIN:
            return None
        try:
            size = os.stat(path).st_size
        except OSError:
            return None  # the scan reports why it cannot be read
        if size <= self.max_file_size:
            return None
        return Problem("too_large", "", f"{size} bytes, over the {self.max_file_size}-byte maximum: not read")


EVERYTHING = Selection()
"""The selection that scans every file: no pattern, no size limit."""


class Policy:
    """What a scan was asked to do: what fails it (``fail_on``, the least finding
    that does: ``dangerous``, a denylisted global; ``unsafe``, any global outside
    the allowlist; ``unreadable``, that or a file not read to its end), the extra
    allowlist, the folder walk's selection, and whether only pickles are read."""

    def __init__(self, fail_on: str = "unreadable", allow: Iterable[str] = (), selection: Selection = EVERYTHING,
                 pickles_only: bool = False, settings_file: str | None = None):
        if fail_on not in FAIL_ON:
            raise ValueError(f"fail_on must be one of {FAIL_ON}, not {fail_on!r}")
        self.fail_on, self.allow, self.selection, self.pickles_only = fail_on, list(allow), selection, pickles_only
        self.settings_file = settings_file

    def fails(self, finding: GlobalFinding | Problem | None) -> bool:
        """Whether the policy fails a scan for this finding or problem (None: a
        file not read to its end). A file whose reader runs its code fails every policy."""
        if finding is None:
            return self.fail_on == "unreadable"
        if isinstance(finding, Problem):
            return finding.runs_code or self.fail_on == "unreadable"
        return finding.dangerous or self.fail_on != "dangerous"

    def to_json(self) -> dict[str, Any]:
        s = self.selection
        return {"fail_on": self.fail_on, "allow": self.allow, "include": list(s.include), "exclude": list(s.exclude),
                "max_file_size": s.max_file_size, "pickles_only": self.pickles_only,
                "settings_file": self.settings_file}


def byte_size(text: str | int) -> int:
    """``1024``, ``"10K"``, ``"512M"`` or ``"2G"`` (powers of 1024) as bytes."""
    if isinstance(text, int) and not isinstance(text, bool):
        size = text
    elif isinstance(text, str):
        units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
        number, unit = (text[:-1], units[text[-1].upper()]) if text[-1:].upper() in units else (text, 1)
        try:
            size = int(number) * unit
        except ValueError:
            raise ValueError(f"not a size: {text!r} (say 1024, 10K, 512M or 2G)") from None
    else:
        raise ValueError(f"not a size: {text!r} (say 1024, 10K, 512M or 2G)")
    if size < 0:
        raise ValueError(f"not a size: {text!r}")
    return size


class SettingsError(ValueError):
    """A settings file that cannot be read, or holds a key or value a scan does not know."""


class Settings:
    """A scan's settings, from a TOML file: the ``[tool.tensorplay.scan]`` table
    of a ``pyproject.toml``, or a file of its own (that table, or the keys at its
    top level). Keys: ``allow`` (``module.name`` entries added to the allowlist),
    ``fail-on`` (``dangerous``, ``unsafe`` or ``unreadable``), ``include`` and
    ``exclude`` (glob patterns for folder walks) and ``max-file-size`` (bytes, or
    ``"512M"``). A key a scan does not know is an error, never ignored: a
    misspelt policy must not pass files the user meant to fail."""

    KEYS = ("allow", "fail-on", "include", "exclude", "max-file-size")

    def __init__(self, allow: Iterable[str] = (), fail_on: str | None = None, include: Iterable[str] = (),
                 exclude: Iterable[str] = (), max_file_size: int | None = None, path: str | None = None):
        if fail_on is not None and fail_on not in FAIL_ON:
            raise SettingsError(f"fail-on must be one of {', '.join(FAIL_ON)}, not {fail_on!r}")
        self.allow, self.fail_on, self.path = list(allow), fail_on, path
        self.include, self.exclude, self.max_file_size = list(include), list(exclude), max_file_size

    @classmethod
    def read(cls, path: str | os.PathLike[str]) -> Settings:
        import tomllib

        path = os.fspath(path)
        try:
            with open(path, "rb") as f:
                document = tomllib.load(f)
        except (OSError, tomllib.TOMLDecodeError) as e:
            raise SettingsError(f"cannot read the settings file {path}: {e}") from None
        table: Any = document
        for key in ("tool", "tensorplay", "scan"):
            table = table.get(key) if isinstance(table, dict) else None
        if table is None:
            table = {} if os.path.basename(path) == "pyproject.toml" else document
        return cls._from_table(table, path)

    @classmethod
    def find(cls, start: str | os.PathLike[str] = ".") -> Settings | None:
        """The settings of the nearest ``pyproject.toml`` at or above ``start`` (as
        ruff and black find theirs), or None when it has no ``[tool.tensorplay.scan]``.
        A file that never names tensorplay is not parsed: most projects' have no such
        table, and parsing TOML (``tomllib`` imports ``typing``) was a fifth of a
        ``tensorplay scan FILE`` process. A name spelt with ``\\u`` escapes is parsed."""
        folder = os.path.abspath(start)
        while True:
            candidate = os.path.join(folder, "pyproject.toml")
            if os.path.isfile(candidate):
                try:
                    with open(candidate, "rb") as f:
                        text = f.read()
                    unnamed = not any(word in text for word in (b"tensorplay", b"\\u", b"\\U"))
                except OSError:
                    unnamed = False  # read() reports why
                if unnamed:
                    return None
                settings = cls.read(candidate)
                return settings if settings.path is not None else None
            parent = os.path.dirname(folder)
            if parent == folder:
                return None
            folder = parent

    @classmethod
    def _from_table(cls, table: Any, path: str) -> Settings:
        where = f"the settings file {path}"
        if not isinstance(table, dict):
            raise SettingsError(f"{where}: [tool.tensorplay.scan] is not a table")
        if not table:
            return cls()
        unknown = sorted(set(table) - set(cls.KEYS))
        if unknown:
            raise SettingsError(f"{where}: unknown key {unknown[0]!r} (known: {', '.join(cls.KEYS)})")

        def strings(key: str) -> list[str]:
            value = table.get(key, [])
            if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                raise SettingsError(f"{where}: {key} must be a list of strings")
            return value

        fail_on = table.get("fail-on")
        if fail_on is not None and not isinstance(fail_on, str):
            raise SettingsError(f"{where}: fail-on must be a string")
        size = table.get("max-file-size")
        try:
            max_file_size = None if size is None else byte_size(size)
        except ValueError as e:
            raise SettingsError(f"{where}: max-file-size: {e}") from None
        try:
            return cls(strings("allow"), fail_on, strings("include"), strings("exclude"), max_file_size, path)
        except SettingsError as e:
            raise SettingsError(f"{where}: {e}") from None

    def selection(self) -> Selection:
        if not (self.include or self.exclude or self.max_file_size is not None):
            return EVERYTHING
        return Selection(self.include, self.exclude, self.max_file_size)

    def policy(self, pickles_only: bool = False) -> Policy:
        return Policy(self.fail_on or "unreadable", self.allow, self.selection(), pickles_only, self.path)


def iter_files(paths: Iterable[str | os.PathLike[str]], selection: Selection = EVERYTHING,
               passed_over: list[tuple[str, str]] | None = None) -> Iterator[str]:
    """Every file a scan of ``paths`` reports on, in order: a named path as given
    (``-`` is standard input; pipes and devices are read as streams), and the files
    under a named directory, following symbolic links as a loader opening the file
    by its name would (a Hugging Face cache snapshot is links into ``blobs/``).
    A directory reached twice (a link loop) is walked once. No file is passed over
    for its name, suffix or folder: TensorDict leaves (``*.memmap`` next to a
    ``meta.json``) and git's own data (``.git/``) are read as a pickle from byte 0
    (see ``byte_zero_only`` in :func:`scan`), everything else by content. Only
    files the selection leaves out are passed over, with the reason appended to
    ``passed_over`` when given. (What a pointer names is read whatever the
    selection: see :func:`scan_paths`.)"""
    for path, _, _ in _targets(paths, selection, passed_over):
        yield path


GIT_FOLDER = ".git"
# Why a file of a folder walk is read only as a pickle from byte 0, by what it is.
TENSORDICT_LEAF = "a TensorDict leaf: raw tensor bytes, read only as a pickle from byte 0"
GIT_DATA = "git's own data, read only as a pickle from byte 0"


def _targets(paths: Iterable[str | os.PathLike[str]], selection: Selection = EVERYTHING,
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
                yield e.filename or root, _io_problem(e), None
            try:
                st = os.stat(root)
            except OSError as e:
                dirs.clear()
                yield root, _io_problem(e), None
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
                label = GIT_DATA if in_git else TENSORDICT_LEAF if _is_leaf(name, names) else None
                try:
                    mode = os.stat(full).st_mode
                except OSError as e:
                    # A dangling link or a loop of links: named, never passed over.
                    yield full, _io_problem(e), label
                    continue
                if stat.S_ISREG(mode):
                    yield full, selection.too_large(full), label
                else:
                    yield full, Problem("not_a_regular_file", "",
                                        "not a regular file: a pipe, socket or device inside a folder is not "
                                        "read (it could wait forever); name it to scan it as a stream"), label
        while failures:
            e = failures.pop()
            yield e.filename or p, _io_problem(e), None


def _is_leaf(name: str, names: set[str]) -> bool:
    """A TensorDict leaf, by the core's rule; a name that is no text (bytes that
    are not UTF-8, which tensordict never writes) is none."""
    try:
        return _core.is_tensordict_leaf(name, names)
    except UnicodeEncodeError:
        return False


def _scan_target(path: str, problem: Problem | None, label: str | None, allow: list[str], pickles_only: bool,
                 list_globals: bool, pointer_problems: tuple[Problem, ...] = ()) -> ScanReport:
    if problem is not None:
        return ScanReport(path, "unknown", "unreadable", problems=(problem,), pickles_only=pickles_only)
    if path == STDIN:
        return scan("/dev/stdin", allow=allow, pickles_only=pickles_only,
                    list_globals=list_globals)._replace(path=STDIN)
    if label is not None:
        report = _report(path, _core.scan, (path, allow, _limits.merged(None), pickles_only, list_globals, True),
                         pickles_only)
        report = report._replace(skipped_because=label) if report.verdict == "skipped" else report
    else:
        report = scan(path, allow=allow, pickles_only=pickles_only, list_globals=list_globals)
        if path.endswith(".index.json") and report.verdict != "unreadable":
            report = _check_shard_index(report)
    if pointer_problems and report.verdict in ("clean", "skipped"):
        # Its own bytes read clean, yet the pointers it gives cannot be followed.
        report = report._replace(verdict="unreadable", problems=(*report.problems, *pointer_problems))
    return report


def _check_shard_index(report: ScanReport) -> ScanReport:
    """A sharded checkpoint's index names the files a loader reads: one that is
    not JSON of that shape, or names a shard ``tensorplay.load`` does not open (a
    name with a folder part) makes the checkpoint unreadable. (Its shards are
    scanned as what they point at: see :func:`scan_paths`.)"""
    from .. import _sharded

    try:
        _sharded.Index(report.path)
        return report
    except OSError as e:
        problem = _io_problem(e)
    except _core.CheckpointError as e:
        problem = Problem("shard_index", "", str(e))
    # Unsafe outranks unreadable.
    verdict = "unsafe" if report.verdict == "unsafe" else "unreadable"
    return report._replace(verdict=verdict, problems=(*report.problems, problem))


def _report(path: str, scanning: Callable[..., tuple], args: tuple, pickles_only: bool,
            reached_from: Pointer | None = None) -> ScanReport:
    """A report from one of the core's scan tuples, or of why it could not be made."""
    try:
        kind, verdict, found, problems, pickles, listed, skipped_because = scanning(*args)
    except OSError as e:
        return ScanReport(path, "unknown", "unreadable", problems=(_io_problem(e),), pickles_only=pickles_only,
                          reached_from=reached_from)
    findings = tuple(map(GlobalFinding._make, found)) if found else ()
    if problems:
        problems = tuple(Problem(*p) for p in problems)
    if listed is not None:
        listed = tuple(map(GlobalFinding._make, listed))
    if verdict == "skipped" and skipped_because is None:
        skipped_because = "an empty file" if kind == "empty" else "no pickle"
    # What ScanReport(...) does, without its generated __new__: a first call of
    # that Python function was a fortieth of a pickles-only scan.
    return _new_tuple(ScanReport, (path, kind, verdict, findings, problems, pickles, pickles_only, listed,
                                   skipped_because, reached_from, None))


def _scan_reading(reading: _pointers.Reading, allow: list[str], pickles_only: bool,
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
        return _report(reading.target, _core.scan, (reading.target, allow, limits, pickles_only, list_globals),
                       pickles_only, pointer)
    return _report(reading.target, _core.scan_spans,
                   (reading.target, reading.spans, allow, limits, pickles_only, list_globals), pickles_only, pointer)


def _readings(files: list[tuple[str, Problem | None, str | None]],
              ) -> tuple[list[_pointers.Reading], dict[str, tuple[Problem, ...]]]:
    """What the files' pointers make loaders read, less whole files the walk
    already reads by content (a shard among the files scanned); and, by the
    pointing file's path, why its pointers could not be followed (said in that
    file's own report, unless its scan already finds it unsafe or unreadable)."""
    read_whole = {os.path.realpath(path) for path, problem, label in files if problem is None and label is None}
    readings = []
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
                readings.append(reading)
    return readings, unfollowed


def scan_paths(
    paths: Iterable[str | os.PathLike[str]],
    *,
    jobs: int | None = None,
    allow: Iterable[str] = (),
    progress: Callable[[int, int], None] | None = None,
    pickles_only: bool = False,
    selection: Selection = EVERYTHING,
    list_globals: bool = False,
    config: str | os.PathLike[str] | Settings | None = None,
    passed_over: list[tuple[str, str]] | None = None,
    full: bool = False,
    client: Client | Readers | None = None,
    on_report: Callable[[ScanReport], None] | None = None,
) -> list[ScanReport]:
    """Scan files and directories in parallel (the Rust scanner releases the GIL);
    which files, as :func:`iter_files` walks them with ``selection`` (and
    records what it passed over in ``passed_over``); ``pickles_only``,
    ``list_globals`` and ``config`` as for :func:`scan` (the settings' patterns
    choose the files when no ``selection`` is given). A path that cannot be
    read is reported ``unreadable``, never passed over.

    Then the pointers those files give loaders are followed (see
    :mod:`tensorplay._pointers`): a DCP metadata file's items, a shard index's
    shards, a TensorDict level's sub-levels. What they reach is read as the
    loader reads it and reported with ``reached_from`` saying which file pointed
    there (a shard the walk already read by content is not read again); a
    pointer out of the folder is reported unsafe.

    URLs among ``paths`` are scanned where they live, as :func:`scan` scans one
    (``full`` and ``client`` as there), ``jobs`` at once (16 by default);
    ``client`` may also be a :class:`tensorplay._remote.Readers`, a session
    whose object stores (one file system per scheme) outlive the call, as they
    must for a worker that scans a listing one unit at a time. A URL
    that names a folder (ending with ``/``, or ``hf://ORG/REPO[@REVISION]``) is
    listed and scanned as a local folder is, its pointers followed (see
    :mod:`tensorplay._remote_folders`).

    ``on_report`` is called with each report as soon as it is made (from the
    calling thread), for results streamed while a long list is scanned."""
    allow = list(allow)
    if config is not None:
        settings = config if isinstance(config, Settings) else Settings.read(config)
        allow = [*settings.allow, *allow]
        if selection is EVERYTHING:
            selection = settings.selection()
    paths = [os.fspath(p) for p in paths]
    urls = [p for p in paths if _paths.is_url(p)]
    if urls:
        local = [p for p in paths if not _paths.is_url(p)]
        local_reports = scan_paths(local, jobs=jobs, allow=allow, progress=None, pickles_only=pickles_only,
                                   selection=selection, list_globals=list_globals,
                                   passed_over=passed_over, on_report=on_report) if local else []
        return local_reports + _scan_urls(urls, allow=allow, selection=selection, full=full,
                                          list_globals=list_globals, client=client, jobs=jobs, progress=progress,
                                          on_report=on_report)
    files = list(_targets(paths, selection, passed_over))
    readings, unfollowed = _readings(files)
    work: list[Callable[[], ScanReport]] = [
        functools.partial(_scan_target, path, problem, label, allow, pickles_only, list_globals,
                          unfollowed.get(path, ()))
        for path, problem, label in files
    ] + [functools.partial(_scan_reading, reading, allow, pickles_only, list_globals) for reading in readings]
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
            reports[futures[future]] = report = future.result()
            if on_report is not None:
                on_report(report)
            if progress is not None:
                progress(done, len(work))
    return [r for r in reports if r is not None]


def _scan_urls(urls: list[str], *, allow: list[str], config: str | os.PathLike[str] | Settings | None = None,
               selection: Selection = EVERYTHING, full: bool = False, list_globals: bool = False,
               client: Client | Readers | None = None, jobs: int | None = None,
               progress: Callable[[int, int], None] | None = None,
               on_report: Callable[[ScanReport], None] | None = None) -> list[ScanReport]:
    """Reports for ``urls``, in their order, ``jobs`` scans at once."""
    from .. import _http, _remote, _remote_folders

    if config is not None:
        settings = config if isinstance(config, Settings) else Settings.read(config)
        allow = [*settings.allow, *allow]
        if selection is EVERYTHING:
            selection = settings.selection()
    own = client is None
    if isinstance(client, _remote.Readers):
        readers = client
    else:
        readers = _remote.Readers(_http.Client() if client is None else client)

    def scan_one(url: str) -> list[ScanReport]:
        if _remote_folders.is_folder(url):
            return _remote_folders.scan_folder(url, readers, allow=allow, full=full,
                                               max_file_size=selection.max_file_size, list_globals=list_globals,
                                               selection=selection)
        return [_remote.scan_url(url, readers, allow=allow, full=full, max_file_size=selection.max_file_size,
                                 list_globals=list_globals)]

    try:
        def done(found: list[ScanReport], count: int) -> None:
            for report in found:
                if on_report is not None:
                    on_report(report)
            if progress is not None:
                progress(count, len(urls))

        if len(urls) == 1:
            reports = scan_one(urls[0])
            done(reports, 1)
            return reports
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(max_workers=min(jobs or 16, len(urls))) as pool:
            reports = []
            for count, found in enumerate(pool.map(scan_one, urls), 1):
                reports += found
                done(found, count)
            return reports
    finally:
        if own:
            readers.client.close()


def denylist() -> list[dict[str, Any]]:
    """The globals a scan marks ``dangerous``, family by family: what each family
    does (``why``), which scanners and advisories list it (``sources``), and the
    ``modules`` (with their submodules) and single ``names`` it covers. Every
    global outside the allowlist is reported; these are the ones known to run
    code, touch files or the network, or unpickle nested data."""
    return [
        {"family": name, "why": why, "sources": sources, "modules": modules, "names": names}
        for name, why, sources, modules, names in _core.denylist()
    ]
