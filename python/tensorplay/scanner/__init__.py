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

import os
from collections.abc import Callable, Iterable

from .. import _core, _paths, _scan_local
from .._findings import STDIN, GlobalFinding, Problem, ScanReport
from .._pointers import Pointer
from .._scan_local import GIT_DATA as GIT_DATA  # a skipped_because, as programs compare it
from .._scan_local import TENSORDICT_LEAF as TENSORDICT_LEAF
from .._scan_local import iter_files
from .._scan_policy import EVERYTHING, FAIL_ON, Policy, Selection, Settings, SettingsError, byte_size

__all__ = ["EVERYTHING", "FAIL_ON", "STDIN", "GlobalFinding", "Pointer", "Policy", "Problem", "ScanReport",
           "Selection", "Settings", "SettingsError", "byte_size", "denylist", "iter_files", "scan", "scan_paths"]

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from .._http import Client
    from .._remote import Readers


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
    return _scan_local.scan_file(f, allow=allow, pickles_only=pickles_only, list_globals=list_globals, config=config)


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
    return _scan_local.scan_local_paths(paths, jobs=jobs, allow=allow, progress=progress, pickles_only=pickles_only,
                                        selection=selection, list_globals=list_globals, passed_over=passed_over,
                                        on_report=on_report)


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
