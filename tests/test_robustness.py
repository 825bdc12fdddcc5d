"""Hostile-input properties at the Python level: huge and deep structures load
without overflowing any stack, memory stays linear in the input, and loads, scans
and saves run concurrently with per-thread allowlists."""
from __future__ import annotations

import io
import re
import subprocess
import sys
import threading
import zipfile

import fixture_classes
import numpy as np
import pytest
import tensorplay
from conftest import TORCH_FIXTURES, has_torch
from tensorplay import scanner

needs_torch = pytest.mark.skipif(not has_torch(), reason="torch not installed")


def _checkpoint(pickled: bytes) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr("archive/data.pkl", pickled)
        z.writestr("archive/version", b"3\n")
    return buf.getvalue()


def test_a_state_dict_with_a_million_keys_loads_with_the_default_limits(tmp_path):
    """One million tensors (views of one storage), as a huge model's state dict."""
    base = np.arange(1_000_000, dtype=np.float32)
    state = {f"layers.{i}.w": base[i:i + 1] for i in range(1_000_000)}
    path = tmp_path / "big.pt"
    tensorplay.save(state, path)
    del state
    loaded = tensorplay.load(path, backend="numpy")
    assert len(loaded) == 1_000_000
    assert loaded["layers.999999.w"].tolist() == [999999.0]
    assert loaded["layers.0.w"].base is loaded["layers.1.w"].base  # one storage, a million views


@pytest.mark.parametrize("kind", ["list", "tuple", "dict"])
def test_a_million_levels_of_nesting_load_without_overflowing_any_stack(kind):
    depth = 1_000_000
    if kind == "list":
        body = b"]" * depth + b"a" * (depth - 1)
    elif kind == "tuple":
        body = b"N" + b"\x85" * depth
    else:  # {0: {0: {...}}}
        body = b"}" + b"K\x00}" * (depth - 1) + b"s" * (depth - 1)
    value = tensorplay.load(io.BytesIO(_checkpoint(b"\x80\x02" + body + b".")), backend="numpy")
    levels = 0
    while value:  # the innermost is an empty list or dict, or None
        value = value[0]
        levels += 1
    assert levels == (depth if kind == "tuple" else depth - 1)


_HOSTILE = {
    # One list referenced 2**k times through k levels of tuples.
    "memo_bomb": lambda k: b"]q\x00" + b"2\x86" * k,
    # One big string encoded many times: shared, not copied.
    "encode_repeats": lambda k: b"X" + (k * 1000).to_bytes(4, "little") + b"x" * (k * 1000) + b"q\x00(" +
    b"c_codecs\nencode\nh\x00X\x06\x00\x00\x00latin1\x86R" * k + b"t",
    # A list copied into many sets: copies are paid for, then refused.
    "snapshot_repeats": lambda k: b"](" + b"K\x01" * k + b"eq\x00(" + b"c__builtin__\nset\nh\x00\x85R" * k + b"t",
}

_MEASURE = """
import io, resource, sys, zipfile
import tensorplay
data = open(sys.argv[1], "rb").read()
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
try:
    tensorplay.load(io.BytesIO(data), backend="numpy")
except tensorplay.CheckpointError:
    pass
after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print((after - before) * 1024)
"""


@pytest.mark.parametrize("family", sorted(_HOSTILE))
def test_peak_memory_stays_linear_in_the_input(family, tmp_path):
    """ru_maxrss growth of a load, for hostile inputs of growing size n, stays below
    a constant times n plus a fixed allowance."""
    for k in (40, 4000):
        pickled = b"\x80\x02" + _HOSTILE[family](k) + b"."
        path = tmp_path / f"{family}-{k}.pt"
        path.write_bytes(_checkpoint(pickled))
        out = subprocess.run([sys.executable, "-c", _MEASURE, str(path)], capture_output=True, text=True, check=True)
        growth = int(out.stdout.strip())
        n = len(pickled)
        assert growth <= 400 * n + (48 << 20), f"{family} k={k}: {growth} bytes for a {n}-byte pickle"


@pytest.mark.parametrize("backend", ["numpy", pytest.param("torch", marks=needs_torch)])
def test_eight_threads_load_scan_and_save_at_once_with_their_own_allowlists(backend, tmp_path):
    errors: list[BaseException] = []
    barrier = threading.Barrier(8, timeout=60)
    custom = TORCH_FIXTURES / "custom_class.pt"
    views = TORCH_FIXTURES / "seed_views.pt"

    def as_list(t):
        return t.tolist()

    def worker(i: int) -> None:
        try:
            barrier.wait()
            for round_ in range(5):
                if i % 4 == 0:
                    with tensorplay.safe_globals([fixture_classes.Point]):
                        assert tensorplay.load(custom, backend=backend)["p"] == fixture_classes.Point(1, 2)
                elif i % 4 == 1:
                    with pytest.raises(tensorplay.UnsafeCheckpointError):
                        tensorplay.load(custom, backend=backend)
                elif i % 4 == 2:
                    numbers, evens = tensorplay.load(views, backend=backend, mmap=bool(round_ % 2))
                    assert as_list(numbers) == list(range(1, 10)) and as_list(evens) == [2, 4, 6, 8]
                    assert scanner.scan(custom).globals == ("fixture_classes.Point",)
                else:
                    path = tmp_path / f"t{i}-{round_}.pt"
                    tensorplay.save({"w": np.full(1000, i, dtype=np.float32)}, path)
                    assert tensorplay.load(path, backend=backend)["w"].tolist() == [float(i)] * 1000
        except BaseException as e:  # noqa: BLE001 - collected and re-raised in the main thread
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors


def _mapped_kib(path) -> int:
    """Resident KiB of this process's mappings of `path` (from /proc/self/smaps)."""
    total, inside = 0, False
    for line in open("/proc/self/smaps").read().splitlines():
        if re.match(r"[0-9a-f]+-[0-9a-f]+ ", line):  # a mapping's first line
            inside = line.rstrip().endswith(str(path))
        elif inside and line.startswith("Rss:"):
            total += int(line.split()[1])
    return total


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/smaps")
@pytest.mark.parametrize("backend", ["numpy", pytest.param("torch", marks=needs_torch)])
def test_an_mmap_load_maps_the_pickle_and_none_of_the_payload(backend, tmp_path):
    """Local headers are read from the file, not through the map: a fault on the
    map would keep the page (with large page-cache folios, up to 2 MiB of
    payload) around each of the 64 headers resident in this process."""
    path = tmp_path / "big.pt"
    tensorplay.save({f"w{i}": np.full(1 << 18, i, dtype=np.float32) for i in range(64)}, path)
    loaded = tensorplay.load(path, mmap=True, backend=backend)
    pickle_kib = zipfile.ZipFile(path).getinfo("big/data.pkl").file_size // 1024
    assert _mapped_kib(path) <= 2048 + pickle_kib + 64
    assert float(loaded["w63"][0]) == 63.0  # and the payload is there when touched
