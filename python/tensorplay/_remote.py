"""Scanning a file where it lives (``http://``, ``https://``, ``hf://``, and
``s3://`` and the other fsspec URLs: see :mod:`tensorplay._objects`), by ranges.

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
:mod:`tensorplay._http` and :mod:`tensorplay._objects`) makes the file
UNREADABLE, never CLEAN.
"""
from __future__ import annotations

import os
import re
import threading
import urllib.parse
from collections import namedtuple
from typing import Protocol

from . import _core, _http, _limits, _objects

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Sequence
    from typing import Any

    from ._findings import ScanReport

# Waves are reads that follow from the last one's bytes: a checkpoint takes
# three; more is a file built to cost round trips, read whole instead.
MAX_WAVES = 8


# The schemes _http reads; every other URL's is an fsspec file system's (_objects).
HTTP_SCHEMES = ("http://", "https://", "hf://")

HUB = "https://huggingface.co"
# Where the Hub's resolve/ redirects a large file (its CDN and Xet bridge):
# followed from the default endpoint, without the token.
HUB_STORAGE = (".hf.co", ".huggingface.co")
_PR_REVISION = re.compile(r"(refs/pr/\d+)(?:/(.*))?\Z")


class Reader(Protocol):
    """Where a remote file's bytes come from: ``open`` names the object and
    gives its last ``tail`` and first ``head`` bytes in one round trip; ``read``
    gives ranges of that same object, at once, each checked (the object changed
    meanwhile: RemoteError). :class:`tensorplay._http.Client` reads http(s) and
    hf:// URLs, :class:`tensorplay._objects.Store` those of fsspec file systems."""

    def open(self, url: str, tail: int, head: int, also_allowed: Iterable[str] = (),
             ) -> tuple[_http.Identity, list[tuple[int, bytes]]]: ...

    def read(self, identity: _http.Identity, ranges: Sequence[tuple[int, int]]) -> list[bytes]: ...


class Readers:
    """The readers a scan session shares across its files: its http ``client``,
    and the object store of each other scheme (one file system per session):
    those of ``stores`` (by scheme, ``"s3"``: a file system made with options
    of its own), the others made on first use as the environment says."""

    def __init__(self, client: _http.Client, stores: dict[str, _objects.Store] | None = None):
        self.client = client
        self._stores = dict(stores or {})
        self._lock = threading.Lock()

    def reader_for(self, url: str) -> tuple[Reader, str, tuple[str, ...]]:
        """The reader of ``url``, the URL it reads, and the other hosts a
        redirect may lead to."""
        if url[:8].lower().startswith(HTTP_SCHEMES):
            return self.client, *resolve(url, self.client)
        return self.store(url), url, ()

    def store(self, url: str) -> _objects.Store:
        """The object store of ``url``'s scheme (``s3``...): its reader, and
        the lister of its folders (:meth:`tensorplay._objects.Store.list`)."""
        scheme = url.partition("://")[0].lower()
        with self._lock:
            store = self._stores.get(scheme)
            if store is None:
                store = self._stores[scheme] = _objects.Store.for_url(url)
            return store


def resolve(url: str, client: _http.Client) -> tuple[str, tuple[str, ...]]:
    """The ``http(s)`` URL a remote file's URL names, and the other hosts its
    redirects may lead to. An ``hf://`` URL of a file (see :func:`hub_repo`) is
    the Hub's ``resolve/`` URL at its revision, at ``HF_ENDPOINT``, with
    ``HF_TOKEN`` sent to that host alone."""
    if not url.startswith("hf://"):
        return url, ()
    repo = hub_repo(url)
    if repo is None or not repo.path:
        raise _http.RemoteError(f"{url}: an hf:// URL names a file: hf://[datasets/]ORG/REPO[@REVISION]/PATH")
    endpoint = hub_endpoint(client)
    prefix = "" if repo.kind == "models" else f"{repo.kind}/"
    resolved = (f"{endpoint}/{prefix}{repo.name}/resolve/{urllib.parse.quote(repo.revision, safe='')}/"
                f"{urllib.parse.quote(repo.path)}")
    return resolved, HUB_STORAGE if endpoint == HUB else ()


HubRepo = namedtuple("HubRepo", "kind name revision path")
HubRepo.__doc__ = """What an ``hf://`` URL names: the repository's ``kind`` (``models``,
``datasets``, ``spaces``), its ``name`` (``ORG/REPO``), the ``revision`` (``main``
by default) and the ``path`` in it (empty for the repository itself)."""


def hub_repo(url: str) -> HubRepo | None:
    """``hf://[datasets/|spaces/|models/]ORG/REPO[@REVISION][/PATH]`` parsed (a
    revision with slashes URL-encoded, or ``refs/pr/N``), or None when it names
    no repository."""
    rest, kind = url[len("hf://"):], "models"
    for prefix in ("datasets/", "spaces/", "models/"):
        if rest.startswith(prefix):
            kind, rest = prefix[:-1], rest[len(prefix):]
            break
    org, _, rest = rest.partition("/")
    repo, _, path = rest.partition("/")
    repo, at, revision = repo.partition("@")
    if at and revision == "refs" and (pr := _PR_REVISION.match("refs/" + path)):
        revision, path = pr[1], pr[2] or ""
    if not (org and repo) or (at and not revision):
        return None
    return HubRepo(kind, f"{org}/{repo}", urllib.parse.unquote(revision) if at else "main", path)


def hub_endpoint(client: _http.Client) -> str:
    """The Hub's address (``HF_ENDPOINT``), its token (``HF_TOKEN``) given to
    ``client`` for that host alone."""
    endpoint = os.environ.get("HF_ENDPOINT", HUB).rstrip("/")
    token = os.environ.get("HF_TOKEN") or os.environ.get("HUGGING_FACE_HUB_TOKEN")
    host = urllib.parse.urlsplit(endpoint).hostname or ""
    if token:
        client.credentials.setdefault(host.lower(), {"Authorization": f"Bearer {token}"})
    return endpoint


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


def scan_url(url: str, readers: Readers, *, allow: list[str], full: bool = False,
             max_file_size: int | None = None, list_globals: bool = False) -> ScanReport:
    """The report on the file at ``url``; UNREADABLE (see :func:`unreadable`)
    when it could not be read as asked."""
    read = RemoteRead(None)
    try:
        return _scan(url, readers, read, allow, full, max_file_size, list_globals)
    except _http.RemoteError as e:
        return unreadable(url, e, not full, read)


def unreadable(url: str, error: _http.RemoteError, pickles_only: bool, read: RemoteRead | None = None,
               reached_from: Any = None) -> ScanReport:
    """The report on a file that could not be read as asked: a ``network``
    problem, or, for an object the server does not have, the ``io`` problem of
    a missing local file."""
    from ._findings import Problem, ScanReport

    kind = "io" if isinstance(error, _http.NotFound) else "network"
    problem = Problem(kind, "", f"FileNotFoundError: {error}" if kind == "io" else str(error))
    return ScanReport(url, "unknown", "unreadable", problems=(problem,), pickles_only=pickles_only, remote=read,
                      reached_from=reached_from)


def unsafe_globals(url: str, allow: list[str], max_file_size: int | None = None) -> list[str]:
    """``get_unsafe_globals_in_checkpoint`` of the file at ``url``, answered as
    for a local file (``_core.unsafe_globals_waves``, or ``_core.unsafe_globals``
    of the whole file where ranges cannot settle it); a network failure raises
    its RemoteError."""
    limits = _limits.merged(None)
    name = name_of(url)
    client = _http.Client()
    try:
        answer, data = _waves(url, Readers(client), RemoteRead(None), max_file_size,
                              lambda size, held: _core.unsafe_globals_waves(size, held, name, allow, limits))
    finally:
        client.close()
    return answer if data is None else _core.unsafe_globals(data, allow, limits, name)


def scan_spans_url(url: str, spans: list[tuple[int, int, str, list[str]]], readers: Readers, *,
                   allow: list[str], full: bool = False, max_file_size: int | None = None,
                   list_globals: bool = False) -> ScanReport:
    """The report on ``spans`` of the file at ``url``, each read as a file of its
    own (a DCP item), as ``_core.scan_spans`` reads them locally: by ranges."""
    from ._scan_local import report_of

    read = RemoteRead(None)
    limits = _limits.merged(None)
    try:
        answer, data = _waves(url, readers, read, max_file_size,
                              lambda size, held: _core.scan_spans_waves(size, held, spans, allow, limits, not full,
                                                                        list_globals))
    except _http.RemoteError as e:
        return unreadable(url, e, not full, read)
    if data is None:
        return report_of(url, lambda t: t, (answer,), not full)._replace(remote=read)
    return report_of(url, _core.scan_spans, (data, spans, allow, limits, not full, list_globals),
                   not full)._replace(remote=read)


def _scan(url: str, readers: Readers, read: RemoteRead, allow: list[str], full: bool,
          max_file_size: int | None, list_globals: bool) -> ScanReport:
    from ._scan_local import report_of

    limits = _limits.merged(None)
    name = name_of(url)

    def run(size: int, held: list[tuple[int, bytes]]) -> tuple[str, Any]:
        if full:
            return "whole", None
        return _core.scan_waves(size, held, name, allow, limits, list_globals)

    answer, data = _waves(url, readers, read, max_file_size, run)
    if data is None:
        return report_of(url, lambda t: t, (answer,), True)._replace(remote=read)
    report = report_of(url, _core.scan, (data, allow, limits, not full, list_globals, False, name), not full)
    return report._replace(remote=read)


def _waves(url: str, readers: Readers, read: RemoteRead, max_file_size: int | None,
           run: Callable[[int, list[tuple[int, bytes]]], tuple[str, Any]]) -> tuple[Any, bytes | None]:
    """``run``'s answer once it read only held bytes, fetching each wave of
    ranges it asks for; or the whole file, when it wants that (or takes more
    than ``MAX_WAVES``): ``(answer, None)`` or ``(None, data)``."""
    reader, target, also_allowed = readers.reader_for(url)
    identity, first = reader.open(target, tail=_core.FIRST_TAIL, head=_core.FIRST_BLOCK, also_allowed=also_allowed)
    read.identity = identity
    read.took([body for _, body in first])
    held = list(first)
    while True:
        kind, value = run(identity.size, held)
        if kind == "whole" or (kind == "fetch" and read.round_trips >= MAX_WAVES):
            return None, _whole(reader, identity, first, read, max_file_size)
        if kind != "fetch":
            return value, None
        if max_file_size is not None and read.bytes_read + sum(n for _, n in value) > max_file_size:
            raise _http.RemoteError(f"{url}: its reading by ranges would take over the {max_file_size}-byte "
                                    "limit on what a scan downloads")
        # A range of no bytes (the first block of an empty file) is known
        # without asking: no server or store has a way to send it.
        wanted = [(offset, length) for offset, length in value if length > 0]
        fetched = reader.read(identity, wanted) if wanted else []
        if wanted:
            read.took(fetched)
        bodies = iter(fetched)
        held += [(offset, next(bodies) if length > 0 else b"") for offset, length in value]


def _whole(reader: Reader, identity: _http.Identity, first: list[tuple[int, bytes]], read: RemoteRead,
           max_file_size: int | None) -> bytes:
    """The whole object, by one range read (checked as every other), unless it
    is over ``max_file_size``: a scan never downloads more than it was allowed."""
    read.whole_file = True
    held = [body for offset, body in first if offset == 0 and len(body) == identity.size]
    if held or identity.size == 0:
        return held[0] if held else b""
    if max_file_size is not None and identity.size > max_file_size:
        raise _http.RemoteError(f"{identity.url}: ranges cannot settle this file, and its {identity.size} bytes "
                                f"are over the {max_file_size}-byte limit on what a scan downloads")
    (data,) = reader.read(identity, [(0, identity.size)])
    read.took([data])
    return data
