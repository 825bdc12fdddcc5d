"""Every real checkpoint of the fixture manifest, in both backends, with mmap on
and off, compared with what torch.load returned for it."""
from __future__ import annotations

import importlib

import pytest
import tensorplay
from conftest import has_torch, torch_manifest
from expectations import check_numpy_result, check_torch_result, numpy_cannot_hold

# Files torch loads but must not: tensorplay refuses them (test_load.py checks how).
TORCH_IS_WRONG = {"sparse_coo_out_of_range"}
PENDING: dict[str, str] = {}
CASES = [pytest.param(c, id=c["name"], marks=pytest.mark.xfail(strict=True, reason=PENDING[c["name"]]))
         if c["name"] in PENDING else pytest.param(c, id=c["name"])
         for c in torch_manifest() if c["name"] not in TORCH_IS_WRONG]
BACKENDS = ["numpy", pytest.param("torch", marks=pytest.mark.skipif(not has_torch(), reason="torch not installed"))]


def _allowlisted(case):
    module = importlib.import_module("fixture_classes")
    return [getattr(module, name.rsplit(".", 1)[1]) for name in case["needs_safe_globals"]]


def _refused_by_weights_only(case) -> bool:
    """Files torch refuses for a reason tensorplay shares: globals outside the allowlist."""
    return case["name"] == "whole_module"



def _compare_numpy(case) -> bool:
    """Bare storages have no numpy description in the manifest; test_load.py covers them."""
    return case["name"] != "bare_storages"


@pytest.mark.parametrize("mmap", [False, True], ids=["copy", "mmap"])
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("case", CASES)
def test_fixture_loads_as_torch_loaded_it(case, backend, mmap, monkeypatch):
    path = case["path"]
    if case["name"] == "no_byteorder_big":
        from tensorplay.serialization import LoadEndianness

        monkeypatch.setattr(tensorplay.serialization.config.load, "endianness", LoadEndianness.BIG)
    if _refused_by_weights_only(case):
        with pytest.raises(tensorplay.UnsafeCheckpointError, match="Unsupported global"):
            tensorplay.load(path, backend=backend, mmap=mmap)
        return
    if case["needs_safe_globals"]:
        with pytest.raises(tensorplay.UnsafeCheckpointError, match="fixture_classes"):
            tensorplay.load(path, backend=backend, mmap=mmap)
        with tensorplay.safe_globals(_allowlisted(case)):
            obj = _load(path, case, backend, mmap)
    else:
        obj = _load(path, case, backend, mmap)
    if obj is None:
        return
    if backend == "torch":
        check_torch_result(obj, case["expected"])
    elif _compare_numpy(case):
        check_numpy_result(obj, case["expected"])


def _load(path, case, backend, mmap):
    if backend == "numpy" and numpy_cannot_hold(case["expected"]):
        with pytest.raises(tensorplay.UnsupportedCheckpointError, match="numpy"):
            tensorplay.load(path, backend=backend, mmap=mmap)
        return None
    return tensorplay.load(path, backend=backend, mmap=mmap)
