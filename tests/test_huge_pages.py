"""Eager loads ask for transparent huge pages on the fresh memory they copy
storages into (the 2 MiB-aligned pages of each), unless TENSORPLAY_HUGE_PAGES=0
or the kernel has THP `never`. The memory stays torch's own allocation, so the
tensors are ordinary: equal, resizable, shareable, and readable by DataLoader
workers. Each check runs in a fresh process: a process that once found huge
pages slow stops asking for them."""
from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys

import numpy as np
import pytest
import tensorplay

torch = pytest.importorskip("torch")

THP = pathlib.Path("/sys/kernel/mm/transparent_hugepage/enabled")
THP_ON = sys.platform == "linux" and THP.exists() and "[never]" not in THP.read_text()

# Where in the process the load's tensors lie, and which of those pages are
# advised (VmFlags "hg" in /proc/self/smaps).
PROBE = r"""
import json, os, sys
import numpy as np
import tensorplay

def advised(start, end):
    found, inside = 0, False
    with open("/proc/self/smaps") as f:
        for line in f:
            head = line.split()[0]
            if "-" in head and not head.endswith(":"):
                lo, hi = (int(x, 16) for x in head.split("-"))
                inside = lo < end and hi > start
            elif head == "VmFlags:" and inside and "hg" in line.split()[1:]:
                found += 1
    return found

path, backend = sys.argv[1], sys.argv[2]
loaded = tensorplay.load(path, backend=backend)
big = loaded["big"]
if backend == "torch":
    start, n = big.data_ptr(), big.untyped_storage().nbytes()
else:
    start, n = big.__array_interface__["data"][0], big.nbytes
print(json.dumps({"advised": advised(start, start + n), "status": tensorplay._core.huge_pages()}))
"""


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    path = tmp_path_factory.mktemp("huge") / "big.pt"
    g = torch.Generator().manual_seed(3)
    state = {"big": torch.randn(24 << 20, generator=g), "small": torch.arange(10.0),
             "half": torch.randn(3 << 20, generator=g).half()}
    torch.save(state, path)
    return path, state


def _probe(path, backend: str, **env: str) -> dict:
    result = subprocess.run([sys.executable, "-c", PROBE, str(path), backend], capture_output=True, text=True,
                            timeout=120, env={**os.environ, **env})
    assert result.returncode == 0, result.stderr[-2000:]
    return json.loads(result.stdout)


@pytest.mark.parametrize("backend", ["torch", "numpy"])
def test_a_big_storage_is_advised_unless_turned_off(checkpoint, backend):
    path, _ = checkpoint
    on = _probe(path, backend, TENSORPLAY_HUGE_PAGES="1")
    off = _probe(path, backend, TENSORPLAY_HUGE_PAGES="0")
    assert off == {"advised": 0, "status": "off: TENSORPLAY_HUGE_PAGES=0"}
    if THP_ON:
        assert on["status"].startswith("on: THP enabled="), on
        # The first chunk of a fresh process's first load is always advised.
        assert on["advised"] >= 1, on
    else:
        assert on["advised"] == 0 and on["status"].startswith("off"), on


def test_huge_page_tensors_are_ordinary_torch_tensors(checkpoint):
    path, state = checkpoint
    loaded = tensorplay.load(path)
    for key, value in state.items():
        assert torch.equal(loaded[key], value)
    big = loaded["big"]
    big.resize_(big.numel() + 1000)  # only a storage torch allocated can grow
    assert torch.equal(big[: state["big"].numel()], state["big"])
    shared = loaded["half"].share_memory_()
    assert shared.is_shared() and torch.equal(shared, state["half"])


class _Rows(torch.utils.data.Dataset):
    def __init__(self, tensor):
        self.tensor = tensor.view(-1, 1 << 16)

    def __len__(self):
        return self.tensor.shape[0]

    def __getitem__(self, i):
        return self.tensor[i].sum()


def test_dataloader_workers_read_huge_page_tensors(checkpoint):
    path, state = checkpoint
    big = tensorplay.load(path)["big"]
    loader = torch.utils.data.DataLoader(_Rows(big), batch_size=64, num_workers=2)
    sums = torch.cat(list(loader))
    assert torch.allclose(sums, state["big"].view(-1, 1 << 16).sum(1))


def test_the_numpy_backend_with_and_without_huge_pages_gives_the_same_arrays(checkpoint, monkeypatch):
    path, state = checkpoint
    arrays = tensorplay.load(path, backend="numpy")
    for key, value in state.items():
        np.testing.assert_array_equal(arrays[key], value.numpy())
    code = ("import sys, tensorplay, numpy as np\n"
            "a = tensorplay.load(sys.argv[1], backend='numpy')\n"
            "np.save(sys.argv[2], a['big'])\n")
    out = path.with_suffix(".npy")
    subprocess.run([sys.executable, "-c", code, str(path), str(out)], check=True, timeout=120,
                   env={**os.environ, "TENSORPLAY_HUGE_PAGES": "0"})
    np.testing.assert_array_equal(np.load(out), arrays["big"])
