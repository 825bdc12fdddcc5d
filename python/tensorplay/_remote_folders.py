"""A remote folder, scanned as a local folder is: a URL prefix (``https://host/models/gpt2/``,
``s3://bucket/run-7/``) or a Hub repository at a revision (``hf://org/repo``,
``hf://org/repo@v1.0``, ``hf://datasets/org/repo@main/sub/``) is what a loader
reads, not one file of it. It is listed, every file in it is scanned by ranges as
:mod:`tensorplay._remote` scans one, and the pointers its files give loaders (a
DCP ``.metadata``'s items, an index's shards, a ``meta.json``'s levels) are
followed as :mod:`tensorplay._pointers` follows them locally: the pointing file is
fetched whole (it is small, and its reader reads it whole), read in a private
folder that mirrors the listing, and what it points at is read where it lives,
by ranges (a DCP item's span as a file of its own: ``_core.scan_spans_waves``).

A repository at a revision is read at one commit: the revision is resolved to its
commit first (the Hub's ``revision`` API), and every file is read at that commit,
so a branch that moves during the scan cannot mix two commits' files.
"""
from __future__ import annotations

import json
import os
import re
import tempfile
import urllib.parse
from collections import namedtuple

from . import _core, _http, _limits, _pointers, _remote

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

    from ._findings import ScanReport
    from ._scan_policy import Selection

Entry = namedtuple("Entry", "name url size")
Entry.__doc__ = """One file of a remote folder: its ``name`` relative to the folder
(``/``-separated), the ``url`` it is read at, and its ``size`` when the listing gives it."""

# What a listing of a folder may hold before it is refused: a bound on the
# memory and time one unit takes.
MAX_LISTED = 1_000_000
_LINK_NEXT = re.compile(r'<([^>]+)>;\s*rel="next"')
_HREF = re.compile(r'href="([^"?#]+)"')
# Byte-0-only readings (TensorDict leaves, git's data) fetch a growing head:
# a leading pickle seldom runs past the first, a leaf's raw bytes never parse past it.
_FIRST_HEAD = 64 << 10


def is_folder(url: str) -> bool:
    """Whether ``url`` names a folder: it ends with ``/``, or it names a Hub
    repository (``hf://[datasets/|spaces/]ORG/REPO[@REVISION]``) without a file."""
    if url.endswith("/"):
        return True
    if not url.startswith("hf://"):
        return False
    repo = _remote.hub_repo(url)
    return repo is not None and not repo.path


def listing(url: str, readers: _remote.Readers) -> list[Entry]:
    """Every file under the folder ``url`` names, by name; RemoteError when it
    cannot be listed to its end."""
    if url.startswith("hf://"):
        entries = _hub_listing(url, readers.client)
    elif url[:8].lower().startswith(("http://", "https://")):
        entries = _index_listing(url, readers.client)
    else:
        entries = [Entry(*entry) for entry in readers.store(url).list(url)]
        _bounded(entries, url)
    return sorted(entries, key=lambda e: e.name)


def _get_json(url: str, client: _http.Client, what: str) -> tuple[Any, Any]:
    """The JSON document at ``url`` and the answer's headers."""
    final, status, headers, body, _ = client.get(url, {})
    if status != 200:
        raise _http.RemoteError(f"{url}: HTTP {status} for {what}")
    try:
        return json.loads(body), headers
    except (ValueError, RecursionError) as e:
        raise _http.RemoteError(f"{final}: {what} is no JSON document: {e}") from None


def _hub_listing(url: str, client: _http.Client) -> list[Entry]:
    """The files of a Hub repository (or of a folder in it) at the commit its
    revision names, each as the ``hf://`` URL of that file at that commit."""
    repo = _remote.hub_repo(url)
    if repo is None:
        raise _http.RemoteError(f"{url}: an hf:// folder names a repository: hf://[datasets/]ORG/REPO[@REVISION]")
    kind, name, revision, folder = repo
    api = f"{_remote.hub_endpoint(client)}/api/{kind}/{name}"
    document, _ = _get_json(f"{api}/revision/{urllib.parse.quote(revision, safe='')}", client, "the revision")
    commit = document.get("sha") if isinstance(document, dict) else None
    if not isinstance(commit, str) or not re.fullmatch(r"[0-9a-f]{40}", commit):
        raise _http.RemoteError(f"{url}: the Hub names no commit for revision {revision!r}")
    folder = folder.strip("/")
    page: str | None = (f"{api}/tree/{commit}{'/' + urllib.parse.quote(folder) if folder else ''}"
                        "?recursive=true&expand=false")
    prefix = "" if kind == "models" else f"{kind}/"
    entries = []
    while page is not None:
        items, headers = _get_json(page, client, "the repository's listing")
        if not isinstance(items, list):
            raise _http.RemoteError(f"{page}: the repository's listing is no list")
        for item in items:
            if not isinstance(item, dict) or not isinstance(item.get("path"), str):
                raise _http.RemoteError(f"{page}: an entry of the listing names no path: {item!r}"[:300])
            if item.get("type") != "file":
                continue
            path = item["path"]
            relative = path[len(folder) + 1:] if folder else path
            size = item.get("size") if isinstance(item.get("size"), int) else None
            entries.append(Entry(relative, f"hf://{prefix}{name}@{commit}/{path}", size))
        _bounded(entries, url)
        link = _LINK_NEXT.search(headers.get("Link") or "")
        page = urllib.parse.urljoin(page, link[1]) if link else None
    return entries


def _index_listing(url: str, client: _http.Client) -> list[Entry]:
    """The files under an http(s) folder, from the index its server gives for it
    (nginx's ``autoindex_format json``, or links in an HTML index), folder by folder."""
    entries: list[Entry] = []
    folders = [("", url)]
    while folders:
        relative, folder = folders.pop()
        final, status, headers, body, _ = client.get(folder, {})
        if status != 200:
            raise _http.RemoteError(f"{folder}: HTTP {status} for the folder's index")
        names = set()
        for name, is_dir, size in _index_entries(final, body):
            if not name or name in (".", "..") or "/" in name:
                continue
            names.add(name)
            child = urllib.parse.urljoin(final, urllib.parse.quote(name) + ("/" if is_dir else ""))
            if is_dir:
                folders.append((f"{relative}{name}/", child))
            else:
                entries.append(Entry(relative + name, child, size))
        # Indexes hide names that start with a dot (nginx's, Apache's by
        # default); a DCP loader opens its .metadata by that name all the same.
        for hidden in HIDDEN_POINTERS:
            if hidden not in names and (size := _probe(urllib.parse.urljoin(final, hidden), client)) is not None:
                entries.append(Entry(relative + hidden, urllib.parse.urljoin(final, hidden), size))
        _bounded(entries, url)
    return entries


# Files a loader opens by a name a server's index hides.
HIDDEN_POINTERS = (".metadata",)


def _probe(url: str, client: _http.Client) -> int | None:
    """The size of the object at ``url``, or None when the server has none."""
    _, status, headers, _, _ = client.get(url, {"Range": "bytes=0-0"})
    if status in (404, 410):
        return None
    total = (headers.get("Content-Range") or "").rpartition("/")[2]
    if status in (206, 416) and total.isdigit():
        return int(total)
    raise _http.RemoteError(f"{url}: HTTP {status} when asked whether it exists")


def _index_entries(url: str, body: bytes) -> list[tuple[str, bool, int | None]]:
    """``(name, is a folder, size)`` of each entry of a server's index page."""
    try:
        items = json.loads(body)
    except (ValueError, RecursionError):
        items = None
    if isinstance(items, list):
        return [(item.get("name", ""), item.get("type") == "directory",
                 item["size"] if isinstance(item.get("size"), int) else None)
                for item in items if isinstance(item, dict) and isinstance(item.get("name"), str)]
    found = []
    for href in _HREF.findall(body.decode("utf-8", "replace")):
        if href.startswith(("/", "../")) or "://" in href:
            continue
        name = urllib.parse.unquote(href)
        found.append((name.rstrip("/"), name.endswith("/"), None))
    return found


def _bounded(entries: list[Entry], url: str) -> None:
    if len(entries) > MAX_LISTED:
        raise _http.RemoteError(f"{url}: more than {MAX_LISTED} files: scan its folders one by one")


# --- the scan --------------------------------------------------------------------


def scan_folder(url: str, readers: _remote.Readers, *, allow: list[str], full: bool, max_file_size: int | None,
                list_globals: bool, selection: Selection) -> list[ScanReport]:
    """Reports on every file of the folder at ``url`` and on what their pointers
    reach, as :func:`tensorplay.scanner.scan_paths` reports on a local folder;
    one UNREADABLE report on ``url`` when it cannot be listed."""
    from ._findings import Problem, ScanReport
    from ._scan_local import GIT_DATA, TENSORDICT_LEAF, check_shard_index, is_leaf, scan_reading

    try:
        entries = listing(url, readers)
    except _http.RemoteError as e:
        return [ScanReport(url, "unknown", "unreadable", problems=(Problem("network", "", str(e)),),
                           pickles_only=not full)]
    by_name = {e.name: e for e in entries}
    siblings: dict[str, set[str]] = {}
    for e in entries:
        folder, _, base = e.name.rpartition("/")
        siblings.setdefault(folder, set()).add(base)

    def byte_zero_label(e: Entry) -> str | None:
        folder, _, base = e.name.rpartition("/")
        return GIT_DATA if ".git" in e.name.split("/")[:-1] else TENSORDICT_LEAF if is_leaf(
            base, siblings[folder]) else None

    wanted = [e for e in entries if selection.wants(e.name)]
    # What the walk reads whole, by content: a pointer to it needs no reading of its own.
    read_whole = {e.name for e in wanted if byte_zero_label(e) is None}
    pointing = [e for e in wanted if _pointers.kind_of(e.name) is not None]
    with tempfile.TemporaryDirectory(prefix="tensorplay-folder-") as mirror:
        if pointing:
            # The listing as empty files: a pointer's reader asks whether the
            # folder holds a name; the pointing files are then filled in.
            for e in entries:
                local = os.path.join(mirror, *e.name.split("/"))
                os.makedirs(os.path.dirname(local), exist_ok=True)
                open(local, "wb").close()
        followed = {e.name: _follow(e, by_name, mirror, readers) for e in pointing}
        tiled = _tiled([f for _, _, found in followed.values() for f in found], by_name)

        def scan_entry(e: Entry) -> ScanReport:
            label = byte_zero_label(e)
            if label is not None:
                return _byte_zero(e.url, label, readers, allow, max_file_size, list_globals)
            if e.name in tiled:
                return _remote.scan_spans_url(e.url, tiled[e.name], readers, allow=allow, full=full,
                                              max_file_size=max_file_size, list_globals=list_globals)
            return _remote.scan_url(e.url, readers, allow=allow, full=full, max_file_size=max_file_size,
                                    list_globals=list_globals)

        reports = dict(zip((e.name for e in wanted), _map(readers.client.concurrency, scan_entry, wanted)))

        def scan_followed(f: Followed) -> ScanReport | None:
            reading, pointer = f.reading, f.pointer
            if reading.outside is not None or reading.problem is not None:
                return scan_reading(reading._replace(pointer=pointer), allow, not full, list_globals)._replace(
                    path=f.url)
            if reading.spans is None:
                if f.relative in read_whole:
                    return None
                report = _remote.scan_url(f.url, readers, allow=allow, full=full, max_file_size=max_file_size,
                                          list_globals=list_globals)
            elif f.relative in reports and tiled.get(f.relative) == _sorted_spans(reading.spans):
                report = reports[f.relative]  # the file's own reading: these same spans
            else:
                report = _remote.scan_spans_url(f.url, reading.spans, readers, allow=allow, full=full,
                                                max_file_size=max_file_size, list_globals=list_globals)
            return report._replace(reached_from=pointer)

        readings = [report for _, _, found in followed.values() for f in found
                    if (report := scan_followed(f)) is not None]
        for name, (own, unfollowed, _) in followed.items():
            report = reports[name]
            if own is not None and name.endswith(".index.json") and report.verdict != "unreadable":
                report = check_shard_index(report._replace(path=own))._replace(path=report.path)
            if unfollowed and report.verdict in ("clean", "skipped"):
                report = report._replace(verdict="unreadable", problems=(*report.problems, *unfollowed))
            reports[name] = report
    return [reports[e.name] for e in wanted] + readings


Followed = namedtuple("Followed", "reading pointer relative url")
Followed.__doc__ = """A reading a pointer makes a loader do, with the pointer as the
report names it (its source a URL), the target's name in the folder and its URL."""


def _sorted_spans(spans: list[tuple[int, int, str, list[str]]]) -> list[tuple[int, int, str, list[str]]]:
    """Spans by offset, each ``(offset, length)`` once."""
    unique: dict[tuple[int, int], tuple[int, int, str, list[str]]] = {}
    for span in sorted(spans, key=lambda s: (s[0], s[1])):
        unique.setdefault((span[0], span[1]), span)
    return list(unique.values())


def _tiled(followed: list[Followed], by_name: dict[str, Entry]) -> dict[str, list[tuple[int, int, str, list[str]]]]:
    """The files DCP items tile, end to end from byte 0 to the last, none
    transformed (a ``.distcp`` as ``FileSystemWriter`` writes it), with their
    spans: such a file is read as its items, each a file of its own, by ranges,
    not downloaded whole. Its first item holds its byte 0 (what pickle reads),
    its last its end (the zip ``torch.load`` reads); its every byte is in an item."""
    spans: dict[str, list[tuple[int, int, str, list[str]]]] = {}
    for f in followed:
        if f.reading.spans is not None and f.reading.outside is None and f.reading.problem is None:
            spans.setdefault(f.relative, []).extend(f.reading.spans)
    tiled = {}
    for name, found in spans.items():
        entry = by_name.get(name)
        ordered = _sorted_spans(found)
        end = 0
        for offset, length, _, transforms in ordered:
            if offset != end or transforms:
                break
            end += length
        else:
            if entry is not None and entry.size is not None and end == entry.size > 0:
                tiled[name] = ordered
    return tiled


def _map(concurrency: int, scan_one: Callable[[Entry], ScanReport], entries: list[Entry]) -> list[ScanReport]:
    """``scan_one`` of each entry, in order, several at once."""
    if len(entries) <= 1:
        return [scan_one(e) for e in entries]
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=min(concurrency, len(entries))) as pool:
        return list(pool.map(scan_one, entries))


def _byte_zero(url: str, label: str, readers: _remote.Readers, allow: list[str], max_file_size: int | None,
               list_globals: bool) -> ScanReport:
    """A file the walk reads only as a pickle from byte 0, from a head that
    grows until the reading ends inside it (or it is the whole file)."""
    from ._scan_local import report_of

    read = _remote.RemoteRead(None)
    try:
        reader, target, also_allowed = readers.reader_for(url)
        identity, first = reader.open(target, tail=_core.FIRST_TAIL, head=_core.FIRST_BLOCK,
                                      also_allowed=also_allowed)
        read.identity = identity
        read.took([body for _, body in first])
        head = next((body for offset, body in first if offset == 0), b"")
        want = _FIRST_HEAD
        limits = _limits.merged(None)
        while True:
            args = (head, allow, limits, True, list_globals, True, None)
            whole = len(head) >= identity.size
            report = report_of(url, _core.scan, args, True)
            if whole or not report.problems:
                break
            if max_file_size is not None and want > max_file_size:
                raise _http.RemoteError(f"{url}: its leading pickle runs past the {max_file_size}-byte limit "
                                        "on what a scan downloads")
            (more,) = reader.read(identity, [(len(head), min(want, identity.size) - len(head))])
            read.took([more])
            head += more
            want *= 16
    except _http.RemoteError as e:
        return _remote.unreadable(url, e, True, read)
    if report.verdict == "skipped":
        report = report._replace(skipped_because=label)
    return report._replace(remote=read)


def _follow(e: Entry, by_name: dict[str, Entry], mirror: str, readers: _remote.Readers,
            ) -> tuple[str | None, tuple[Any, ...], list[Followed]]:
    """The pointers of the file ``e``: its copy in ``mirror`` (None when it could
    not be fetched), the problems that kept them from being followed, and the
    readings they make loaders do."""
    from ._findings import Problem

    local = os.path.join(mirror, *e.name.split("/"))
    most = _limits.default_limits()["max_pickle_bytes"]
    try:
        data = _fetch_whole(e.url, readers, most)
    except _http.RemoteError as error:
        return None, (Problem("network", "", f"its pointers were not followed: {error}"),), []
    os.makedirs(os.path.dirname(local), exist_ok=True)
    with open(local, "wb") as f:
        f.write(data)
    kind = _pointers.kind_of(local)
    unfollowed: tuple[Any, ...] = ()
    found = []
    for reading in _pointers.follow(local, kind) if kind else ():
        if reading.problem is not None and reading.target == local:
            unfollowed += (Problem(reading.problem[0], reading.pointer.item or "", reading.problem[1]),)
            continue
        relative = os.path.relpath(reading.target, mirror).replace(os.sep, "/")
        target = by_name.get(relative)
        # A name the listing does not hold is still opened by the loader (a
        # server's index hides names starting with a dot): read where it would be.
        url = target.url if target is not None else _url_beside(e.url, e.name, relative)
        found.append(Followed(reading, reading.pointer._replace(source=e.url), relative, url))
    return local, unfollowed, found


def _url_beside(url: str, name: str, relative: str) -> str:
    """The URL of ``relative`` (a name in the folder) from the URL of ``name``."""
    depth = name.count("/")
    base = url.rsplit("/", depth + 1)[0]
    return f"{base}/{relative}"


def _fetch_whole(url: str, readers: _remote.Readers, most: int) -> bytes:
    """The whole file at ``url``, by ranges, when it is at most ``most`` bytes."""
    reader, target, also_allowed = readers.reader_for(url)
    identity, first = reader.open(target, tail=_core.FIRST_TAIL, head=_core.FIRST_BLOCK, also_allowed=also_allowed)
    if identity.size > most:
        raise _http.RemoteError(f"{url}: {identity.size} bytes, over the {most}-byte bound on a file "
                                "whose pointers are read")
    pieces = dict(first)
    if len(pieces.get(0, b"")) == identity.size:
        return pieces[0]
    (data,) = reader.read(identity, [(0, identity.size)])
    return data
