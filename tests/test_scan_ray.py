"""Scanning a listing on a real Ray cluster (local, two CPUs, usage stats off):
a few hundred units served by nginx, the malicious corpus among them, scanned
by ``tensorplay.scanner.ray.scan_listing``; the rows read back from its JSON
lines and Parquet outputs say what the local scan of the same files says, and
a unit that cannot be read is an unreadable row, never a lost one."""
from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys
import urllib.parse
from collections import Counter

import pyarrow.parquet as pq
import pytest
import ray
import ray.data
from http_servers import Nginx
from tensorplay import scanner
from tensorplay.scanner.ray import SCHEMA, ScanUnits, scan_listing

TESTS = pathlib.Path(__file__).parent
MALICIOUS = sorted(p.relative_to(TESTS).as_posix() for p in (TESTS / "malicious" / "files").rglob("*")
                   if p.is_file() and not p.is_symlink())
# One clean checkpoint under many names: the bulk of a hub's listing.
BULK = 200
BULK_FILE = TESTS / "fixtures" / "torch" / "parameters.pt"


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """nginx serving the test folder at /repo/ and the bulk at /bulk/N.bin."""
    root = tmp_path_factory.mktemp("served")
    (root / "repo").symlink_to(TESTS)
    (root / "bulk").mkdir()
    for i in range(BULK):
        (root / "bulk" / f"{i}.bin").symlink_to(BULK_FILE)
    server = Nginx(root, tmp_path_factory.mktemp("nginx"))
    yield server
    server.stop()


@pytest.fixture(scope="module")
def cluster():
    """A local Ray cluster of two CPUs that reports nothing home; its workers
    inherit this process's environment, so they import this tensorplay."""
    before = os.environ.get("RAY_USAGE_STATS_ENABLED")
    os.environ["RAY_USAGE_STATS_ENABLED"] = "0"
    ray.init(num_cpus=2, include_dashboard=False)
    try:
        import tensorplay

        where = ray.get(ray.remote(lambda: __import__("tensorplay").__file__).remote())
        assert where == tensorplay.__file__, (where, tensorplay.__file__)
        yield
    finally:
        ray.shutdown()
        if before is None:
            os.environ.pop("RAY_USAGE_STATS_ENABLED", None)
        else:
            os.environ["RAY_USAGE_STATS_ENABLED"] = before


def url_of(server: Nginx, relative: str) -> str:
    return f"{server.url}/{urllib.parse.quote(relative)}"


def read_rows(output: pathlib.Path, format: str) -> list[dict]:
    if format == "parquet":
        table = pq.read_table(output)
        assert table.schema.equals(SCHEMA, check_metadata=False), table.schema
        return table.to_pylist()
    rows = [json.loads(line) for file in sorted(output.glob("*.json")) for line in file.read_text().splitlines()]
    assert rows and all(list(r) == SCHEMA.names for r in rows), rows[:1]
    return rows


def expected(report: scanner.ScanReport) -> tuple:
    """What a row must say of a file, from its report."""
    fields = report.to_json()
    return fields["verdict"], fields["format"], fields["globals"], fields["problems"]


def said(row: dict) -> tuple:
    return row["verdict"], row["format"], json.loads(row["findings"]), json.loads(row["problems"])


def test_importing_without_ray_names_the_extra():
    code = "import sys; sys.modules['ray'] = None; import tensorplay.scanner.ray"
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert run.returncode == 1
    assert "ImportError" in run.stderr and "tensorplay-serialization[ray]" in run.stderr, run.stderr


def test_a_unit_whose_scan_raises_is_an_unreadable_row_of_the_same_schema(served):
    """In the worker's class itself, without Ray: every report one row, every
    batch the one schema, whatever each unit gave."""
    scan = ScanUnits(jobs=4)
    units = [url_of(served, "repo/fixtures/torch/parameters.pt"), None, f"{served.url}/bulk/missing.bin"]
    table = scan({"unit": units})
    assert table.schema == SCHEMA and table.num_rows == 3
    good, raised, missing = table.to_pylist()
    assert good["verdict"] == "clean" and good["round_trips"] == 3 and json.loads(good["object"])["etag"]
    assert raised["verdict"] == "unreadable" and raised["object"] is None and raised["bytes_read"] is None
    assert [p["kind"] for p in json.loads(raised["problems"])] == ["scan_failed"]
    assert missing["verdict"] == "unreadable" and "HTTP 404" in missing["problems"]


@pytest.mark.parametrize("format", ["jsonl", "parquet"])
def test_a_listing_scans_on_ray_as_its_files_scan_locally(served, cluster, tmp_path, format):
    files = {url_of(served, f"bulk/{i}.bin"): BULK_FILE for i in range(BULK)}
    files |= {url_of(served, f"repo/{relative}"): TESTS / relative for relative in MALICIOUS}
    missing = f"{served.url}/bulk/no-such-file.bin"
    malformed = "http://[::1/model.bin"  # an URL the client cannot even parse
    units = [*files, missing, malformed]
    output = tmp_path / "scan"
    if format == "parquet":
        # A listing too long for the driver's memory: a file of units, read by the cluster.
        (tmp_path / "units.txt").write_text("".join(f"{u}\n" for u in units))
        listing = ray.data.read_text(str(tmp_path / "units.txt")).rename_columns({"text": "unit"})
    else:
        listing = units

    counts = scan_listing(listing, output, format=format, concurrency=2, batch_size=32)

    rows = read_rows(output, format)
    assert Counter(r["unit"] for r in rows) == Counter(units)  # one row a file, every unit once
    assert counts == Counter(r["verdict"] for r in rows)
    assert counts["unsafe"] > 100 and counts["clean"] >= BULK
    by_unit = {r["unit"]: r for r in rows}
    differ = []
    for url, path in files.items():
        row = by_unit[url]
        assert row["path"] == url and row["reached_from"] is None
        local = scanner.scan(path, pickles_only=True)
        if said(row) != expected(local):
            differ.append((url, said(row), expected(local)))
        identity = json.loads(row["object"])
        assert identity["size"] == path.stat().st_size and identity["etag"] and identity["url"] == url
        assert row["round_trips"] >= 1 and row["bytes_read"] >= 1 and isinstance(row["whole_file"], bool)
    assert not differ, differ[:3]
    assert by_unit[missing]["verdict"] == "unreadable" and "HTTP 404" in by_unit[missing]["problems"]
    assert by_unit[malformed]["verdict"] == "unreadable" and "Invalid IPv6 URL" in by_unit[malformed]["problems"]


def test_workers_that_reserve_every_cpu_are_warned_of(served, cluster, tmp_path):
    """A listing read by tasks would wait forever for a CPU: said before the job starts."""
    unit = url_of(served, "repo/fixtures/torch/parameters.pt")
    with pytest.warns(RuntimeWarning, match="reserve all 2 CPUs of the cluster"):
        counts = scan_listing([unit], tmp_path / "scan", concurrency=2, num_cpus=1)
    assert counts == {"clean": 1}
