"""Distributed checkpoints (torch.distributed.checkpoint) written by the real torch,
in one process and by a gloo job of two ranks, read back by tensorplay: through
``dcp.load`` with ``tensorplay.dcp.FileSystemReader`` (resharded onto four ranks,
and in part), by ``tensorplay.load(folder)`` with both backends, and by the
scanner. Hostile metadata and items are refused and flagged, and nothing runs."""
from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
import warnings

import dcp_workers
import numpy as np
import pytest
import tensorplay
import tensorplay.dcp
import torch
import torch.distributed.checkpoint as dcp
import torch.multiprocessing as mp
from http_servers import free_ports
from state_trees import assert_same_tree
from torch.distributed.checkpoint.api import CheckpointException


def _spawn(fn, world: int, *args) -> None:
    mp.spawn(fn, args=(world, free_ports(1)[0], *args), nprocs=world, join=True)


def _single_process_state() -> dict:
    g = torch.Generator().manual_seed(7)
    return {
        "model": {
            "w": torch.randn(5, 3, generator=g),
            "half": torch.randn(4, generator=g).half(),
            "bf16": torch.randn(3, 2, generator=g).bfloat16(),
            "i8": torch.randint(-100, 100, (6,), generator=g, dtype=torch.int8),
            "flags": torch.tensor([True, False, True]),
            "scalar": torch.tensor(3.5),
            "empty": torch.zeros(0, 4),
        },
        "layers": [torch.ones(2), torch.arange(3.0)],
        "step": 11,
        "meta": {"name": "run-1", "betas": (0.9, 0.999), "none": None},
    }


def _save_single(folder) -> dict:
    state = _single_process_state()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "assuming the intent is to save in a single process"
        dcp.save(state, checkpoint_id=str(folder))
    return state


@pytest.fixture(scope="module")
def single(tmp_path_factory):
    folder = tmp_path_factory.mktemp("dcp_single")
    return folder, _save_single(folder)


@pytest.fixture(scope="module")
def sharded(tmp_path_factory):
    folder = tmp_path_factory.mktemp("dcp_two_ranks")
    _spawn(dcp_workers.save, 2, str(folder))
    assert sorted(p.name for p in folder.iterdir()) == [".metadata", "__0_0.distcp", "__1_0.distcp"]
    return folder


# --- one process ------------------------------------------------------------------------

@pytest.mark.parametrize("backend", ["torch", "numpy"])
def test_a_folder_loads_as_it_was_saved(single, backend):
    folder, state = single
    assert_same_tree(tensorplay.load(folder, backend=backend), state)


def test_a_folder_loads_without_torch(single):
    folder, state = single
    code = ("import sys; sys.modules['torch'] = None\nimport json, tensorplay\n"
            f"sd = tensorplay.load({str(folder)!r})\n"
            "print(json.dumps({'w': sd['model']['w'].tolist(), 'step': sd['step'], 'name': sd['meta']['name'], "
            "'layers': [a.tolist() for a in sd['layers']]}))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120)
    got = json.loads(out.stdout)
    assert np.allclose(got["w"], state["model"]["w"].numpy()) and got["step"] == 11
    assert got["name"] == "run-1" and got["layers"] == [[1.0, 1.0], [0.0, 1.0, 2.0]]


def test_metadata_reads_as_torchs_reader_reads_it(single):
    folder, _ = single
    ours = tensorplay.dcp.read_metadata(folder)
    theirs = dcp.FileSystemReader(str(folder)).read_metadata()  # trusted here: the test wrote it
    assert type(ours) is type(theirs)
    assert ours.state_dict_metadata == theirs.state_dict_metadata
    assert ours.planner_data == theirs.planner_data
    assert ours.storage_data == theirs.storage_data
    assert tensorplay.load(folder / ".metadata").storage_data == theirs.storage_data


def test_a_metadata_file_that_cannot_be_read_is_an_os_error_naming_it(tmp_path):
    missing = tmp_path / "missing" / ".metadata"
    with pytest.raises(FileNotFoundError) as raised:
        tensorplay.dcp.read_metadata(missing)
    assert raised.value.filename == str(missing)
    (tmp_path / "dir" / ".metadata").mkdir(parents=True)
    with pytest.raises(IsADirectoryError) as raised:
        tensorplay.dcp.read_metadata(tmp_path / "dir")  # a folder whose .metadata is a folder
    assert raised.value.filename == str(tmp_path / "dir" / ".metadata")


def test_a_metadata_fifo_is_read_to_its_end_as_a_stream_and_capped(single, tmp_path):
    """A ``.metadata`` that is a FIFO (a process substitution, a pipe from a
    download) is opened as ``load`` opens a path: read to its end, at most
    ``max_inflated_bytes`` of it."""
    import threading

    folder, _ = single
    data = (folder / ".metadata").read_bytes()
    fifo = tmp_path / ".metadata"

    def read(limits=None):
        os.mkfifo(fifo)
        writer = threading.Thread(target=lambda: _write_ignoring_a_closed_reader(fifo, data))
        writer.start()
        try:
            return tensorplay.dcp.read_metadata(fifo, limits=limits)
        finally:
            writer.join(timeout=30)
            fifo.unlink()

    assert read().storage_data == tensorplay.dcp.read_metadata(folder).storage_data
    with pytest.raises(tensorplay.LimitExceededError, match="max_inflated_bytes"):
        read({"max_inflated_bytes": len(data) - 1})


def _write_ignoring_a_closed_reader(path, data: bytes) -> None:
    try:
        with open(path, "wb") as out:
            out.write(data)
    except BrokenPipeError:  # the reader stopped at its cap
        pass


def test_dcp_load_through_tensorplays_reader_equals_torchs(single):
    folder, state = single

    def target():
        empty = {k: torch.zeros_like(v) for k, v in state["model"].items()}
        return {"model": empty, "layers": [torch.zeros(2), torch.zeros(3)], "step": 0,
                "meta": {"name": "", "betas": (0.0, 0.0), "none": 1}}

    ours, theirs = target(), target()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        dcp.load(ours, storage_reader=tensorplay.dcp.FileSystemReader(str(folder)))
        dcp.load(theirs, storage_reader=dcp.FileSystemReader(str(folder)))
    assert_same_tree(ours, theirs)
    assert_same_tree(ours, state)


def test_the_reader_fills_whatever_target_the_planner_gives_as_torchs_does(tmp_path):
    """Chunks read straight into contiguous targets of their dtype and shape, and
    copied into every other kind: a transposed view, another dtype, one tensor
    that two keys share (the later write wins), and a planner that hands out
    scratch tensors and copies them at commit (so each must be full by then)."""
    from torch.distributed.checkpoint.default_planner import DefaultLoadPlanner

    g = torch.Generator().manual_seed(3)
    saved = {"w": torch.randn(5, 3, generator=g), "half": torch.randn(4, generator=g).half(),
             "a": torch.randn(6, generator=g), "b": torch.randn(6, generator=g), "n": torch.arange(7)}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        dcp.save(saved, checkpoint_id=str(tmp_path))

    class Scratch(DefaultLoadPlanner):
        def resolve_tensor(self, read_item):
            return torch.full(tuple(read_item.lengths), -1, dtype=super().resolve_tensor(read_item).dtype)

        def commit_tensor(self, read_item, tensor):
            super().resolve_tensor(read_item).copy_(tensor)

    def target():
        shared = torch.zeros(6)
        return {"w": torch.zeros(3, 5).t(), "half": torch.zeros(4), "a": shared, "b": shared,
                "n": torch.zeros(7, dtype=torch.int64)}

    for planner in (None, Scratch):
        ours, theirs = target(), target()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            dcp.load(ours, storage_reader=tensorplay.dcp.FileSystemReader(str(tmp_path)),
                     planner=planner and planner())
            dcp.load(theirs, storage_reader=dcp.FileSystemReader(str(tmp_path)), planner=planner and planner())
        assert_same_tree(ours, theirs)
        assert not ours["w"].is_contiguous() and torch.equal(ours["w"], saved["w"])
        assert ours["half"].dtype == torch.float32 and torch.equal(ours["half"], saved["half"].float())
        assert ours["a"] is ours["b"] and any(torch.equal(ours["a"], saved[k]) for k in "ab")
        assert torch.equal(ours["n"], saved["n"])


def test_inspect_and_convert_read_a_folder(single, tmp_path):
    folder, state = single
    info = tensorplay.inspect(folder)
    tensors = dict(info.tensors())
    assert info.format == "dcp"
    assert tensors["model.w"].shape == (5, 3) and tensors["model.w"].dtype == "float32"
    assert tensors["layers.1"].shape == (3,)
    out = tmp_path / "model.safetensors"
    subprocess.run([sys.executable, "-m", "tensorplay", "convert", str(folder), str(out)], check=True,
                   capture_output=True, timeout=120)
    from safetensors.torch import load_file

    converted = load_file(out)
    assert torch.equal(converted["model.w"], state["model"]["w"])
    assert torch.equal(converted["layers.1"], state["layers"][1])


def _scan(path) -> tuple[int, list[dict]]:
    result = subprocess.run([sys.executable, "-m", "tensorplay", "scan", "--json", str(path)],
                            capture_output=True, timeout=120)
    return result.returncode, json.loads(result.stdout)["files"]


def test_scan_calls_folders_torch_wrote_clean(single, sharded):
    for folder in (single[0], sharded):
        code, reports = _scan(folder)
        assert code == 0, reports
        assert {r["verdict"] for r in reports} == {"clean"}
        assert {os.path.basename(r["path"]) for r in reports} >= {".metadata", "__0_0.distcp"}
        distcp = next(r for r in reports if r["path"].endswith("__0_0.distcp"))
        assert distcp["pickles"] > 1  # every chunk's and item's archive, not the first only


# --- a gloo job ----------------------------------------------------------------------------

def test_two_ranks_saved_four_load_resharded_through_tensorplays_reader(sharded, tmp_path):
    ours, theirs = tmp_path / "ours.pt", tmp_path / "theirs.pt"
    _spawn(dcp_workers.load, 4, str(sharded), "tensorplay", "w,b,emb,step", str(ours))
    _spawn(dcp_workers.load, 4, str(sharded), "torch", "w,b,emb,step", str(theirs))
    got, expected = torch.load(ours), torch.load(theirs)
    assert_same_tree(got, expected)
    assert_same_tree(got["model"], dcp_workers.reference())
    assert got["step"] == 42 and got["config"] == {"lr": 0.5, "betas": (0.9, 0.99), "name": "run"}


def test_a_planner_that_loads_some_keys(sharded, tmp_path):
    out = tmp_path / "part.pt"
    _spawn(dcp_workers.load, 2, str(sharded), "tensorplay", "emb", str(out))
    got = torch.load(out)
    assert list(got["model"]) == ["emb"] and "step" not in got
    assert torch.equal(got["model"]["emb"], dcp_workers.reference()["emb"])


@pytest.mark.parametrize("backend", ["torch", "numpy"])
def test_a_sharded_folder_loads_whole_in_one_process(sharded, backend):
    loaded = tensorplay.load(sharded, backend=backend)
    assert_same_tree(loaded["model"], dcp_workers.reference())
    assert loaded["step"] == 42 and loaded["config"]["betas"] == (0.9, 0.99)


# --- hostile folders -------------------------------------------------------------------------

class _Touch:
    """Pickles as a call of os.system that creates the marker file."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return os.system, (f"touch {self.marker}",)


def _trusted_metadata(folder):
    return dcp.FileSystemReader(str(folder)).read_metadata()  # the test's own file


def _hostile_metadata(folder, marker):
    metadata = _trusted_metadata(folder)
    metadata.version = _Touch(marker)
    with open(folder / ".metadata", "wb") as f:
        pickle.dump(metadata, f)


def _replace_item(folder, fqn, obj) -> None:
    """``fqn``'s stored item replaced by ``torch.save(obj)``, appended to the first
    .distcp file, and the metadata pointed at it."""
    from torch.distributed.checkpoint.filesystem import _StorageInfo

    metadata = _trusted_metadata(folder)
    path = folder / "__0_0.distcp"
    start = path.stat().st_size
    with open(path, "ab") as f:
        torch.save(obj, f)
    length = path.stat().st_size - start
    index = next(i for i in metadata.storage_data if i.fqn == fqn)
    metadata.storage_data[index] = _StorageInfo(relative_path="__0_0.distcp", offset=start, length=length)
    with open(folder / ".metadata", "wb") as f:
        pickle.dump(metadata, f)


def _hostile_item(folder, marker):
    """The ``step`` item replaced by an archive whose pickle calls os.system."""
    _replace_item(folder, "step", _Touch(marker))


def _hostile_chunk(folder, marker):
    """A tensor chunk (``model.w``) replaced by an archive whose pickle calls os.system."""
    _replace_item(folder, "model.w", _Touch(marker))


@pytest.mark.parametrize("make", [_hostile_metadata, _hostile_item, _hostile_chunk], ids=["metadata", "item", "chunk"])
def test_hostile_folders_are_refused_and_flagged_and_nothing_runs(tmp_path, make):
    folder = tmp_path / "ckpt"
    state = _save_single(folder)
    marker = tmp_path / "ran"
    make(folder, marker)
    target = {"model": {k: torch.zeros_like(v) for k, v in state["model"].items()},
              "layers": [torch.zeros(2), torch.zeros(3)], "step": 0, "meta": {"name": "", "betas": (0, 0), "none": 1}}
    # dcp.load reports a reader's error inside its own CheckpointException.
    with pytest.raises(CheckpointException, match="Weights only load failed") as refused:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            dcp.load(target, storage_reader=tensorplay.dcp.FileSystemReader(str(folder)))
    assert "posix.system" in str(refused.value)
    with pytest.raises(tensorplay.UnsafeCheckpointError, match="system"):
        tensorplay.load(folder)
    code, reports = _scan(folder)
    assert code == 1
    flagged = [g for r in reports for g in r["globals"] if g["dangerous"]]
    assert any(g["name"].endswith("system") for g in flagged), reports
    assert not marker.exists()


@pytest.mark.parametrize("relative", ["../outside.distcp", "/etc/passwd", "sub/__0_0.distcp", ".."])
def test_an_item_outside_the_folder_is_never_opened(tmp_path, relative):
    """The metadata names each item's file: only a file of the folder is read."""
    from torch.distributed.checkpoint.filesystem import _StorageInfo

    folder = tmp_path / "ckpt"
    _save_single(folder)
    (tmp_path / "outside.distcp").write_bytes((folder / "__0_0.distcp").read_bytes())
    metadata = _trusted_metadata(folder)
    index = next(i for i in metadata.storage_data if i.fqn == "step")
    info = metadata.storage_data[index]
    metadata.storage_data[index] = _StorageInfo(relative_path=relative, offset=info.offset, length=info.length)
    with open(folder / ".metadata", "wb") as f:
        pickle.dump(metadata, f)
    with pytest.raises(tensorplay.MalformedCheckpointError, match="must name a file in its folder"):
        tensorplay.load(folder)
    with pytest.raises(CheckpointException, match="must name a file in its folder"):
        dcp.load({"step": 0}, storage_reader=tensorplay.dcp.FileSystemReader(str(folder)))


@pytest.mark.parametrize("relative", ["__0O0.distcp", "sub"])
def test_an_item_in_no_file_of_the_folder_is_a_malformed_checkpoint(tmp_path, relative):
    """Metadata naming a file the folder lacks (or a folder): torch's reader
    raises FileNotFoundError; tensorplay names the item's file instead."""
    from torch.distributed.checkpoint.filesystem import _StorageInfo

    folder = tmp_path / "ckpt"
    _save_single(folder)
    (folder / "sub").mkdir()
    metadata = _trusted_metadata(folder)
    for index, info in list(metadata.storage_data.items()):
        metadata.storage_data[index] = _StorageInfo(relative_path=relative, offset=info.offset, length=info.length)
    with open(folder / ".metadata", "wb") as f:
        pickle.dump(metadata, f)
    with pytest.raises(tensorplay.MalformedCheckpointError, match=f"metadata names '{relative}', which its folder"):
        tensorplay.load(folder)


@pytest.mark.parametrize("backend", ["torch", "numpy"])
def test_mmap_gives_views_of_tensors_saved_as_one_chunk(single, backend):
    folder, state = single
    loaded = tensorplay.load(folder, mmap=True, backend=backend)
    assert_same_tree(loaded, state)
    w = loaded["model"]["w"]
    if backend == "torch":
        assert not w.untyped_storage().resizable()  # memory of the map, not an allocation
    else:
        import mmap

        assert isinstance(w.base, mmap.mmap)
    w[0, 0] = 1234.0  # copy-on-write: neither the file nor a later load sees it
    again = tensorplay.load(folder, backend=backend)
    assert float(again["model"]["w"][0, 0]) == float(state["model"]["w"][0, 0])
    # Without mmap every tensor owns its memory.
    copied = tensorplay.load(folder, backend=backend)["model"]["w"]
    assert copied.untyped_storage().resizable() if backend == "torch" else copied.base is None


def test_metadata_of_the_wrong_shape_is_a_clear_error(tmp_path):
    folder = tmp_path / "ckpt"
    _save_single(folder)
    metadata = _trusted_metadata(folder)
    metadata.storage_data = ["not", "a", "map"]
    with open(folder / ".metadata", "wb") as f:
        pickle.dump(metadata, f)
    for backend in ("torch", "numpy"):
        with pytest.raises(tensorplay.MalformedCheckpointError, match="storage_data"):
            tensorplay.load(folder, backend=backend)


# --- chunks read ahead, one core call per file --------------------------------------------

@pytest.mark.parametrize("backend", ["torch", "numpy"])
@pytest.mark.parametrize("mmap", [False, True])
def test_a_chunk_viewing_part_of_its_storage_is_read_as_saved(tmp_path, backend, mmap):
    """A chunk whose tensor is a strided view into a bigger storage, and one whose
    bytes lie at an offset misaligned for its dtype in the .distcp file."""
    folder = tmp_path / "ckpt"
    state = _save_single(folder)
    strided = torch.arange(40.0).reshape(8, 5)[1:6, 1:4]
    assert strided.shape == state["model"]["w"].shape and not strided.is_contiguous()
    _replace_item(folder, "model.w", strided)
    (folder / "__0_0.distcp").open("ab").write(b"x")  # the next chunk starts at an odd byte
    _replace_item(folder, "layers.1", torch.tensor([7.0, 8.0, 9.0], dtype=torch.float64))
    expected = {**state, "model": {**state["model"], "w": strided.contiguous()},
                "layers": [state["layers"][0], torch.tensor([7.0, 8.0, 9.0], dtype=torch.float64)]}
    loaded = tensorplay.load(folder, backend=backend, mmap=mmap)
    assert_same_tree(loaded, expected)
    w = loaded["model"]["w"]
    if backend == "torch":
        assert tuple(w.stride()) == (5, 1) and w.storage_offset() == 6
    else:
        assert w.strides == (20, 4)
    target = {"model": {k: torch.zeros_like(v) for k, v in state["model"].items()},
              "layers": [torch.zeros(2), torch.zeros(3, dtype=torch.float64)], "step": 0,
              "meta": {"name": "", "betas": (0.0, 0.0), "none": 1}}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        dcp.load(target, storage_reader=tensorplay.dcp.FileSystemReader(str(folder)))
    assert_same_tree(target, expected)


def test_eager_chunks_own_memory_torch_can_resize(single):
    folder, _ = single
    loaded = tensorplay.load(folder)
    for t in [*loaded["model"].values(), *loaded["layers"]]:
        assert t.untyped_storage().resizable()


@pytest.mark.parametrize(("offset", "length", "match"), [
    (10**9, 100, "needs 100 bytes"),
    (0, 10**9, "needs 1000000000 bytes"),
    (-1, 100, "bad item span"),
    (0, 0, "bad item span"),
])
def test_a_chunk_span_outside_its_file_is_a_clear_error(tmp_path, offset, length, match):
    from torch.distributed.checkpoint.filesystem import _StorageInfo

    folder = tmp_path / "ckpt"
    _save_single(folder)
    metadata = _trusted_metadata(folder)
    index = next(i for i in metadata.storage_data if i.fqn == "model.w")
    metadata.storage_data[index] = _StorageInfo(relative_path="__0_0.distcp", offset=offset, length=length)
    with open(folder / ".metadata", "wb") as f:
        pickle.dump(metadata, f)
    with pytest.raises(tensorplay.MalformedCheckpointError, match=match):
        tensorplay.load(folder)


def test_read_ranges_fills_tensors_and_buffers_and_refuses_what_it_cannot_fill(tmp_path):
    from tensorplay import _core

    path = tmp_path / "bytes"
    path.write_bytes(bytes(range(256)))
    tensor, array = torch.zeros(4, dtype=torch.uint8), np.zeros(3, dtype=np.uint8)
    _core.read_ranges(str(path), [(10, tensor), (200, array)], name="bytes")
    assert tensor.tolist() == [10, 11, 12, 13] and array.tolist() == [200, 201, 202]
    read_only = np.zeros(3, dtype=np.uint8)
    read_only.flags.writeable = False
    for target in (torch.zeros(4, 4, dtype=torch.uint8).t(), read_only, 7):
        with pytest.raises(ValueError, match="read_ranges needs writable contiguous"):
            _core.read_ranges(str(path), [(0, target)], name="bytes")
