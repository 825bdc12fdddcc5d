"""A subprocess that loads corpus files on request, for tests/test_malicious.py.

Loads run here rather than in pytest so that a crash (abort, segfault), a hang or
runaway memory in the core shows up as one failed test instead of killing or
stalling the whole run. After importing everything it needs, the worker caps its
address space at what it already uses plus ``--extra-gib`` GiB (RLIMIT_AS).

Protocol: one JSON request per line on stdin,
``{"path": ..., "backend": "numpy"|"torch", "mmap": bool, "cwd": ...}``,
one JSON reply per line on stdout:
``{"outcome": "raised", "tensorplay_class": "UnsafeCheckpointError"|null, "type": ..., "message": ...,
"unpickling_error": bool}`` or ``{"outcome": "returned", "type": ...}``.
"""
from __future__ import annotations

import argparse
import gc
import json
import os
import pickle
import resource
import sys
import time
import traceback


def address_space_in_use() -> int | None:
    """Bytes of virtual address space this process maps now (Linux), else None."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmSize:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def cap_address_space(extra_gib: float) -> int | None:
    in_use = address_space_in_use()
    if in_use is None:
        return None
    cap = in_use + int(extra_gib * (1 << 30))
    _, hard = resource.getrlimit(resource.RLIMIT_AS)
    if hard != resource.RLIM_INFINITY:
        cap = min(cap, hard)
    resource.setrlimit(resource.RLIMIT_AS, (cap, hard))
    return cap


def load_one(tensorplay, request: dict) -> dict:
    os.chdir(request["cwd"])
    started = time.monotonic()
    try:
        obj = tensorplay.load(request["path"], backend=request["backend"], mmap=request["mmap"])
    except BaseException as exc:  # noqa: BLE001 - we report whatever came out
        cls = type(exc)
        ours = cls.__name__ if getattr(tensorplay, cls.__name__, None) is cls else None
        return {
            "outcome": "raised",
            "tensorplay_class": ours,
            "type": f"{cls.__module__}.{cls.__qualname__}",
            "unpickling_error": isinstance(exc, pickle.UnpicklingError),
            "message": str(exc)[:2000],
            "traceback": "" if ours else traceback.format_exc()[-3000:],
            "seconds": time.monotonic() - started,
        }
    kind = f"{type(obj).__module__}.{type(obj).__qualname__}"
    del obj
    gc.collect()
    return {"outcome": "returned", "type": kind, "seconds": time.monotonic() - started}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--torch", action="store_true", help="import torch before capping memory")
    parser.add_argument("--extra-gib", type=float, default=4.0)
    args = parser.parse_args()
    import numpy  # noqa: F401
    import tensorplay

    if args.torch:
        import torch  # noqa: F401
    cap = cap_address_space(args.extra_gib)
    out = sys.stdout
    out.write(json.dumps({"ready": True, "rlimit_as": cap}) + "\n")
    out.flush()
    for line in sys.stdin:
        if not line.strip():
            continue
        reply = load_one(tensorplay, json.loads(line))
        out.write(json.dumps(reply) + "\n")
        out.flush()


if __name__ == "__main__":
    main()
