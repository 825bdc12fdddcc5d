"""tensorplay convert: checkpoints to safetensors, without torch and without running code."""
from __future__ import annotations

import json
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
    try:
        convert(case["path"], out)
    except Exception as e:  # noqa: BLE001 - safetensors has no complex128
        assert "complex128" in str(e) or "Unknown dtype" in str(e)
        return
    converted = load_file(out)
    reference = _flat_torch(torch.load(case["path"], weights_only=False))
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
    assert refused.returncode != 0 and "exists" in refused.stderr and out.read_bytes() == b"precious"
    done = subprocess.run([*cmd, "--force"], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    from safetensors.numpy import load_file

    assert load_file(out)["a"].tolist() == [1.0, 2.0]


def test_flattening_uses_dotted_keys():
    tensors, others = {}, {}
    _flatten({"a": {"b": np.ones(1), "c": [np.zeros(1), 3]}, "d": "x"}, "", tensors, others)
    assert list(tensors) == ["a.b", "a.c.0"] and others == {"a.c.1": 3, "d": "x"}
