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
import tensorplay

def rss_kib():
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))

paths, times = sys.argv[1].split(","), int(sys.argv[2])
faults, held, freed = [], [], []
for i in range(times):
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    loaded = tensorplay.load(paths[i % len(paths)], backend=sys.argv[3])
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


def test_a_small_checkpoint_loaded_again_reuses_the_memory_of_the_last_load(tmp_path):
    path = tmp_path / "4mib.pt"
    torch.save({"w": torch.randn(1 << 20)}, path)
    faults = _repeat(path, 40)["faults"]
    pages = (4 << 20) // 4096
    # Giving freed memory back after each load made every load fault in all
    # 1,024 pages of its storage. Kept, it is reused on most loads, not all:
    # torch allocates a storage with posix_memalign, and glibc caches the few
    # bytes of alignment slack it cuts off after the block in a per-size list
    # whose blocks never merge, so a freed storage sometimes cannot merge into
    # the free space after it and is too small, by that slack, for the next
    # one. Over 80 runs of 40 loads, 5 to 14 of the 38 loads after the first
    # two faulted in fresh pages. (torch.load's own allocations happen to
    # leave room here: in 8 runs it reused on every load from the third on.)
    fresh = [n for n in faults[2:] if n >= pages // 8]
    assert len(fresh) < len(faults[2:]) // 2, faults


@pytest.mark.parametrize("mib", [4, 16])
@pytest.mark.parametrize("files", [1, 5])
def test_the_numpy_backend_reuses_the_last_loads_storage(tmp_path, mib, files):
    # A big storage used to get a mapping of its own, unmapped when dropped:
    # every load faulted in each of its pages. Its heap block now serves the
    # next load of the same size (the same file, or a dataset's next sample).
    # The second load is glibc's first from the heap (it mapped the first load's
    # storage and raised its mmap threshold when that was freed), as torch's is.
    g = torch.Generator().manual_seed(mib)
    paths = []
    for i in range(files):
        paths.append(tmp_path / f"{i}.pt")
        torch.save({"w": torch.randn(mib << 18, generator=g)}, paths[-1])
    faults = _repeat(paths, 15, "numpy")["faults"]
    pages = (mib << 20) // 4096
    fresh = [n for n in faults[2:] if n >= pages // 8]
    assert len(fresh) <= 1, faults


def test_memory_stays_bounded_over_fifty_loads_of_fifty_thousand_tensors(tmp_path):
    path = tmp_path / "many.pt"
    torch.save({f"t{i}": torch.tensor([float(i)]) for i in range(50_000)}, path)
    rss = _repeat(path, 50)  # KiB
    # Measured while a load's result is held, where a leaked parse would add
    # about 16 MiB a load (800 MiB over 50). A fresh environment's first loads
    # settle once (20 MiB by load 3 in one CI run).
    held = rss["held"]
    assert held[-1] - held[0] < 32 << 10, held
    assert held[-1] - held[25] < 4 << 10, held
    # Once the result is dropped, glibc keeps the freed tensors (about 19 MiB of
    # heap top here) on some loads and not on others, by its own thresholds; the
    # next load reuses them, so this only swings, it never climbs.
    freed = rss["freed"]
    assert max(freed) - min(freed) < 32 << 10, freed
