"""tensorplay convert: checkpoints to safetensors, without torch and without running code."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest
from conftest import TORCH_FIXTURES, has_torch, torch_manifest
from expectations import numpy_cannot_hold
from tensorplay._convert import _flatten, convert

CASES = [c for c in torch_manifest() if not c["needs_safe_globals"] and not numpy_cannot_hold(c["expected"])
         and c["name"] not in ("whole_module", "no_byteorder_big", "meta_tensor", "bare_storages")]


def _flat_torch(obj):
    tensors, others = {}, {}
    import torch

    def walk(path, value):
        if isinstance(value, torch.Tensor):
            tensors[path] = value
        elif isinstance(value, dict):
            for k, v in value.items():
                walk(f"{path}.{k}" if path else str(k), v)
        elif isinstance(value, (list, tuple)) and not hasattr(value, "_fields"):
            for i, v in enumerate(value):
                walk(f"{path}.{i}" if path else str(i), v)
        elif isinstance(value, np.ndarray):
            tensors[path] = torch.from_numpy(value)
        else:
            others[path] = value

    walk("", obj)
    return tensors


@pytest.mark.skipif(not has_torch(), reason="the reference values come from torch.load")
@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_converted_files_load_to_torchs_tensors(case, tmp_path):
    import torch
    from safetensors.torch import load_file

    out = tmp_path / "out.safetensors"
    reference = _flat_torch(torch.load(case["path"], weights_only=False))
    unstorable = [name for name, tensor in reference.items() if tensor.dtype in (torch.complex128, torch.complex32)]
    if unstorable:
        with pytest.raises(ValueError, match=f"'{unstorable[0]}' is a complex.* safetensors cannot store"):
            convert(case["path"], out)
        assert not out.exists()
        return
    convert(case["path"], out)
    converted = load_file(out)
    from safetensors import safe_open

    shared = safe_open(out, "np").metadata()
    for name, tensor in reference.items():
        stored = converted.get(name, converted.get(shared.get(name, "")))
        assert stored is not None, name
        assert stored.dtype == tensor.dtype and torch.equal(stored, tensor.detach().contiguous()), name


def test_tied_weights_are_written_once_and_named_in_the_metadata(tmp_path):
    from safetensors import safe_open

    out = tmp_path / "tied.safetensors"
    summary = convert(TORCH_FIXTURES / "shared_storage_tied.pt", out)
    assert summary == {"tensors": 4, "shared": 1, "other_values": 0}
    with safe_open(out, "np") as f:
        assert sorted(f.keys()) == ["col", "embed.weight", "first_row", "other"]
        assert f.metadata() == {"format": "pt", "lm_head.weight": "embed.weight"}


def test_non_tensor_values_are_reported_or_kept_as_json(tmp_path):
    from safetensors import safe_open

    lines = []
    convert(TORCH_FIXTURES / "training_checkpoint.pt", tmp_path / "a.safetensors", report=lines.append)
    assert any("epoch" in line for line in lines)
    convert(TORCH_FIXTURES / "training_checkpoint.pt", tmp_path / "b.safetensors", metadata=True)
    with safe_open(tmp_path / "b.safetensors", "np") as f:
        meta = f.metadata()
    assert json.loads(meta["epoch"]) == 2 and json.loads(meta["loss"]) == 0.25


def test_the_command_refuses_to_overwrite_without_force(tmp_path):
    out = tmp_path / "x.safetensors"
    out.write_bytes(b"precious")
    cmd = [sys.executable, "-m", "tensorplay", "convert", str(TORCH_FIXTURES / "seed_tensor_dict.pt"), str(out)]
    refused = subprocess.run(cmd, capture_output=True, text=True)
    assert refused.returncode == 2 and "FileExistsError" in refused.stderr and out.read_bytes() == b"precious"
    assert "Traceback" not in refused.stderr
    done = subprocess.run([*cmd, "--force"], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    from safetensors.numpy import load_file

    assert load_file(out)["a"].tolist() == [1.0, 2.0]


needs_torch = pytest.mark.skipif(not has_torch(), reason="torch writes the checkpoint")


@needs_torch
@pytest.mark.parametrize("tree", ["nested", "int_and_str"])
def test_keys_that_flatten_to_one_name_are_refused_not_overwritten(tmp_path, tree):
    import torch

    clash = {"a.b": torch.ones(1), "a": {"b": torch.zeros(1)}} if tree == "nested" else \
        {1: torch.ones(1), "1": torch.zeros(1)}
    torch.save(clash, tmp_path / "clash.pt")
    with pytest.raises(ValueError, match="flatten to the key '(a.b|1)'"):
        convert(tmp_path / "clash.pt", tmp_path / "out.safetensors")
    assert not (tmp_path / "out.safetensors").exists()


@needs_torch
def test_a_tensor_named_format_is_written_whole_and_the_metadata_still_says_pt(tmp_path):
    import torch
    from safetensors import safe_open

    weight = torch.arange(6.0).reshape(2, 3)
    torch.save({"w": weight, "format": weight, "tied": weight}, tmp_path / "tied.pt")
    convert(tmp_path / "tied.pt", tmp_path / "out.safetensors")
    with safe_open(tmp_path / "out.safetensors", "pt") as f:
        assert f.metadata() == {"format": "pt", "tied": "w"}
        assert sorted(f.keys()) == ["format", "w"] and torch.equal(f.get_tensor("format"), weight)
    torch.save({"w": weight, "format": "mine"}, tmp_path / "named.pt")
    with pytest.raises(ValueError, match="'format' would overwrite the metadata"):
        convert(tmp_path / "named.pt", tmp_path / "named.safetensors", metadata=True)


def test_a_failed_conversion_leaves_the_old_target_and_a_symlink_is_followed(tmp_path, monkeypatch):
    import safetensors.numpy

    (tmp_path / "out").mkdir()
    target = tmp_path / "out" / "model.safetensors"
    target.write_bytes(b"precious")
    link = tmp_path / "latest.safetensors"
    link.symlink_to(target)

    def fail_halfway(tensors, filename, metadata=None):
        with open(filename, "wb") as f:
            f.write(b"half")
        raise OSError("disk full")

    real = safetensors.numpy.save_file
    monkeypatch.setattr(safetensors.numpy, "save_file", fail_halfway)
    with pytest.raises(OSError, match="disk full"):
        convert(TORCH_FIXTURES / "seed_tensor_dict.pt", link, force=True)
    assert target.read_bytes() == b"precious" and os.listdir(tmp_path / "out") == ["model.safetensors"]
    monkeypatch.setattr(safetensors.numpy, "save_file", real)
    convert(TORCH_FIXTURES / "seed_tensor_dict.pt", link, force=True)
    assert link.is_symlink() and safetensors.numpy.load_file(target)["b"].tolist() == [3.0, 4.0]


def test_the_command_exits_1_for_an_unsafe_checkpoint_and_writes_nothing(tmp_path):
    out = tmp_path / "x.safetensors"
    malicious = TORCH_FIXTURES.parent.parent / "malicious" / "files" / "global_reduce_os_system.pt"
    cmd = [sys.executable, "-m", "tensorplay", "convert", str(malicious), str(out)]
    refused = subprocess.run(cmd, capture_output=True, text=True)
    assert refused.returncode == 1 and "UnsafeCheckpointError" in refused.stderr and "os.system" in refused.stderr
    assert not out.exists() and list(tmp_path.iterdir()) == []


def test_flattening_uses_dotted_keys():
    tensors, others = {}, {}
    _flatten({"a": {"b": np.ones(1), "c": [np.zeros(1), 3]}, "d": "x"}, "", tensors, others)
    assert list(tensors) == ["a.b", "a.c.0"] and others == {"a.c.1": 3, "d": "x"}
