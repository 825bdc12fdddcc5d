"""Scanning a file where it lives (``http://``, ``https://``), by ranges.

A remote scan is a pickles-only scan: the core says which byte ranges it reads
(``_core.scan_waves``), they are fetched together, one round trip per wave, and
the core runs again on what is held until it has read nothing it lacked; its
report is then the local pickles-only scan's of the same bytes. The first wave
is the end records and the first block (their answer tells the size); a torch
checkpoint then takes its directory, then its pickles: three round trips, and
no byte of a tensor. A file ranges cannot settle (no zip, more entries than a
reading by ranges takes) is fetched whole, within ``max_file_size``, and its
report says so (``remote.whole_file``); ``full=True`` fetches it whole for a
full scan, as a local scan reads it. Whatever cannot be read as asked (see
:mod:`tensorplay._http`) makes the file UNREADABLE, never CLEAN.
"""
from __future__ import annotations

import urllib.parse

from . import _core, _http, _limits

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from .scanner import ScanReport

# Waves are reads that follow from the last one's bytes: a checkpoint takes
# three; more is a file built to cost round trips, read whole instead.
MAX_WAVES = 8


def name_of(url: str) -> str | None:
    """The last part of the URL's path, as a file's name: what a name allows a
    file (a DCP ``.metadata``), and what a name says (a model), it allows and
    says here too."""
    path = urllib.parse.urlsplit(url).path
    name = urllib.parse.unquote(path.rsplit("/", 1)[-1])
    return name or None


class RemoteRead:
    """What a remote scan read: the object (``identity``: URL, size, ETag and the
    other validators), the round trips, requests and bytes it took, and whether
    it fetched the whole object."""

    __slots__ = ("identity", "round_trips", "requests", "bytes_read", "whole_file")

    def __init__(self, identity: _http.Identity | None):
        self.identity = identity
        self.round_trips = 0
        self.requests = 0
        self.bytes_read = 0
        self.whole_file = False

    def took(self, bodies: list[bytes]) -> None:
        self.round_trips += 1
        self.requests += len(bodies)
        self.bytes_read += sum(map(len, bodies))

    def to_json(self) -> dict[str, Any]:
        identity = self.identity.to_json() if self.identity is not None else None
        return {"object": identity, "round_trips": self.round_trips, "requests": self.requests,
                "bytes_read": self.bytes_read, "whole_file": self.whole_file}


def scan_url(url: str, client: _http.Client, *, allow: list[str], full: bool = False,
             max_file_size: int | None = None, list_globals: bool = False) -> ScanReport:
    from .scanner import Problem, ScanReport, _report

    limits = _limits.merged(None)
    name = name_of(url)
    read = RemoteRead(None)
    try:
        identity, first = client.open(url, tail=_core.FIRST_TAIL, head=_core.FIRST_BLOCK)
        read.identity = identity
        read.took(list(first.values()))
        held = list(first.items())
        scanning = None if full else _core.scan_waves
        while scanning is not None:
            kind, value = scanning(identity.size, held, name, allow, limits, list_globals)
            if kind == "report":
                report = _report(url, lambda t: t, (value,), True)
                return report._replace(remote=read)
            if kind == "whole" or read.round_trips >= MAX_WAVES:
                break
            bodies = client.read(identity, value)
            read.took(bodies)
            held += [(offset, body) for (offset, _), body in zip(value, bodies)]
        data = _whole(client, identity, first, read, max_file_size)
    except _http.RemoteError as e:
        return ScanReport(url, "unknown", "unreadable", problems=(Problem("network", "", str(e)),),
                          pickles_only=not full, remote=read)
    report = _report(url, _core.scan, (data, allow, limits, not full, list_globals, False, name), not full)
    return report._replace(remote=read)


def _whole(client: _http.Client, identity: _http.Identity, first: dict[int, bytes], read: RemoteRead,
           max_file_size: int | None) -> bytes:
    """The whole object, by one range read (checked as every other), unless it
    is over ``max_file_size``: a scan never downloads more than it was allowed."""
    read.whole_file = True
    if identity.size in (len(first.get(0, b"")), 0):
        return first.get(0, b"")
    if max_file_size is not None and identity.size > max_file_size:
        raise _http.RemoteError(f"{identity.url}: ranges cannot settle this file, and its {identity.size} bytes "
                                f"are over the {max_file_size}-byte limit on what a scan downloads")
    (data,) = client.read(identity, [(0, identity.size)])
    read.took([data])
    return data
