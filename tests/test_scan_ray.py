"""Scanning a listing on a real Ray cluster (local, two CPUs, usage stats off):
a few hundred units served by nginx, the malicious corpus among them, and DCP
folders and sharded repositories (URL prefixes, Hub repositories at a revision,
an S3 prefix on moto's server), scanned by ``tensorplay.scanner.ray.scan_listing``;
the rows read back from its JSON lines and Parquet outputs say what the local
scan of the same files and folders says, and a unit that cannot be read is an
unreadable row, never a lost one."""
from __future__ import annotations

import builtins
import json
import os
import pathlib
import subprocess
import sys
import urllib.parse
from collections import Counter

import boto3
import pyarrow.parquet as pq
import pytest
import ray
import ray.data
from http_servers import Nginx, publish_hub_repo
from moto.server import ThreadedMotoServer
from sandboxed import torch_zip_payload
from tensorplay import _objects, _pointers, scanner
from tensorplay.scanner.ray import SCHEMA, ScanUnits, scan_listing, to_row
from test_pointers import (
    PLACEMENTS,
    _copy,
    _rename_shard,
    saved_dcp,  # noqa: F401 (a fixture)
    sharded,  # noqa: F401 (a fixture)
)
from test_remote_folders import _relative, listed_by_an_index, read_as_items, serve_folder

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
def s3_store(tmp_path_factory):
    """moto's S3 server, and the environment s3fs reads to reach it."""
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    unset = str(tmp_path_factory.mktemp("aws") / "none")
    env = {"AWS_ENDPOINT_URL": f"http://{host}:{port}", "AWS_ACCESS_KEY_ID": "testing",
           "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1",
           # Nothing of the machine's own AWS set-up may answer instead.
           "AWS_CONFIG_FILE": unset, "AWS_SHARED_CREDENTIALS_FILE": unset}
    admin = boto3.client("s3", endpoint_url=env["AWS_ENDPOINT_URL"], aws_access_key_id="testing",
                         aws_secret_access_key="testing", region_name="us-east-1")
    admin.create_bucket(Bucket="units")
    yield admin, env
    server.stop()


@pytest.fixture(scope="module")
def cluster(served, s3_store):
    """A local Ray cluster of two CPUs that reports nothing home. Its workers
    inherit this process's environment, so they import this tensorplay; the
    Hub's endpoint and the S3 server are passed as a job passes them, in
    ``runtime_env``."""
    before = os.environ.get("RAY_USAGE_STATS_ENABLED")
    os.environ["RAY_USAGE_STATS_ENABLED"] = "0"
    # ray.init replaces builtins.print (ray.experimental.tqdm_ray.safe_print) for
    # the rest of the process: put it back, for the tests that pickle print.
    printer = builtins.print
    _, s3_env = s3_store
    ray.init(num_cpus=2, include_dashboard=False,
             runtime_env={"env_vars": {"HF_ENDPOINT": served.url, **s3_env}})
    try:
        import tensorplay

        where = ray.get(ray.remote(lambda: __import__("tensorplay").__file__).remote())
        assert where == tensorplay.__file__, (where, tensorplay.__file__)
        yield
    finally:
        ray.shutdown()
        builtins.print = printer
        if before is None:
            os.environ.pop("RAY_USAGE_STATS_ENABLED", None)
        else:
            os.environ["RAY_USAGE_STATS_ENABLED"] = before


@pytest.fixture(scope="module")
def folders(served, s3_store, saved_dcp, sharded, tmp_path_factory):  # noqa: F811
    """DCP folders and sharded repositories, benign and hostile, as units:
    ``{unit: (the base of its reports' paths, the local folder, whether its
    listing hides names starting with a dot, as a server's index does)}``."""
    tmp_path = tmp_path_factory.mktemp("folders")
    made = {}
    for placement in (None, "text_file", "outside_the_folder"):
        folder = _copy(saved_dcp, tmp_path / f"dcp-{placement}")
        if placement is not None:
            PLACEMENTS[placement](folder)
        made[f"dcp-{placement}"] = folder
    made["sharded"] = _copy(sharded, tmp_path / "sharded")
    made["sharded-hostile"] = _copy(sharded, tmp_path / "sharded-hostile")
    _rename_shard(made["sharded-hostile"], "notes.txt", torch_zip_payload())

    units = {}
    for name in ("dcp-None", "dcp-text_file", "dcp-outside_the_folder", "sharded"):
        base = serve_folder(served, made[name], name)
        units[base] = (base, made[name], True)
    for name in ("sharded", "sharded-hostile"):
        commit = publish_hub_repo(served.root, f"acme/{name}", made[name], revision="v1.0")
        units[f"hf://acme/{name}@v1.0"] = (f"hf://acme/{name}@{commit}/", made[name], False)
    admin, _ = s3_store
    folder = made["dcp-text_file"]
    for path in folder.rglob("*"):
        admin.put_object(Bucket="units", Key=f"dcp/{path.relative_to(folder).as_posix()}", Body=path.read_bytes())
    units["s3://units/dcp/"] = ("s3://units/dcp/", folder, False)
    return units


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


def outline_of_rows(rows: list[dict], base: str) -> dict:
    """A folder unit's rows by each file's name in it and the pointer that
    reached it, as test_remote_folders outlines reports."""
    seen = {}
    for row in rows:
        pointer = json.loads(row["reached_from"]) if row["reached_from"] is not None else None
        key = (_relative(row["path"], base), (pointer["item"], pointer["reader"]) if pointer else None)
        assert key not in seen, f"{key} in two rows"
        seen[key] = (row["verdict"], row["format"],
                     tuple((f["name"], f["dangerous"], f["location"]) for f in json.loads(row["findings"])),
                     tuple((p["kind"], p["location"]) for p in json.loads(row["problems"])), row["skipped_because"])
    return seen


def outline_of_reports(reports: list[scanner.ScanReport], base: str) -> dict:
    return outline_of_rows([to_row(base, r) for r in reports], base)


def test_importing_without_ray_names_the_extra():
    code = "import sys; sys.modules['ray'] = None; import tensorplay.scanner.ray"
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert run.returncode == 1
    assert "ImportError" in run.stderr and "tensorplay-serialization[ray]" in run.stderr, run.stderr


def test_a_unit_whose_scan_raises_is_an_unreadable_row_of_the_same_schema(served):
    """In the worker's class itself, without Ray: every report one row, every
    batch the one schema, whatever each unit gave."""
    scan = ScanUnits(jobs=4)
    (served.root / "empty").mkdir(exist_ok=True)
    units = [url_of(served, "repo/fixtures/torch/parameters.pt"), None, f"{served.url}/bulk/missing.bin",
             f"{served.url}/empty/"]
    table = scan({"unit": units})
    assert table.schema == SCHEMA and table.num_rows == 4
    good, raised, missing, empty = table.to_pylist()
    assert empty["verdict"] == "unreadable" and "nothing_to_scan" in empty["problems"]
    assert good["verdict"] == "clean" and good["round_trips"] == 3 and json.loads(good["object"])["etag"]
    assert raised["verdict"] == "unreadable" and raised["object"] is None and raised["bytes_read"] is None
    assert [p["kind"] for p in json.loads(raised["problems"])] == ["scan_failed"]
    assert missing["verdict"] == "unreadable" and "HTTP 404" in missing["problems"]


def test_a_worker_keeps_one_session_for_every_unit_and_batch(served, folders, s3_store, monkeypatch):
    """One file system of a scheme for the worker's life, not one per unit (a
    new s3fs session each, its connections with it)."""
    for name, value in s3_store[1].items():
        monkeypatch.setenv(name, value)
    made = []
    for_url = _objects.Store.for_url
    monkeypatch.setattr(_objects.Store, "for_url", classmethod(lambda cls, url: made.append(url) or for_url(url)))
    scan = ScanUnits(jobs=4)
    first = scan({"unit": ["s3://units/dcp/", url_of(served, "bulk/0.bin")]}).to_pylist()
    second = scan({"unit": ["s3://units/dcp/.metadata", "s3://units/dcp/README.md"]}).to_pylist()
    assert len(made) == 1, made
    assert {r["unit"] for r in first} == {"s3://units/dcp/", url_of(served, "bulk/0.bin")}
    assert [r["verdict"] for r in second] == ["clean", "skipped"]
    assert all(json.loads(r["object"])["etag"] for r in second)


@pytest.mark.parametrize("format", ["jsonl", "parquet"])
def test_a_listing_scans_on_ray_as_its_files_scan_locally(served, folders, cluster, tmp_path, format):
    files = {url_of(served, f"bulk/{i}.bin"): BULK_FILE for i in range(BULK)}
    files |= {url_of(served, f"repo/{relative}"): TESTS / relative for relative in MALICIOUS}
    missing = f"{served.url}/bulk/no-such-file.bin"
    malformed = "http://[::1/model.bin"  # an URL the client cannot even parse
    units = [*files, *folders, missing, malformed]
    output = tmp_path / "scan"
    if format == "parquet":
        # A listing too long for the driver's memory: a file of units, read by the cluster.
        (tmp_path / "units.txt").write_text("".join(f"{u}\n" for u in units))
        listing = ray.data.read_text(str(tmp_path / "units.txt")).rename_columns({"text": "unit"})
    else:
        listing = units

    counts = scan_listing(listing, output, format=format, concurrency=2, batch_size=32)

    rows = read_rows(output, format)
    assert counts == Counter(r["verdict"] for r in rows)
    assert counts["unsafe"] > 100 and counts["clean"] >= BULK
    rows_of: dict[str, list[dict]] = {}
    for row in rows:
        rows_of.setdefault(row["unit"], []).append(row)
    assert set(rows_of) == set(units)  # every unit has rows: a file one, a folder one per file and pointer
    assert all(len(rows_of[unit]) == 1 for unit in units if unit not in folders)

    for unit, (base, folder, hides_dot_names) in folders.items():
        remote, local = read_as_items(outline_of_rows(rows_of[unit], base),
                                      outline_of_reports(scanner.scan_paths([folder], pickles_only=True),
                                                         str(folder) + "/"))
        assert remote == (listed_by_an_index(local) if hides_dot_names else local), unit
        assert all(json.loads(row["object"])["size"] is not None for row in rows_of[unit]
                   if row["object"] is not None), unit
    # The hostile DCP items are found through the metadata's pointers, each read where it lives.
    pointed = [row for unit in folders for row in rows_of[unit] if row["reached_from"] is not None]
    assert any(json.loads(row["reached_from"])["reader"] == _pointers.DCP_BYTES and row["verdict"] == "unsafe"
               for row in pointed)
    assert {unit for unit in folders if any(row["verdict"] == "unsafe" for row in rows_of[unit])} == {
        f"{served.url}/dcp-text_file/ckpt/", f"{served.url}/dcp-outside_the_folder/ckpt/",
        "hf://acme/sharded-hostile@v1.0", "s3://units/dcp/"}

    by_unit = {unit: rows_of[unit][0] for unit in units if unit not in folders}
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
