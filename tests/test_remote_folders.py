"""Remote folders: a URL prefix served by a real nginx (listed by its JSON index)
and a Hub repository at a revision (the Hub's API and ``resolve/`` layout served
by the same nginx, ``HF_ENDPOINT`` at it) are scanned as the local folder is, the
pointers of DCP metadata and shard indexes followed where they live, by ranges.
Each hostile folder is first proven by the real loader (it runs the payload),
then the remote scan must report what the local scan reports, never CLEAN."""
from __future__ import annotations

import dataclasses
import json
import os
import pathlib
import pickle
import shutil
import subprocess
import sys
import urllib.parse

import pytest
from http_servers import Nginx, publish_hub_repo
from remote_corpus import dcp_payloads, no_tensor_byte, sent_ranges
from sandboxed import runs_payload, torch_zip_payload
from tensorplay import _http, _remote, cli, scanner
from test_pointers import (
    DCP_LOAD,
    FROM_PRETRAINED,
    PLACEMENTS,
    SHARD_NAMES,
    _copy,
    _metadata,
    _rename_shard,
    saved_dcp,  # noqa: F401 (a fixture)
    sharded,  # noqa: F401 (a fixture)
)
from test_remote_s3 import BUCKET, s3  # noqa: F401 (a fixture)

TESTS = pathlib.Path(__file__).parent


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    root = tmp_path_factory.mktemp("served")
    nginx = Nginx(root, tmp_path_factory.mktemp("nginx"))
    yield nginx
    nginx.stop()


def _relative(path: str, base: str) -> str:
    """A report's path in the folder: a URL's unquoted, a local path's as it is."""
    if not path.startswith(base):
        return path
    relative = path[len(base):]
    return urllib.parse.unquote(relative) if "://" in base else relative


def outline(reports: list[scanner.ScanReport], base: str) -> dict:
    """What a folder's reports say, by each file's name in the folder (read
    whole, or through a pointer): what a remote scan must say as the local one."""
    seen = {}
    for r in reports:
        pointer = (r.reached_from.item, r.reached_from.reader) if r.reached_from is not None else None
        key = (_relative(r.path.replace(os.sep, "/"), base), pointer)
        assert key not in seen, f"{key} reported twice"
        seen[key] = (r.verdict, r.format, tuple((f.name, f.dangerous, f.location) for f in r.findings),
                     tuple((p.kind, p.location) for p in r.problems), r.skipped_because)
    return seen


def serve_folder(server: Nginx, folder: pathlib.Path, name: str) -> str:
    """The URL of a copy of ``folder`` (and what lies beside it) served as ``name/``."""
    target = server.root / name
    shutil.copytree(folder.parent, target, symlinks=True)
    return f"{server.url}/{name}/{folder.name}/"


def listed_by_an_index(outlined: dict) -> dict:
    """What a folder walk reports that a server's index lists: nginx hides names
    starting with a dot (the scan asks for a DCP ``.metadata`` by its name)."""
    return {key: value for key, value in outlined.items()
            if key[1] is not None or not any(part.startswith(".") and part != ".metadata"
                                             for part in key[0].split("/"))}


def read_as_items(remote: dict, local: dict) -> tuple[dict, dict]:
    """A file DCP items tile (a ``.distcp``) is read remotely as those items, by
    ranges, not downloaded whole: its report is theirs (format ``items``, each
    finding under its item), so it is held to the local one by its verdict and
    the globals found."""
    remote, local = dict(remote), dict(local)
    for key, (verdict, fmt, findings, _, _) in remote.items():
        if fmt == "items" and key[1] is None and key in local:
            remote[key] = (verdict, sorted(f[:2] for f in findings))
            local[key] = (local[key][0], sorted(f[:2] for f in local[key][2]))
    return remote, local


def assert_remote_equals_local(server: Nginx, folder: pathlib.Path, name: str, full: bool = False) -> list:
    base = serve_folder(server, folder, name)
    remote = scanner.scan_paths([base], full=full)
    local = scanner.scan_paths([folder], pickles_only=not full)
    remote_outline, local_outline = read_as_items(outline(remote, base), outline(local, str(folder) + "/"))
    assert remote_outline == listed_by_an_index(local_outline)
    assert cli.exit_code(remote) == cli.exit_code(local)
    return remote


@pytest.mark.parametrize("placement", PLACEMENTS)
def test_a_dcp_item_pointed_anywhere_is_read_where_it_lives(placement, saved_dcp, tmp_path, server):  # noqa: F811
    folder = _copy(saved_dcp, tmp_path)
    PLACEMENTS[placement](folder)
    assert runs_payload(DCP_LOAD, folder=str(folder)), "dcp.load must run the planted payload"
    remote = assert_remote_equals_local(server, folder, f"dcp-{placement}")
    assert cli.exit_code(remote) != 0
    assert any(r.verdict == "unsafe" and r.reached_from is not None for r in remote)
    # What a pointer reaches is read by ranges, never by fetching its whole file.
    assert all(not r.remote.whole_file for r in remote if r.reached_from is not None and r.remote is not None)


@pytest.mark.parametrize("where", SHARD_NAMES)
def test_a_shard_is_read_where_it_lives_whatever_its_name(where, sharded, tmp_path, server):  # noqa: F811
    folder = _copy(sharded, tmp_path)
    _rename_shard(folder, SHARD_NAMES[where], torch_zip_payload())
    if where == "tensordict_leaf":
        (folder / "meta.json").write_text('{"weights": {"device": "cpu", "shape": [1], "dtype": "torch.uint8"}}')
    assert runs_payload(FROM_PRETRAINED, folder=str(folder)), "from_pretrained must run the planted payload"
    remote = assert_remote_equals_local(server, folder, f"sharded-{where}")
    assert cli.exit_code(remote) == cli.EXIT_UNSAFE


def test_benign_folders_scan_clean_remotely_as_locally(saved_dcp, sharded, server, tmp_path):  # noqa: F811
    for name, folder in {"dcp": saved_dcp, "sharded": sharded}.items():
        remote = assert_remote_equals_local(server, folder, f"benign-{name}")
        assert cli.exit_code(remote) == 0
    # The fixtures written by every pinned torch's DCP and by tensordict.
    for kind in ("dcp", "tensordict"):
        for folder in sorted(p for p in (TESTS / "fixtures" / kind).iterdir() if p.is_dir()):
            copy = tmp_path / kind / folder.name / "unit"
            shutil.copytree(folder, copy)
            assert_remote_equals_local(server, copy, f"fixture-{kind}-{folder.name}")


def test_a_dcp_folder_is_judged_without_a_byte_of_its_tensors(server, tmp_path):
    folder = tmp_path / "dcp" / "big"
    code = ("import warnings, torch, torch.distributed.checkpoint as dcp\nwarnings.simplefilter('ignore')\n"
            "dcp.save({f'layer{i}.weight': torch.randn(256, 256) for i in range(8)} | {'step': 7}, "
            f"checkpoint_id={str(folder)!r})\n")
    subprocess.run([sys.executable, "-c", code], check=True)
    base = serve_folder(server, folder, "dcp-big")
    before = len(server.requests())
    remote = scanner.scan_paths([base])
    # The metadata, a small pickle, is read whole; the data file by its items' ranges.
    assert cli.exit_code(remote) == 0 and not any(r.remote.whole_file for r in remote if r.path.endswith(".distcp"))
    log = server.requests()[before:]
    for name, tensors in dcp_payloads(folder).items():
        size = (folder / name).stat().st_size
        fetched = sent_ranges(log, f"/dcp-big/big/{name}", size)
        assert fetched and sum(map(len, fetched)) < size // 20
        no_tensor_byte(fetched, tensors)


def test_items_that_tile_a_file_across_its_zips_are_never_clean(saved_dcp, tmp_path, server):  # noqa: F811
    """Items tiling a .distcp with edges that cut its records: each item is read as
    a file of its own, and one whose zip or pickle crosses an edge is not clean."""
    folder = _copy(saved_dcp, tmp_path)
    md = _metadata(folder)
    items = sorted(md.storage_data.items(), key=lambda kv: kv[1].offset)
    assert len(items) == 2 and items[0][1].relative_path == items[1][1].relative_path
    (first, a), (second, b) = items
    md.storage_data[first] = dataclasses.replace(a, length=a.length + 10)
    md.storage_data[second] = dataclasses.replace(b, offset=b.offset + 10, length=b.length - 10)
    (folder / ".metadata").write_bytes(pickle.dumps(md))
    base = serve_folder(server, folder, "cut-items")
    remote = scanner.scan_paths([base])
    distcp = [r for r in remote if r.path.endswith(".distcp") and r.reached_from is None]
    assert [r.format for r in distcp] == ["items"] and distcp[0].verdict != "clean"
    assert cli.exit_code(remote) != 0


def test_a_full_remote_folder_scan_equals_the_local_full_scan(saved_dcp, tmp_path, server):  # noqa: F811
    folder = _copy(saved_dcp, tmp_path)
    PLACEMENTS["another_files_tensor_bytes"](folder)
    assert_remote_equals_local(server, folder, "full-dcp", full=True)


def test_a_hub_repository_is_read_at_the_commit_its_revision_names(sharded, tmp_path, server, monkeypatch):  # noqa: F811
    folder = _copy(sharded, tmp_path)
    _rename_shard(folder, "notes.txt", torch_zip_payload())
    assert runs_payload(FROM_PRETRAINED, folder=str(folder))
    commit = publish_hub_repo(server.root, "acme/tiny-gpt2", folder, revision="v1.0")
    monkeypatch.setenv("HF_ENDPOINT", server.url)
    monkeypatch.setenv("HF_TOKEN", "hf_secret")
    start = len(server.requests())
    remote = scanner.scan_paths(["hf://acme/tiny-gpt2@v1.0"])
    base = f"hf://acme/tiny-gpt2@{commit}/"
    assert outline(remote, base) == outline(scanner.scan_paths([folder], pickles_only=True), str(folder) + "/")
    assert cli.exit_code(remote) == cli.EXIT_UNSAFE
    # Every file read at the commit, with the token, and only its pickles' bytes.
    files = [row for row in server.requests()[start:] if "/resolve/" in row[1]]
    assert files and all(f"/resolve/{commit}/" in row[1] and row[5] == "Bearer hf_secret" for row in files)
    assert all(row[2].startswith("bytes=") for row in files)


@pytest.mark.parametrize("placement", ["text_file", "another_files_tensor_bytes", "outside_the_folder"])
def test_an_object_store_prefix_is_scanned_as_the_folder(placement, saved_dcp, s3, tmp_path):  # noqa: F811
    folder = _copy(saved_dcp, tmp_path)
    PLACEMENTS[placement](folder)
    assert runs_payload(DCP_LOAD, folder=str(folder)), "dcp.load must run the planted payload"
    for path in folder.parent.rglob("*"):
        if path.is_file():
            s3.put(BUCKET, f"units/{placement}/{path.relative_to(folder.parent).as_posix()}", path.read_bytes())
    base = f"s3://{BUCKET}/units/{placement}/{folder.name}/"
    remote = scanner.scan_paths([base])
    # An object store lists every name, those starting with a dot too.
    assert outline(remote, base) == outline(scanner.scan_paths([folder], pickles_only=True), str(folder) + "/")
    assert cli.exit_code(remote) == cli.EXIT_UNSAFE


def test_a_folder_that_cannot_be_listed_is_unreadable(server, monkeypatch):
    reports = scanner.scan_paths([f"{server.url}/no-such-folder/"])
    assert [r.verdict for r in reports] == ["unreadable"]
    assert reports[0].problems[0].kind == "network" and "404" in reports[0].problems[0].reason
    monkeypatch.setenv("HF_ENDPOINT", server.url)
    reports = scanner.scan_paths(["hf://acme/missing@main"])
    assert [r.verdict for r in reports] == ["unreadable"]
    with pytest.raises(ValueError, match="names a folder"):
        scanner.scan(f"{server.url}/no-such-folder/")


def test_a_missing_shard_is_unreadable_as_locally(sharded, tmp_path, server):  # noqa: F811
    folder = _copy(sharded, tmp_path)
    index = json.loads((folder / "pytorch_model.bin.index.json").read_text())
    first = next(iter(index["weight_map"].values()))
    (folder / first).unlink()
    remote = assert_remote_equals_local(server, folder, "missing-shard")
    assert cli.exit_code(remote) == cli.EXIT_UNREADABLE


def test_the_command_line_scans_a_remote_folder(saved_dcp, tmp_path, server):  # noqa: F811
    folder = _copy(saved_dcp, tmp_path)
    PLACEMENTS["text_file"](folder)
    base = serve_folder(server, folder, "cli-dcp")
    run = subprocess.run([sys.executable, "-m", "tensorplay", "scan", "--json", base], capture_output=True,
                         text=True)
    assert run.returncode == cli.EXIT_UNSAFE, run.stderr
    document = json.loads(run.stdout)
    pointed = [f for f in document["files"] if f.get("reached_from")]
    assert pointed and pointed[0]["verdict"] == "unsafe"


def test_a_listing_is_bounded_and_checked(server):
    client = _http.Client()
    (server.root / "listing").mkdir()
    (server.root / "listing" / "a.bin").write_bytes(b"x")
    (server.root / "listing" / "sub").mkdir()
    (server.root / "listing" / "sub" / "b.bin").write_bytes(b"yy")
    from tensorplay import _remote_folders

    entries = _remote_folders.listing(f"{server.url}/listing/", _remote.Readers(client))
    assert [(e.name, e.size) for e in entries] == [("a.bin", 1), ("sub/b.bin", 2)]
    client.close()
