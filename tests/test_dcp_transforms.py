"""DCP folders written behind the writer's stream transforms (``FileSystemWriter(...,
_extensions=[ZStandard()])``: each item's ``torch.save`` bytes zstd-compressed), by the
real torch with the real ``zstandard`` module: loaded by tensorplay's reader and by
``tensorplay.load``, scanned, and refused clearly where the transform is unknown,
corrupt or decodes past the limit."""
from __future__ import annotations

import json
import pickle
import re
import subprocess
import sys
import warnings

import pytest
import tensorplay
import tensorplay.dcp
import torch
import torch.distributed.checkpoint as dcp
import zstandard
from state_trees import assert_same_tree
from torch.distributed.checkpoint._extension import ZStandard
from torch.distributed.checkpoint.api import CheckpointException
from torch.distributed.checkpoint.filesystem import _StorageInfo


def _state() -> dict:
    g = torch.Generator().manual_seed(3)
    return {
        "model": {"w": torch.randn(64, 32, generator=g), "b": torch.zeros(32).bfloat16(),
                  "ids": torch.arange(10, dtype=torch.int64)},
        "step": 5,
        "meta": {"name": "zstd-run", "betas": (0.9, 0.95)},
    }


def _target() -> dict:
    return {"model": {"w": torch.zeros(64, 32), "b": torch.ones(32).bfloat16(),
                      "ids": torch.zeros(10, dtype=torch.int64)},
            "step": 0, "meta": {"name": "", "betas": (0.0, 0.0)}}


def _save(folder) -> dict:
    state = _state()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "assuming the intent is to save in a single process"
        dcp.save(state, storage_writer=dcp.FileSystemWriter(str(folder), _extensions=[ZStandard()]))
    return state


@pytest.fixture(scope="module")
def compressed(tmp_path_factory):
    folder = tmp_path_factory.mktemp("dcp_zstd")
    return folder, _save(folder)


def _metadata(folder):
    return dcp.FileSystemReader(str(folder)).read_metadata()  # the test's own file


def _rewrite(folder, metadata) -> None:
    with open(folder / ".metadata", "wb") as f:
        pickle.dump(metadata, f)


def test_the_writer_really_compressed_every_item(compressed):
    folder, _ = compressed
    infos = list(_metadata(folder).storage_data.values())
    assert infos and all(info.transform_descriptors == ["stream.zstd/1"] for info in infos)
    raw = (folder / "__0_0.distcp").read_bytes()
    for info in infos:
        assert raw[info.offset:info.offset + 4] == b"\x28\xb5\x2f\xfd"  # a zstd frame, not a zip


def test_dcp_load_through_tensorplays_reader_equals_torchs(compressed):
    folder, state = compressed
    ours, theirs = _target(), _target()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        dcp.load(ours, storage_reader=tensorplay.dcp.FileSystemReader(str(folder)))
        dcp.load(theirs, storage_reader=dcp.FileSystemReader(str(folder)))
    assert_same_tree(ours, theirs)
    assert_same_tree(ours, state)


@pytest.mark.parametrize("backend", ["torch", "numpy"])
@pytest.mark.parametrize("mmap", [False, True])
def test_a_compressed_folder_loads_whole(compressed, backend, mmap):
    folder, state = compressed
    assert_same_tree(tensorplay.load(folder, backend=backend, mmap=mmap), state)


def test_scan_reads_through_the_transform(compressed):
    folder, _ = compressed
    result = subprocess.run([sys.executable, "-m", "tensorplay", "scan", "--json", str(folder)],
                            capture_output=True, timeout=120)
    reports = json.loads(result.stdout)["files"]
    assert result.returncode == 0, reports
    distcp = next(r for r in reports if r["path"].endswith("__0_0.distcp"))
    assert distcp["verdict"] == "clean" and distcp["pickles"] >= 5


class _Touch:
    def __init__(self, path):
        self.path = str(path)

    def __reduce__(self):
        import os

        return os.system, (f"touch {self.path}",)


def test_a_hostile_item_behind_the_transform_is_refused_and_flagged(tmp_path):
    folder = tmp_path / "ckpt"
    _save(folder)
    marker = tmp_path / "ran"
    path = folder / "__0_0.distcp"
    start = path.stat().st_size
    import io

    hostile = io.BytesIO()
    torch.save(_Touch(marker), hostile)
    with open(path, "ab") as f:
        f.write(zstandard.ZstdCompressor().compress(hostile.getvalue()))
    metadata = _metadata(folder)
    index = next(i for i in metadata.storage_data if i.fqn == "step")
    metadata.storage_data[index] = _StorageInfo(relative_path="__0_0.distcp", offset=start,
                                                length=path.stat().st_size - start,
                                                transform_descriptors=["stream.zstd/1"])
    _rewrite(folder, metadata)
    with pytest.raises(CheckpointException, match="posix.system"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            dcp.load(_target(), storage_reader=tensorplay.dcp.FileSystemReader(str(folder)))
    with pytest.raises(tensorplay.UnsafeCheckpointError, match="system"):
        tensorplay.load(folder)
    result = subprocess.run([sys.executable, "-m", "tensorplay", "scan", "--json", str(folder)],
                            capture_output=True, timeout=120)
    assert result.returncode == 1
    flagged = [g["name"] for r in json.loads(result.stdout)["files"] for g in r["globals"] if g["dangerous"]]
    assert any(name.endswith("system") for name in flagged)
    assert not marker.exists()


def _retag(folder, descriptors) -> None:
    metadata = _metadata(folder)
    index = next(i for i in metadata.storage_data if i.fqn == "model.w")
    info = metadata.storage_data[index]
    metadata.storage_data[index] = _StorageInfo(relative_path=info.relative_path, offset=info.offset,
                                                length=info.length, transform_descriptors=descriptors)
    _rewrite(folder, metadata)


@pytest.mark.parametrize("descriptors", [["stream.zstd/2"], ["stream.gzip/1"], ["encrypt.aes/1"], [7]])
def test_a_transform_tensorplay_does_not_know_is_refused_by_name(tmp_path, descriptors):
    folder = tmp_path / "ckpt"
    _save(folder)
    _retag(folder, descriptors)
    with pytest.raises(tensorplay.UnsupportedCheckpointError, match=r"stream transform .*reads stream.zstd/1"):
        tensorplay.load(folder)


def test_a_corrupt_stream_is_malformed_and_names_the_item(tmp_path):
    folder = tmp_path / "ckpt"
    _save(folder)
    info = next(i for k, i in _metadata(folder).storage_data.items() if k.fqn == "model.w")
    path = folder / info.relative_path
    data = bytearray(path.read_bytes())
    data[info.offset + 20:info.offset + 60] = b"\xff" * 40
    path.write_bytes(bytes(data))
    where = re.escape(f"{info.relative_path} at byte {info.offset}")
    with pytest.raises(tensorplay.MalformedCheckpointError, match=rf"zstd stream.*{where}") as refused:
        tensorplay.load(folder)
    assert isinstance(refused.value, pickle.UnpicklingError)


def test_a_stream_that_decodes_past_the_limit_is_refused(compressed):
    folder, _ = compressed
    tensorplay.set_default_limits(max_inflated_bytes=1024)
    try:
        with pytest.raises(tensorplay.LimitExceededError, match="max_inflated_bytes"):
            tensorplay.load(folder)
    finally:
        tensorplay.set_default_limits(max_inflated_bytes=None)


def test_items_behind_a_transform_the_scanner_cannot_undo_are_never_clean(tmp_path):
    """Fail closed: bytes behind a transform no reader here knows (each item XORed)
    are neither archives nor a stream the scanner decodes, so the file is never CLEAN
    (here its first byte reads as an opcode, and that reading breaks: UNSAFE)."""
    folder = tmp_path / "ckpt"
    _save(folder)
    metadata = _metadata(folder)
    path = folder / "__0_0.distcp"
    data = bytearray(path.read_bytes())
    for index, info in list(metadata.storage_data.items()):
        span = slice(info.offset, info.offset + info.length)
        data[span] = bytes(b ^ 0x5A for b in data[span])
        metadata.storage_data[index] = _StorageInfo(relative_path=info.relative_path, offset=info.offset,
                                                    length=info.length, transform_descriptors=["stream.xor/1"])
    path.write_bytes(bytes(data))
    _rewrite(folder, metadata)
    result = subprocess.run([sys.executable, "-m", "tensorplay", "scan", "--json", str(folder)],
                            capture_output=True, timeout=120)
    reports = json.loads(result.stdout)["files"]
    assert result.returncode in (1, 2), reports
    assert next(r for r in reports if r["path"].endswith("__0_0.distcp"))["verdict"] in ("unsafe", "unreadable")
    with pytest.raises(tensorplay.UnsupportedCheckpointError, match="stream.xor/1"):
        tensorplay.load(folder)
