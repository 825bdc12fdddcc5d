"""A service that loads file after file in one process: a small checkpoint's
load leaves the heap it freed for the next load to reuse (giving it back to the
system made every next load fault each 4 KiB page of its storages again), and
a big one gives its scaffolding back, so memory stays bounded over many loads.
Each case runs in a fresh process, where page faults and RSS are its own."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")

REPEAT = r"""
import gc, json, resource, sys
import torch  # imported before the first load, as torch.load needs it to be
import tensorplay

def rss_kib():
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))

paths, times = sys.argv[1].split(","), int(sys.argv[2])
if sys.argv[3] == "torch.load":
    load = lambda p: torch.load(p, weights_only=True)
else:
    load = lambda p: tensorplay.load(p, backend=sys.argv[3])
faults, held, freed = [], [], []
for i in range(times):
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    loaded = load(paths[i % len(paths)])
    faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
    held.append(rss_kib())
    del loaded
    gc.collect()
    freed.append(rss_kib())
print(json.dumps({"faults": faults, "held": held, "freed": freed}))
"""


def _repeat(path, times: int, backend: str = "torch") -> dict:
    """Load ``path`` (or each of a list of paths, round-robin) ``times`` times."""
    paths = ",".join(map(str, path)) if isinstance(path, list) else str(path)
    result = subprocess.run([sys.executable, "-c", REPEAT, paths, str(times), backend], capture_output=True,
                            text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-2000:]
    return json.loads(result.stdout)


@pytest.mark.parametrize("backend", ["torch", "numpy"])
@pytest.mark.parametrize("mib", [4, 16])
@pytest.mark.parametrize("files", [1, 5])
def test_a_load_reuses_the_memory_of_the_last_loads_storage(tmp_path, backend, mib, files):
    # The same file again (a service) or a dataset's next sample of the same size
    # (a DataLoader): the storage freed by the last load is the block the next one
    # gets. The second load is glibc's first from the heap (it mapped the first
    # load's storage and raised its mmap threshold when that was freed), as
    # torch's is. Two causes made loads 2 to about 6 fault in every page anew:
    # the numpy backend's storages had mappings of their own, unmapped when
    # dropped; and tensorplay's own Rust allocations, made before a load's
    # storages on the same heap, carved up the block the last storage had freed
    # (they now have a heap of their own, bindings/src/rust_heap.rs).
    g = torch.Generator().manual_seed(mib)
    paths = []
    for i in range(files):
        paths.append(tmp_path / f"{i}.pt")
        torch.save({"w": torch.randn(mib << 18, generator=g)}, paths[-1])
    faults = _repeat(paths, 15 if backend == "numpy" else 40, backend)["faults"]
    pages = (mib << 20) // 4096
    fresh = [i for i, n in enumerate(faults) if i >= 2 and n >= pages // 8]
    if backend == "numpy":
        assert len(fresh) <= 1, faults
    else:
        # torch allocates each storage itself (posix_memalign), on the heap the
        # Python objects of the process share: where the imports left that heap,
        # a burst of loads after the second can still take fresh memory before
        # it settles. Measured on the CI's installed build: up to 7 fresh loads,
        # all before the tenth, none after; the benchmark's processes take none
        # from the third load (benches/RESULTS.md).
        assert len(fresh) <= 8 and all(i < 10 for i in fresh), faults


FORK_WHILE_LOADING = r"""
import os, sys, threading
import tensorplay

path, stop = sys.argv[1], threading.Event()
tensorplay.load(path, backend="numpy")  # its lazy imports done: a fork amid an import hangs in any case

def load_again_and_again():
    while not stop.is_set():
        tensorplay.load(path, backend="numpy")

threading.Thread(target=load_again_and_again, daemon=True).start()
for _ in range(60):
    pid = os.fork()
    if pid == 0:  # the child allocates on the heap the parent's thread was using
        tensorplay.load(path, backend="numpy")
        os._exit(0)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0, status
stop.set()
print("ok")
"""


def test_children_forked_while_a_thread_loads_can_load(tmp_path):
    # A DataLoader forks its workers while other threads may be inside the
    # core, holding the lock of its Rust heap: each child must still allocate.
    path = tmp_path / "many.pt"
    torch.save({f"t{i}": torch.randn(4096) for i in range(64)}, path)
    result = subprocess.run([sys.executable, "-c", FORK_WHILE_LOADING, str(path)], capture_output=True,
                            text=True, timeout=300)
    assert result.returncode == 0 and result.stdout.strip() == "ok", result.stderr[-2000:]


def test_memory_stays_bounded_over_fifty_loads_of_fifty_thousand_tensors(tmp_path):
    path = tmp_path / "many.pt"
    torch.save({f"t{i}": torch.tensor([float(i)]) for i in range(50_000)}, path)
    rss = _repeat(path, 50)  # KiB
    # Measured while a load's result is held, where a leaked parse would add
    # about 16 MiB a load (800 MiB over 50). The heap settles over the first
    # loads (20 MiB by load 3 in one CI run, 25 MiB at load 2 in another), so
    # growth counts from the second.
    held = rss["held"]
    assert held[-1] - held[1] < 32 << 10, held
    assert held[-1] - held[25] < 4 << 10, held
    # Once the result is dropped, glibc keeps the freed tensors (about 19 MiB of
    # heap top here) on some loads and not on others, by its own thresholds; the
    # next load reuses them, so this only swings, it never climbs.
    freed = rss["freed"]
    assert max(freed) - min(freed) < 32 << 10, freed
