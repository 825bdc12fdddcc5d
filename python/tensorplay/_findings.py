"""What a scan reports: each file's :class:`ScanReport`, the globals its
pickles name (:class:`GlobalFinding`) and why part of it could not be read
(:class:`Problem`). Plain records, below every reader that makes them: the
local scan, the remote one, and a load's refusal naming every global."""
from __future__ import annotations

from . import _core

# Records are named tuples, not dataclasses (`dataclasses` imports `inspect`), made
# by collections.namedtuple, not typing.NamedTuple (`typing` took 3 ms of a 28 ms
# `tensorplay scan FILE` process, which hubs start once per upload). Type checkers
# read the same fields, typed, from the first branch.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, NamedTuple

    from ._pointers import Pointer
    from ._remote import RemoteRead

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

    @classmethod
    def of(cls, found: _core.ScanFinding) -> GlobalFinding:
        """The finding the core's scan reported."""
        # tuple.__new__, not the generated __new__: a report can hold thousands.
        return tuple.__new__(cls, (found.name, found.dangerous, found.location, found.offset, found.module,
                                   found.wrappers))

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


def io_problem(e: OSError, location: str = "") -> Problem:
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


STDIN = "-"
"""The path that names standard input (``tensorplay scan -``), read as a stream."""
