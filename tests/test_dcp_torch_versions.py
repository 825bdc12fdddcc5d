"""DCP folders as torch 2.13, 2.14 and 2.15 write them (tests/fixtures/dcp/, written by
make_dcp_fixtures.py under each release: one process, two gloo ranks, and the ZStandard
stream transform), read with the torch these tests pin: by ``tensorplay.load`` in both
backends, by ``dcp.load`` through tensorplay's reader, by ``inspect``, and by the scanner.

torch 2.15 pickles ``TensorProperties`` with a sixth field (``strides``) that older
torch's class cannot take: torch 2.13's own reader fails on such a folder, tensorplay's
reads it."""
from __future__ import annotations

import json
import pickle
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import tensorplay
import tensorplay.dcp
import torch
import torch.distributed.checkpoint as dcp
from make_dcp_fixtures import ranks_state, single_state
from state_trees import assert_same_tree

ROOT = Path(__file__).resolve().parent / "fixtures" / "dcp"
RELEASES = ["2.13.0", "2.14.1", "2.15.0"]
STATES = {"single": single_state, "zstd": single_state, "two_ranks": ranks_state}
FOLDERS = [pytest.param(ROOT / f"torch-{release}" / kind, STATES[kind], id=f"{release}-{kind}")
           for release in RELEASES for kind in STATES]


def test_every_release_wrote_every_kind():
    for release in RELEASES:
        for kind in STATES:
            folder = ROOT / f"torch-{release}" / kind
            assert (folder / ".metadata").is_file(), folder
            assert list(folder.glob("*.distcp")), folder


@pytest.mark.parametrize("backend", ["torch", "numpy"])
@pytest.mark.parametrize(("folder", "state"), FOLDERS)
def test_a_folder_loads_whole(folder, state, backend):
    assert_same_tree(tensorplay.load(folder, backend=backend), state())


def _zeros_like(state):
    if isinstance(state, torch.Tensor):
        return torch.zeros_like(state)
    if isinstance(state, dict):
        return {k: _zeros_like(v) for k, v in state.items()}
    if isinstance(state, list):
        return [_zeros_like(v) for v in state]
    return state


@pytest.mark.parametrize(("folder", "state"), FOLDERS)
def test_dcp_load_through_tensorplays_reader(folder, state):
    target = _zeros_like(state())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        dcp.load(target, storage_reader=tensorplay.dcp.FileSystemReader(str(folder)))
    assert_same_tree(target, state())


def test_torch_2_15_metadata_carries_strides_that_older_torch_cannot_read():
    folder = ROOT / "torch-2.15.0" / "single"
    metadata = tensorplay.dcp.read_metadata(folder)
    properties = metadata.state_dict_metadata["model.w"].properties
    assert properties.strides == (3, 1) and properties.dtype == torch.float32
    assert isinstance(properties, torch.distributed.checkpoint.metadata.TensorProperties)
    assert pickle.loads(pickle.dumps(properties)).dtype == torch.float32  # metadata crosses ranks pickled
    assert tensorplay.dcp.read_metadata(folder, backend="numpy").state_dict_metadata["model.w"].properties.strides \
        == (3, 1)
    if not hasattr(torch.distributed.checkpoint.metadata.TensorProperties(), "strides"):
        with pytest.raises(ValueError, match="too many values to unpack"):
            dcp.FileSystemReader(str(folder)).read_metadata()  # the test's own file: trusted


@pytest.mark.parametrize(("folder", "state"), FOLDERS)
def test_inspect_and_scan_read_a_folder(folder, state):
    tensors = dict(tensorplay.inspect(folder).tensors())
    assert tensors["model.w"].shape == tuple(state()["model"]["w"].shape)
    result = subprocess.run([sys.executable, "-m", "tensorplay", "scan", "--json", str(folder)],
                            capture_output=True, timeout=120)
    reports = json.loads(result.stdout)["files"]
    assert result.returncode == 0, reports
    assert {r["verdict"] for r in reports} == {"clean"}
