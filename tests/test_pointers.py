"""Pointers one file of a folder gives a loader (a DCP ``.metadata``'s items, a shard
index's shards, a TensorDict level's keys), followed by the scanner as the loader
follows them. Each hostile folder here is first proven by the real loader, run in
a sandboxed subprocess: it creates the marker. Then the scan must not call the
folder clean, and tensorplay's loaders must refuse it."""
from __future__ import annotations

import dataclasses
import io
import os
import pathlib
import pickle
import shutil
import subprocess
import sys
import zipfile

import pytest
import tensorplay
from sandboxed import protocol_0_payload, runs_payload, torch_zip_payload
from tensorplay import cli, scanner

torch = pytest.importorskip("torch")
dcp = pytest.importorskip("torch.distributed.checkpoint")

# dcp.load with a state dict of the saved keys: the default planner asks for
# every item, the bytes item through torch.load(weights_only=False).
DCP_LOAD = """
import warnings, torch, torch.distributed.checkpoint as dcp
warnings.simplefilter("ignore")
sd = {"w": torch.zeros(64), "extra": {"a": None}}
dcp.load(sd, checkpoint_id=folder)
"""


@pytest.fixture(scope="module")
def saved_dcp(tmp_path_factory) -> pathlib.Path:
    """A real DCP checkpoint: one tensor, one non-tensor (bytes) item."""
    folder = tmp_path_factory.mktemp("dcp") / "ckpt"
    code = ("import warnings, torch, torch.distributed.checkpoint as dcp\nwarnings.simplefilter('ignore')\n"
            "dcp.save({'w': torch.arange(64, dtype=torch.float32), 'extra': {'a': [1, 2, 3]}}, "
            f"checkpoint_id={str(folder)!r})\n")
    subprocess.run([sys.executable, "-c", code], check=True)
    return folder


def _metadata(folder: pathlib.Path):
    from torch.distributed.checkpoint import FileSystemReader

    return FileSystemReader(str(folder)).read_metadata()


def _repoint(folder: pathlib.Path, fqn: str, relative: str, offset: int, length: int) -> None:
    """Rewrite ``.metadata`` so the item ``fqn`` is read from ``relative`` at ``offset``."""
    md = _metadata(folder)
    for index, info in list(md.storage_data.items()):
        if index.fqn == fqn:
            md.storage_data[index] = dataclasses.replace(info, relative_path=relative, offset=offset, length=length)
    (folder / ".metadata").write_bytes(pickle.dumps(md))


def _copy(saved: pathlib.Path, tmp_path: pathlib.Path) -> pathlib.Path:
    folder = tmp_path / "ckpt"
    shutil.copytree(saved, folder)
    return folder


def _plant_in_text(folder: pathlib.Path) -> None:
    text = b"# A model card\n\nNothing to see here.\n"
    (folder / "README.md").write_bytes(text + protocol_0_payload() + b"\n")
    _repoint(folder, "extra.a", "README.md", len(text), len(protocol_0_payload()))


def _plant_in_leaf(folder: pathlib.Path) -> None:
    # A TensorDict level beside the checkpoint: its leaves are raw tensor bytes.
    (folder / "meta.json").write_text('{"blob": {"device": "cpu", "shape": [4096], "dtype": "torch.uint8"}}')
    payload = torch_zip_payload()
    (folder / "blob.memmap").write_bytes(b"\0" * 1000 + payload + b"\0" * (3096 - len(payload)))
    _repoint(folder, "extra.a", "blob.memmap", 1000, len(payload))


def _plant_in_git(folder: pathlib.Path) -> None:
    objects = folder / ".git" / "objects" / "ab"
    objects.mkdir(parents=True)
    payload = torch_zip_payload()
    (objects / "cdef0123").write_bytes(b"x\x01" + b"\x07" * 300 + payload)
    _repoint(folder, "extra.a", ".git/objects/ab/cdef0123", 302, len(payload))


def _plant_in_tensor_bytes(folder: pathlib.Path) -> None:
    # The payload overwrites the storage of the saved tensor "w" (64 float32: 256
    # bytes), inside the .distcp file: the tensor loads, with other values.
    md = _metadata(folder)
    info = next(v for k, v in md.storage_data.items() if k.fqn == "w")
    distcp = folder / info.relative_path
    data = bytearray(distcp.read_bytes())
    tensor_archive = bytes(data[info.offset:info.offset + info.length])
    with zipfile.ZipFile(io.BytesIO(tensor_archive)) as z:
        record = next(i for i in z.infolist() if i.filename.endswith("/data/0"))
        start = info.offset + record.header_offset + 30 + len(record.filename) + len(record.extra)
    payload = torch_zip_payload()
    assert len(payload) <= 256 * 4, "the payload must fit in the tensor's storage"
    data[start:start + len(payload)] = payload
    distcp.write_bytes(bytes(data))
    _repoint(folder, "extra.a", info.relative_path, start, len(payload))


def _plant_outside(folder: pathlib.Path) -> None:
    payload = torch_zip_payload()
    (folder.parent / "elsewhere.bin").write_bytes(payload)
    _repoint(folder, "extra.a", "../elsewhere.bin", 0, len(payload))


PLACEMENTS = {
    "text_file": _plant_in_text,
    "tensordict_leaf": _plant_in_leaf,
    "git_object": _plant_in_git,
    "another_files_tensor_bytes": _plant_in_tensor_bytes,
    "outside_the_folder": _plant_outside,
}


@pytest.mark.parametrize("placement", PLACEMENTS)
def test_a_dcp_bytes_item_anywhere_is_read_as_torch_load_reads_it(placement, saved_dcp, tmp_path):
    folder = _copy(saved_dcp, tmp_path)
    PLACEMENTS[placement](folder)
    assert runs_payload(DCP_LOAD, folder=str(folder)), "dcp.load must run the planted payload"
    reports = scanner.scan_paths([folder])
    assert cli.exit_code(reports) != 0
    pointed = [r for r in reports if r.reached_from is not None and r.verdict != "clean"]
    assert pointed and all(r.reached_from.source == str(folder / ".metadata") for r in pointed)
    assert any(r.verdict == "unsafe" for r in pointed)
    with pytest.raises(tensorplay.CheckpointError):
        tensorplay.dcp.load(folder)
    with pytest.raises(tensorplay.CheckpointError):
        tensorplay.load(folder)


def test_a_pointer_out_of_the_folder_is_unsafe_and_never_read(saved_dcp, tmp_path):
    folder = _copy(saved_dcp, tmp_path)
    _repoint(folder, "extra.a", "/dev/zero", 0, 1 << 40)
    report = next(r for r in scanner.scan_paths([folder]) if r.reached_from is not None and r.verdict == "unsafe")
    assert report.findings[0].name == "<a file outside the folder: /dev/zero>"
    assert report.findings[0].dangerous and report.findings[0].location == "extra.a"
    assert [(p.kind, p.location) for p in report.problems] == [("pointer_outside_folder", "extra.a")]


def test_a_span_past_the_end_of_its_file_is_unreadable(saved_dcp, tmp_path):
    folder = _copy(saved_dcp, tmp_path)
    size = (folder / "__0_0.distcp").stat().st_size
    _repoint(folder, "extra.a", "__0_0.distcp", size - 10, 100)
    reports = scanner.scan_paths([folder])
    bad = [p for r in reports if r.reached_from is not None for p in r.problems]
    assert [p.kind for p in bad] == ["pointer_out_of_range"]
    assert "bytes item 'extra.a'" in bad[0].location
    assert cli.exit_code(reports) == cli.EXIT_UNREADABLE


def test_a_benign_dcp_folder_is_clean_and_says_where_its_items_are(saved_dcp, tmp_path):
    reports = scanner.scan_paths([saved_dcp])
    assert cli.exit_code(reports) == 0, [(r.path, r.verdict, r.problems) for r in reports]
    pointed = [r for r in reports if r.reached_from is not None]
    assert [r.format for r in pointed] == ["items"]
    assert pointed[0].path == str(saved_dcp / "__0_0.distcp") and pointed[0].pickles == 2
    document = pointed[0].to_json()
    assert document["reached_from"]["source"] == str(saved_dcp / ".metadata")


def test_metadata_only_torch_represents_is_listed_with_torch(saved_dcp, tmp_path):
    """An object numpy cannot represent (a function for a planner_data key, as a
    mutation left it): DCP's reader reads the metadata; so does the scan, with
    torch, and follows every item (oracle finding c9884e0cab89)."""
    import torch

    folder = _copy(saved_dcp, tmp_path)
    with open(folder / ".metadata", "rb") as f:
        metadata = pickle.load(f)
    metadata.planner_data = {torch.serialization._get_layout: ("odd",), **(metadata.planner_data or {})}
    with open(folder / ".metadata", "wb") as f:
        pickle.dump(metadata, f)
    with pytest.raises(tensorplay.UnsupportedCheckpointError):
        tensorplay.dcp.read_metadata(folder, backend="numpy")
    reports = scanner.scan_paths([folder])
    assert cli.exit_code(reports) == 0, [(r.path, r.verdict, r.problems) for r in reports]
    assert [r.format for r in reports if r.reached_from is not None] == ["items"]


# transformers' own loader of a sharded checkpoint, with the flag that sends each
# shard to torch.load(weights_only=False): every shard the index names is loaded,
# whatever its name.
FROM_PRETRAINED = """
import warnings, transformers
warnings.simplefilter("ignore")
transformers.logging.set_verbosity_error()
transformers.AutoModel.from_pretrained(folder, weights_only=False, use_safetensors=False)
"""


@pytest.fixture(scope="module")
def sharded(tmp_path_factory) -> pathlib.Path:
    """A tiny GPT-2 saved by transformers as .bin shards with an index."""
    folder = tmp_path_factory.mktemp("sharded") / "model"
    code = ("import transformers\n"
            "config = transformers.GPT2Config(n_layer=2, n_embd=16, n_head=2, vocab_size=64, n_positions=16)\n"
            "model = transformers.GPT2Model(config)\n"
            f"model.save_pretrained({str(folder)!r}, safe_serialization=False, max_shard_size='20KB')\n")
    subprocess.run([sys.executable, "-c", code], check=True)
    assert (folder / "pytorch_model.bin.index.json").exists()
    return folder


def _rename_shard(folder: pathlib.Path, new_name: str, content: bytes) -> None:
    """Give the index's first shard another name (and, with it, hostile content)."""
    import json

    index_path = folder / "pytorch_model.bin.index.json"
    index = json.loads(index_path.read_text())
    first = next(iter(dict.fromkeys(index["weight_map"].values())))
    (folder / first).unlink()
    target = folder / new_name
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes(content)
    index["weight_map"] = {k: (new_name if v == first else v) for k, v in index["weight_map"].items()}
    index_path.write_text(json.dumps(index))


SHARD_NAMES = {
    "text_name": "notes.txt",
    "under_git": ".git/lfs/shard.bin",
    "tensordict_leaf": "weights.memmap",
    "outside_the_folder": "../shard.bin",
}


@pytest.mark.parametrize("where", SHARD_NAMES)
def test_a_shard_is_read_as_a_checkpoint_whatever_its_name(where, sharded, tmp_path):
    folder = _copy(sharded, tmp_path)
    _rename_shard(folder, SHARD_NAMES[where], torch_zip_payload())
    if where == "tensordict_leaf":
        (folder / "meta.json").write_text('{"weights": {"device": "cpu", "shape": [1], "dtype": "torch.uint8"}}')
    assert runs_payload(FROM_PRETRAINED, folder=str(folder)), "from_pretrained must run the planted payload"
    reports = scanner.scan_paths([folder])
    assert cli.exit_code(reports) == cli.EXIT_UNSAFE
    index = str(folder / "pytorch_model.bin.index.json")
    assert any(r.reached_from is not None and r.reached_from.source == index and r.verdict == "unsafe"
               for r in reports) or where == "text_name"
    with pytest.raises(tensorplay.CheckpointError):
        tensorplay.load(folder)


def test_a_benign_sharded_folder_is_clean_and_its_shards_read_once(sharded):
    reports = scanner.scan_paths([sharded])
    assert cli.exit_code(reports) == 0, [(r.path, r.verdict, r.problems) for r in reports]
    # The walk read every shard by content: the index adds no second reading.
    assert all(r.reached_from is None for r in reports)
    assert len({r.path for r in reports}) == len(reports)


def test_a_tensordict_key_that_leaves_its_folder_is_unsafe(tmp_path):
    folder = tmp_path / "td"
    folder.mkdir()
    (folder / "meta.json").write_text('{"../../elsewhere": {"type": "TensorDict"}, "_type": '
                                      '"<class \'tensordict._td.TensorDict\'>", "shape": [], "device": null}')
    reports = scanner.scan_paths([folder])
    unsafe = [r for r in reports if r.verdict == "unsafe"]
    assert [f.name for r in unsafe for f in r.findings] == ["<a file outside the folder: ../../elsewhere>"]
    assert unsafe[0].reached_from.reader == "TensorDict.load_memmap: a sub-level's folder"


def test_pointers_a_loader_cannot_follow_never_break_the_scan(tmp_path):
    """A scan never raises: shard names that are no text or hold a NUL byte, a JSON
    document nested past the recursion limit, file names that are not UTF-8."""
    import json

    folder = tmp_path / "repo"
    folder.mkdir()
    (folder / "model.index.json").write_text(json.dumps({"weight_map": {"a": ["x"], "b": "x\u0000.bin", "c": 5}}))
    (folder / "meta.json").write_text("[" * 100_000 + "]" * 100_000)
    (folder / os.fsdecode(b"w\xff.memmap")).write_bytes(b"\0" * 8)
    (folder / os.fsdecode(b"\xfe.metadata")).write_bytes(b"\0")
    reports = scanner.scan_paths([folder])
    assert {os.path.basename(r.path) for r in reports} >= {"model.index.json", "meta.json"}
    index = next(r for r in reports if r.path.endswith("model.index.json"))
    assert index.verdict == "unreadable"
