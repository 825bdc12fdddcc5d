"""Scanning a listing of remote units on a Ray cluster: ``ray.data`` over the
listing, the scan in each worker, the reports written as JSON lines or Parquet.

A listing's rows are units, never file contents: a file's URL, or (as
:func:`tensorplay.scanner.scan_paths` takes them) a folder or a repository at a
revision, scanned as a whole with the pointers its files give followed. Each
worker (a :class:`ScanUnits`, the ``map_batches`` callable class) holds one
session for its life, a :class:`tensorplay._http.Client` and one file system
per object store's scheme, so its connections stay alive from one batch to
the next, and scans the units of a batch ``jobs`` at once; every report
becomes one flat row (:data:`SCHEMA`). A unit whose scan raises is one
``unreadable`` row saying why: a job over millions of units neither stops nor
loses one.

Ray is an optional extra: ``pip install 'tensorplay-serialization[ray]'``.
"""
from __future__ import annotations

import json
import os
import warnings
from collections import Counter
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor

try:
    import pyarrow as pa
    import ray
    import ray.data
except ImportError as e:
    raise ImportError("tensorplay.scanner.ray needs Ray Data: pip install 'tensorplay-serialization[ray]' "
                      f"({e})") from e

from .. import _http, _remote
from . import Problem, ScanReport, Selection, scan_paths

__all__ = ["FORMATS", "SCHEMA", "ScanUnits", "scan_listing", "to_row"]

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

# One row per report, the same columns and types in every batch (nulls where a
# report has nothing to say), so that Parquet files written by different
# workers make one table. Nested parts are JSON text: their shapes vary.
SCHEMA = pa.schema([
    ("unit", pa.string()),            # the listing's row this report came from
    ("path", pa.string()),            # the file judged: the unit itself, or a file in it
    ("verdict", pa.string()),         # clean, unsafe, unreadable or skipped
    ("format", pa.string()),
    ("skipped_because", pa.string()),
    ("findings", pa.string()),        # JSON: the globals outside the allowlist, as ScanReport.to_json's "globals"
    ("allowlisted", pa.string()),     # JSON, with list_globals: the globals inside it; else null
    ("problems", pa.string()),        # JSON: [{"kind", "location", "message"}]
    ("reached_from", pa.string()),    # JSON: {"source", "item", "reader"} for what a pointer reached; else null
    ("object", pa.string()),          # JSON: the object read (url, size, etag, linked_etag, commit, version_id...)
    ("bytes_read", pa.int64()),
    ("round_trips", pa.int64()),
    ("whole_file", pa.bool_()),
])
"""The columns and types of every row ``scan_listing`` writes."""

FORMATS = ("jsonl", "parquet")
"""The output formats of ``scan_listing``."""


class ScanUnits:
    """The scan as a ``Dataset.map_batches`` callable class: Ray makes one per
    worker, with the scan's options, and calls it on batches with a ``unit``
    column (a URL each, or anything :func:`~tensorplay.scanner.scan_paths`
    takes; a local path is read on the worker's own file system, pickles only
    unless ``full``, as a URL is). It returns a ``pyarrow.Table`` of
    :data:`SCHEMA`, one row per report.

    ``allow``, ``full`` and ``list_globals`` are :func:`~tensorplay.scanner.scan_paths`'s;
    ``max_file_size`` caps what a file ranges cannot settle may download;
    ``jobs`` is how many units a worker scans at once (a folder's files too),
    and how many requests of a wave its client sends at once; ``timeout``
    (seconds) and ``redirect_hosts`` (the other hosts a redirect may lead to:
    ``"*"``, ``"cdn.example.com"``, ``".example.com"``) go to its
    :class:`~tensorplay._http.Client`. Endpoints, credentials and certificate
    authorities come from the worker's environment (``HF_ENDPOINT``,
    ``HF_TOKEN``, ``AWS_ENDPOINT_URL`` and the other ``AWS_*`` variables,
    ``SSL_CERT_FILE``: pass them in Ray's ``runtime_env``)."""

    def __init__(self, *, allow: Iterable[str] = (), full: bool = False, max_file_size: int | None = None,
                 list_globals: bool = False, jobs: int = 16, timeout: float = 30.0,
                 redirect_hosts: Iterable[str] = ()):
        self.allow = list(allow)
        self.full = full
        self.selection = Selection(max_file_size=max_file_size)
        self.list_globals = list_globals
        self.jobs = jobs
        self.client = _http.Client(timeout=timeout, allowed_hosts=redirect_hosts, concurrency=jobs)
        # Given to scan_paths as the session itself, not the client alone: else each
        # call (each unit) would make its own s3:// file system, connections and all.
        self.readers = _remote.Readers(self.client)
        self.units = ThreadPoolExecutor(jobs, thread_name_prefix="tensorplay-unit")

    def __call__(self, batch: Any) -> pa.Table:
        units = batch["unit"]
        units = units.to_pylist() if hasattr(units, "to_pylist") else list(units)
        rows: list[dict[str, Any]] = []
        for unit, reports in zip(units, self.units.map(self._scan_unit, units)):
            rows += (to_row(unit, report) for report in reports)
        return pa.Table.from_pylist(rows, schema=SCHEMA)

    def _scan_unit(self, unit: Any) -> list[ScanReport]:
        try:
            # One unit per call: a folder's reports must be told apart from its neighbours'.
            reports = scan_paths([unit], allow=self.allow, full=self.full, pickles_only=not self.full,
                                 selection=self.selection, list_globals=self.list_globals, client=self.readers,
                                 jobs=self.jobs)
        except Exception as e:
            return [_failed(unit, e)]
        if not reports:
            return [_failed(unit, None)]
        return reports

    def __del__(self) -> None:
        units, client = getattr(self, "units", None), getattr(self, "client", None)
        if units is not None:
            units.shutdown(wait=False)
        if client is not None:
            client.close()


def _failed(unit: Any, error: Exception | None) -> ScanReport:
    """The report on a unit whose scan raised (or found nothing to report), so
    that every unit of the listing has a row: unreadable, with the reason."""
    if error is None:
        problem = Problem("nothing_to_scan", "", "the unit holds no file to scan")
    else:
        # As a scan reports the failures it expects: a network failure is one.
        kind = ("network" if isinstance(error, _http.RemoteError) else "io" if isinstance(error, OSError)
                else "scan_failed")
        problem = Problem(kind, "", f"{type(error).__name__}: {error}")
    return ScanReport(str(unit), "unknown", "unreadable", problems=(problem,))


def to_row(unit: str, report: ScanReport) -> dict[str, Any]:
    """One report as a row of :data:`SCHEMA`."""
    fields = report.to_json()
    remote = fields["remote"] or {}

    def text(value: Any) -> str | None:
        return None if value is None else json.dumps(value, sort_keys=True)

    return {
        "unit": str(unit), "path": fields["path"], "verdict": fields["verdict"], "format": fields["format"],
        "skipped_because": fields["skipped_because"], "findings": text(fields["globals"]),
        "allowlisted": text(fields["allowlisted_globals"]), "problems": text(fields["problems"]),
        "reached_from": text(fields["reached_from"]), "object": text(remote.get("object")),
        "bytes_read": remote.get("bytes_read"), "round_trips": remote.get("round_trips"),
        "whole_file": remote.get("whole_file"),
    }


def scan_listing(units: Iterable[str] | ray.data.Dataset, output: str | os.PathLike[str], *,
                 format: str = "parquet", concurrency: int | None = None, batch_size: int = 64, num_cpus: float = 0.5,
                 **scan_options: Any) -> dict[str, int]:
    """Scan every unit of a listing on the Ray cluster and write one row per
    report (:data:`SCHEMA`) to the folder ``output``, as JSON lines
    (``format="jsonl"``, files ``*.json``) or Parquet; a folder that already
    exists is an error, never added to.

    ``units`` is an iterable of URLs, or a ``ray.data.Dataset`` with a ``unit``
    column (a listing too long for the driver's memory, read by Ray:
    ``ray.data.read_text("units.txt").rename_columns({"text": "unit"})``).
    ``concurrency`` workers (:class:`ScanUnits`; by default Ray's
    autoscaling pool, as many as the cluster's CPUs hold) take batches of
    ``batch_size`` units; ``scan_options`` are :class:`ScanUnits`'s. Each
    worker reserves ``num_cpus``: half a CPU, as a scan waits on the network
    more than it computes. A fixed pool that reserves every CPU of a cluster
    that cannot grow leaves none to the tasks that read the listing and
    write the rows, and Ray then waits forever: that is warned of.

    Returns the number of rows by verdict, counted from what was written
    (only its ``verdict`` column is read back, by the cluster)."""
    if format not in FORMATS:
        raise ValueError(f"format must be one of {FORMATS}, not {format!r}")
    output = os.fspath(output)
    if concurrency is not None and ray.is_initialized():
        cpus = ray.cluster_resources().get("CPU", 0)
        if concurrency * num_cpus >= cpus:
            warnings.warn(f"{concurrency} workers of {num_cpus} CPU each reserve all {cpus:g} CPUs of the cluster: "
                          "the tasks that read the listing and write the rows wait for one, forever unless the "
                          "cluster grows (give fewer workers, or a smaller num_cpus)", RuntimeWarning, stacklevel=2)
    listing = units if isinstance(units, ray.data.Dataset) else ray.data.from_items([{"unit": u} for u in units])
    pool = (ray.data.ActorPoolStrategy(min_size=1, max_size=None) if concurrency is None
            else ray.data.ActorPoolStrategy(size=concurrency))
    rows = listing.map_batches(ScanUnits, fn_constructor_kwargs=scan_options, batch_size=batch_size,
                               batch_format="pyarrow", compute=pool, num_cpus=num_cpus)
    if format == "jsonl":
        rows.write_json(output, mode="error")
        written = ray.data.read_json(output, lines=True)
    else:
        rows.write_parquet(output, mode="error")
        written = ray.data.read_parquet(output)
    counts: Counter[str] = Counter()
    # Each block tallied where it is read (Parquet for that column alone): only a
    # few rows per block reach the driver, and no shuffle is paid for (a groupby's
    # took longer than scanning a thousand files).
    tallies = written.select_columns(["verdict"]).map_batches(_tally, batch_format="pyarrow", batch_size=None)
    for tally in tallies.iter_rows():
        counts[tally["verdict"]] += tally["count"]
    return dict(counts)


def _tally(batch: pa.Table) -> pa.Table:
    counts = Counter(batch.column("verdict").to_pylist())
    return pa.table({"verdict": pa.array(list(counts), pa.string()),
                     "count": pa.array(list(counts.values()), pa.int64())})
