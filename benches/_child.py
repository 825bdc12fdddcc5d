"""One measurement process for run.py: ``python benches/_child.py JOBS_JSON``.

JOBS_JSON is a list of jobs ``{"op": ID, "path": FILE, "payload": BYTES}`` (FILE is a
folder for the DCP operations). The child
imports what the operations need first, so import time is never charged; then, for
each job, it resets the peak-RSS counter, times the operation, and prints one JSON
line with the wall time and memory. run.py starts a fresh child for every run of
every operation (only the CI smoke mode batches several jobs into one child).

The process ends with os._exit: interpreter teardown is not part of any operation,
and skipping it keeps the runs short.
"""
from __future__ import annotations

import ctypes
import gc
import json
import mmap
import os
import resource
import statistics
import sys
import time
import warnings
from pathlib import Path
from typing import Any, NamedTuple

# Which modules each operation needs, imported before any timing.
IMPORTS = {
    "tp_torch": ["torch", "tensorplay", "tensorplay._build"],
    "tp_numpy": ["numpy", "ml_dtypes", "tensorplay", "tensorplay._build"],
    "torch_load": ["torch"],
    "st_torch": ["torch", "safetensors.torch"],
    "st_numpy": ["numpy", "ml_dtypes", "safetensors.numpy"],
    "tp_scan_api": ["tensorplay", "tensorplay.serialization"],
    "tp_scanner_api": ["tensorplay.scanner"],
    "tp_scanner_pickles": ["tensorplay.scanner"],
    "torch_scan": ["torch"],
    "picklescan_api": ["picklescan.scanner"],
    "floor_read": [],
    "floor_memcpy": [],
    "floor_objects": ["torch"],
    "floor_scan": [],
    # torch.load and torch.save import torch.utils.serialization on their first call.
    "torch_dcp_load": ["torch", "torch.distributed.checkpoint", "torch.utils.serialization"],
    "torch_dcp_full": ["torch", "torch.distributed.checkpoint.format_utils", "torch.utils.serialization"],
    "tp_dcp_reader": ["torch", "torch.distributed.checkpoint", "torch.utils.serialization", "tensorplay",
                      "tensorplay._build", "tensorplay.dcp"],
    # The torch backend makes .metadata's objects of torch's own DCP classes.
    "tp_dcp_full": ["torch", "torch.distributed.checkpoint", "tensorplay", "tensorplay._build", "tensorplay.dcp"],
    "tp_dcp_full_numpy": ["numpy", "ml_dtypes", "tensorplay", "tensorplay._build", "tensorplay.dcp"],
    # A folder's .metadata alone (benches/dcp_metadata.py).
    "torch_dcp_metadata": ["torch", "torch.distributed.checkpoint"],
    "tp_dcp_metadata": ["torch", "torch.distributed.checkpoint", "tensorplay", "tensorplay._build", "tensorplay.dcp"],
    "tp_dcp_metadata_numpy": ["numpy", "ml_dtypes", "tensorplay", "tensorplay._build", "tensorplay.dcp"],
}

PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def family(op: str) -> str:
    op = op.removesuffix("_batch").removesuffix("_warm").removesuffix("_repeat")
    for prefix in ("tp_torch", "tp_numpy", "torch_load", "st_torch", "st_numpy"):
        if op.startswith(prefix):
            return prefix
    return op


# --- memory -------------------------------------------------------------------------


def proc_status() -> dict[str, int]:
    """VmRSS, VmHWM, RssAnon, RssFile of this process, in KiB (Linux)."""
    out = {}
    try:
        with open("/proc/self/status") as f:
            for line in f:
                key, _, rest = line.partition(":")
                if key in ("VmRSS", "VmHWM", "RssAnon", "RssFile"):
                    out[key] = int(rest.split()[0])
    except OSError:
        pass
    return out


def reset_peak() -> bool:
    """Reset VmHWM (and so ru_maxrss) to the current RSS: Linux's clear_refs 5."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


# --- touching every loaded tensor ---------------------------------------------------


def leaves(obj) -> list:
    out, stack = [], [obj]
    while stack:
        o = stack.pop()
        if isinstance(o, dict):
            stack.extend(o.values())
        elif isinstance(o, (list, tuple)):
            stack.extend(o)
        elif hasattr(o, "data_ptr") or hasattr(o, "__array_interface__"):
            out.append(o)
    return out


def extent(x) -> tuple[int, int] | None:
    """The address range of memory behind a tensor (its whole storage) or array."""
    if hasattr(x, "untyped_storage"):  # torch
        s = x.untyped_storage()
        return (s.data_ptr(), s.data_ptr() + s.nbytes()) if s.nbytes() else None
    ai = x.__array_interface__
    if x.size == 0:
        return None
    lo = hi = ai["data"][0]
    for n, st in zip(x.shape, x.strides):
        if st < 0:
            lo += st * (n - 1)
        else:
            hi += st * (n - 1)
    return lo, hi + x.itemsize


def touch(obj) -> int:
    """Read one byte of every page of every tensor's memory: pays for lazy loading
    without the arithmetic a real sum would add. Returns how many tensors it saw."""
    import numpy as np

    xs = leaves(obj)
    spans = sorted(e for e in map(extent, xs) if e)
    merged: list[list[int]] = []
    for lo, hi in spans:
        if merged and lo <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], hi)
        else:
            merged.append([lo, hi])
    total = 0
    for lo, hi in merged:
        view = np.frombuffer((ctypes.c_uint8 * (hi - lo)).from_address(lo), dtype=np.uint8)
        total += int(view[::PAGE].sum()) + int(view[-1])
    return len(xs)


# --- the operations -------------------------------------------------------------------


# A small checkpoint that "_warm" scan operations read once before the timed call,
# so the code of the scanner (not the measured file) is already paged in: what a
# long-running scanning service sees from its second file on.
WARM_UP_FILE = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "torch" / "seed_tensor.pt"


def _from_file_object(load, path: str, **kwargs):
    """A load from ``open(path, "rb")``, opening and closing included, as a script
    that passes a file object does it."""
    with open(path, "rb") as f:
        return load(f, **kwargs)


class Batched(NamedTuple):
    """What a "_batch" operation returns: its last result and how many scans it made."""

    result: Any
    calls: int


def _batched(fn, seconds: float):
    def repeat() -> Batched:
        start, calls = time.perf_counter(), 0
        while True:
            result = fn()
            calls += 1
            if calls >= 2 and time.perf_counter() - start >= seconds:
                return Batched(result, calls)

    return repeat


REPEATS = 15


class Repeated(NamedTuple):
    """What a "_repeat" operation returns: its last result, and the time and minor
    page faults of each of its loads."""

    result: Any
    ms: list[float]
    faults: list[int]


def _repeated(fn):
    def repeat() -> Repeated:
        ms, faults, result = [], [], None
        for _ in range(REPEATS):
            result = None  # the last load's objects go before the next load, as in a service
            before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
            t0 = time.perf_counter()
            result = fn()
            ms.append((time.perf_counter() - t0) * 1e3)
            faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
        return Repeated(result, ms, faults)

    return repeat


def operation(op: str, path: str, payload: int, batch_seconds: float = 0.0):
    """(setup-free callable timed as the operation, whether to touch afterwards)."""
    if op.endswith("_repeat"):
        # The same file loaded over and over in one process: a service's first
        # load, and its steady state.
        fn, _ = operation(op.removesuffix("_repeat"), path, payload)
        return _repeated(fn), False
    if op.endswith("_batch"):
        # After the warm-up scan of another file, the same file scanned over and
        # over: a scanning service's throughput, per file.
        fn, _ = operation(op.removesuffix("_batch") + "_warm", path, payload)
        return _batched(fn, batch_seconds), False
    if op.endswith("_warm"):
        fn, _ = operation(op.removesuffix("_warm"), str(WARM_UP_FILE), 0)
        fn()
        fn, _ = operation(op.removesuffix("_warm"), path, payload)
        return fn, False
    touch_after = op.endswith("_touch")
    base = op.removesuffix("_touch")
    if "_dcp_" in base:
        return _dcp_operation(base, path), touch_after
    if base.startswith("tp_"):
        import tensorplay

        if base == "tp_scan_api":
            unsafe_globals = tensorplay.serialization.get_unsafe_globals_in_checkpoint
            return (lambda: unsafe_globals(path)), False
        if base == "tp_scanner_api":
            import tensorplay.scanner

            return (lambda: tensorplay.scanner.scan(path)), False
        if base == "tp_scanner_pickles":
            import tensorplay.scanner

            return (lambda: tensorplay.scanner.scan(path, pickles_only=True)), False
        backend = "torch" if base.startswith("tp_torch") else "numpy"
        use_mmap = base.endswith("_mmap")
        load = tensorplay.load  # resolved (and its module imported) before the timing
        if base.endswith("_fileobj"):
            return (lambda: _from_file_object(load, path, backend=backend)), touch_after
        return (lambda: load(path, mmap=use_mmap, backend=backend)), touch_after
    if base.startswith("torch_load"):
        import torch

        use_mmap = base.endswith("_mmap")
        if base.endswith("_fileobj"):
            return (lambda: _from_file_object(torch.load, path, weights_only=True)), touch_after
        return (lambda: torch.load(path, weights_only=True, mmap=use_mmap)), touch_after
    if base == "st_torch":
        import safetensors.torch

        return (lambda: safetensors.torch.load_file(path)), touch_after
    if base == "st_numpy":
        import safetensors.numpy

        return (lambda: safetensors.numpy.load_file(path)), touch_after
    if base == "torch_scan":
        import torch.serialization

        return (lambda: torch.serialization.get_unsafe_globals_in_checkpoint(path)), False
    if base == "picklescan_api":
        from picklescan.scanner import scan_file_path

        return (lambda: scan_file_path(path)), False
    if base == "floor_read":

        def read():
            # Fresh anonymous memory, faulted in by the read itself (a bytearray(n)
            # would zero-fill it first: a second pass no loader makes).
            size = os.path.getsize(path)
            buf = mmap.mmap(-1, max(size, 1), flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
            view = memoryview(buf)[:size]
            with open(path, "rb", buffering=0) as f:
                n = 0
                while n < size:
                    got = f.readinto(view[n:])
                    if not got:
                        break
                    n += got
            view.release()
            return buf

        return read, False
    if base == "floor_scan":

        def read_ends():
            # The least a scan of a zip asks of the kernel: its first bytes (the
            # signature, and data.pkl in a small checkpoint) and its last (the
            # directory). A scan that does this and nothing else is this fast.
            fd = os.open(path, os.O_RDONLY)
            try:
                size = os.fstat(fd).st_size
                os.pread(fd, 4096, 0)
                os.pread(fd, 4096, max(size - 4096, 0))
            finally:
                os.close(fd)

        return read_ends, False
    if base == "floor_memcpy":
        # One memcpy into fresh anonymous memory, faulted in by the copy. Not numpy's
        # copy: numpy madvises huge pages for big arrays, and with THP defrag on
        # "madvise" the kernel then compacts memory on the first faults, which made
        # that "floor" slower and noisier than reading the file.
        # The source is a resident 64 MiB buffer (bigger than any cache) copied over
        # and over: a payload-sized source would double the fresh memory the child
        # needs, and on a VM first-touching memory is the noisiest cost there is.
        src = memoryview(bytearray(b"\x01") * min(payload, 64 << 20))

        def memcpy():
            dst = mmap.mmap(-1, max(payload, 1), flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
            view, step = memoryview(dst), len(src)
            for off in range(0, payload, step):
                n = min(step, payload - off)
                view[off:off + n] = src[:n]
            view.release()
            return dst

        return memcpy, False
    if base == "floor_objects":
        return _objects_floor(path), False
    raise ValueError(f"unknown operation {op!r}")


def _dcp_operation(op: str, folder: str):
    """A load of a DCP folder: into a state dict that exists already (``dcp.load``,
    torch's reader or tensorplay's), or the whole folder into a new one (torch's
    ``dcp_to_torch_save`` without its ``torch.save``, or ``tensorplay.load``)."""
    if op in ("tp_dcp_full", "tp_dcp_full_numpy"):
        import tensorplay

        load, backend = tensorplay.load, "numpy" if op.endswith("_numpy") else "torch"
        return lambda: load(folder, backend=backend)
    if op in ("tp_dcp_metadata", "tp_dcp_metadata_numpy"):
        import tensorplay.dcp

        backend = "numpy" if op.endswith("_numpy") else "torch"
        if backend == "torch":
            # The class .metadata's TensorProperties become, built on first access (from
            # torch's, imported already): an import's work, not the read's.
            tensorplay.dcp.TorchTensorProperties  # noqa: B018
        read_metadata = tensorplay.dcp.read_metadata
        return lambda: read_metadata(folder, backend=backend)
    import torch.distributed.checkpoint as dcp  # not before: the numpy backend's load needs no torch

    # Without a process group dcp.load warns that it assumes one process, which is
    # the case measured; printing the warning is no part of either reader's cost.
    warnings.filterwarnings("ignore", message="torch.distributed is disabled", category=UserWarning)
    if op == "torch_dcp_metadata":
        reader_class = dcp.FileSystemReader
        return lambda: reader_class(folder).read_metadata()
    if op == "torch_dcp_full":
        # Exactly what torch 2.13's format_utils.dcp_to_torch_save runs before its torch.save.
        from torch.distributed.checkpoint.format_utils import _EmptyStateDictLoadPlanner, _load_state_dict

        def full() -> dict:
            sd: dict = {}
            _load_state_dict(sd, storage_reader=dcp.FileSystemReader(folder), planner=_EmptyStateDictLoadPlanner(),
                             no_dist=True)
            return sd

        return full
    if op == "tp_dcp_reader":
        import tensorplay.dcp

        reader = tensorplay.dcp.FileSystemReader  # built (torch's modules imported) on first access: not timed
    elif op == "torch_dcp_load":
        reader = dcp.FileSystemReader
    else:
        raise ValueError(f"unknown operation {op!r}")
    target = _dcp_target(folder)

    def load_into() -> dict:
        dcp.load(target, storage_reader=reader(folder))
        return target

    return load_into


def _dcp_target(folder: str) -> dict:
    """The state dict ``dcp.load`` fills, built before the timing for both readers,
    as a training script has it before it loads: the model's tensors exist already,
    in the saved shapes and dtypes, and are resident (``torch.zeros`` writes its
    memory, as a model's initialization does), so the timed load pays for reading
    and copying, not for first-touching its destination. Non-tensor items get a
    placeholder the planner replaces. Shapes come from the folder's own metadata
    (our generated data, so torch's unrestricted reader is fine here)."""
    import torch
    import torch.distributed.checkpoint as dcp

    metadata = dcp.FileSystemReader(folder).read_metadata()
    target: dict = {}
    for fqn, md in metadata.state_dict_metadata.items():
        # planner_data: the keys that led to each flattened item. generate.py nests
        # dicts only (DCP keeps a list of non-tensors as one item), so no list indices.
        *parents, key = metadata.planner_data.get(fqn, (fqn,))
        node = target
        for parent in parents:
            node = node.setdefault(parent, {})
        node[key] = (torch.zeros(md.size, dtype=md.properties.dtype)
                     if isinstance(md, dcp.metadata.TensorStorageMetadata) else None)
    return target


SAFETENSORS_DTYPES = {"F64": "float64", "F32": "float32", "F16": "float16", "BF16": "bfloat16",
                      "F8_E4M3": "float8_e4m3fn", "F8_E5M2": "float8_e5m2", "I64": "int64", "I32": "int32",
                      "I16": "int16", "I8": "int8", "U8": "uint8", "BOOL": "bool"}


def _objects_floor(path: str):
    """What a load's result needs in memory at the least: the tensors of the
    safetensors file (from its header, no data read), each made zero-filled and
    put in one dict under a fresh copy of its name. The header's parsed form is
    kept alive, so its memory cannot be reused by the objects and hide their cost."""
    import collections

    import torch

    with open(path, "rb") as f:
        size = int.from_bytes(f.read(8), "little")
        header = json.loads(f.read(size))
    specs = [(name, getattr(torch, SAFETENSORS_DTYPES[t["dtype"]]), tuple(t["shape"]))
             for name, t in header.items() if name != "__metadata__"]

    def build():
        build.keep = (header, specs)
        return collections.OrderedDict((name.encode().decode(), torch.zeros(shape, dtype=dtype))
                                       for name, dtype, shape in specs)

    return build


def describe(result) -> str:
    """A short fact about the result, so a broken loader is noticed."""
    if hasattr(result, "issues_count"):  # picklescan
        return f"{len(result.globals)} globals, {result.issues_count} issues, scan_err={result.scan_err}"
    if isinstance(result, list):
        return f"{len(result)} unsafe globals"
    if hasattr(result, "state_dict_metadata"):  # a DCP folder's Metadata
        return f"{len(result.state_dict_metadata)} items"
    if hasattr(result, "verdict"):  # tensorplay.scanner
        return f"{result.verdict}, {len(result.globals)} unsafe globals"
    if isinstance(result, (bytearray, bytes, mmap.mmap)):
        return f"{len(result)} bytes"
    if hasattr(result, "nbytes") and not isinstance(result, dict):
        return f"{result.nbytes} bytes"
    return f"{len(leaves(result))} tensors"


def run_job(job: dict) -> dict:
    op, path = job["op"], job["path"]
    fn, touch_after = operation(op, path, job.get("payload", 0), job.get("batch_seconds", 0.0))
    gc.collect()
    reset_ok = reset_peak()
    before = proc_status()
    t0 = time.perf_counter()
    result = fn()
    t1 = time.perf_counter()
    calls = 1
    repeated = None
    if isinstance(result, Batched):
        result, calls = result
    elif isinstance(result, Repeated):
        repeated, result = result, result.result
    if touch_after:
        touch(result)
    t2 = time.perf_counter()
    after = proc_status()
    maxrss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    rec = {
        "op": op,
        "calls": calls,
        "ms": ((t1 - t0) / calls + (t2 - t1)) * 1e3,
        "load_ms": (t1 - t0) / calls * 1e3,
        "touch_ms": (t2 - t1) * 1e3 if touch_after else None,
        "rss_before_kib": before.get("VmRSS"),
        "peak_kib": after.get("VmHWM") if reset_ok else maxrss,
        "maxrss_kib": maxrss,
        "peak_reset": reset_ok,
        "anon_delta_kib": after.get("RssAnon", 0) - before.get("RssAnon", 0),
        "file_delta_kib": after.get("RssFile", 0) - before.get("RssFile", 0),
        "result": describe(result),
    }
    rec["peak_delta_kib"] = rec["peak_kib"] - (rec["rss_before_kib"] or 0)
    if repeated is not None:
        steady = repeated.ms[5:]
        rec.update(repeat_ms=repeated.ms, repeat_faults=repeated.faults, first_ms=repeated.ms[0],
                   steady_ms=statistics.median(steady), steady_faults=statistics.median(repeated.faults[5:]))
    del result
    return rec


def main() -> None:
    jobs = json.loads(sys.argv[1])
    mods = {m for job in jobs for m in IMPORTS.get(family(job["op"].removesuffix("_touch")), [])}
    if any(job["op"].endswith("_touch") for job in jobs):
        mods.add("numpy")
    for m in sorted(mods):
        __import__(m)
    for job in jobs:
        try:
            rec = run_job(job)
        except Exception as e:  # reported, not raised: run.py records the failure
            rec = {"op": job["op"], "error": f"{type(e).__name__}: {e}"[:500]}
        print(json.dumps(rec), flush=True)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
