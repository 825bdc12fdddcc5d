"""The system under test, as sandbox jobs: tensorplay's scan (with the command
line's exit code under the default policy), the loader for the case's kind, and
``get_unsafe_globals_in_checkpoint``. Each returns what ``check.py`` judges."""
from __future__ import annotations

import os

import tensorplay
import tensorplay.cli
import tensorplay.dcp
import tensorplay.scanner
import tensorplay.serialization

from .readers import LIGHT_GROUP, TORCH_GROUP

SCAN, LOAD, UNSAFE_GLOBALS = "tensorplay:scan", "tensorplay:load", "tensorplay:unsafe_globals"


def loader_kind(path: str) -> str:
    """Which tensorplay loader a program would call on this case."""
    if not os.path.isdir(path):
        return "load"
    if os.path.isfile(os.path.join(path, ".metadata")):
        return "dcp"
    if any(n.endswith(".index.json") for n in os.listdir(path)):
        return "sharded"
    if os.path.isfile(os.path.join(path, "meta.json")):
        return "tensordict"
    return ""


def scan(path: str) -> dict:
    # scan_paths must never raise: an exception here is a finding (the sandbox reports it).
    reports = tensorplay.scanner.scan_paths([path])
    root = path if os.path.isdir(path) else os.path.dirname(path)
    return {
        "exit_code": tensorplay.cli.exit_code(reports),
        "reports": [{"path": os.path.relpath(r.path, root), "format": r.format, "verdict": r.verdict,
                     "globals": list(r.globals), "problems": [p.kind for p in r.problems][:8],
                     "skipped": r.skipped_because} for r in reports],
    }


def _refusal(e: Exception) -> dict:
    """An exception as check.py judges it: a CheckpointError is a refusal, anything else a defect."""
    return {"raised": f"{type(e).__module__}.{type(e).__qualname__}", "message": str(e)[:300],
            "checkpoint_error": isinstance(e, tensorplay.CheckpointError), "memory": isinstance(e, MemoryError)}


def load(path: str) -> dict:
    kind = loader_kind(path)
    if not kind:
        return {"loader": ""}
    try:
        if kind == "load" or kind == "sharded":
            value = tensorplay.load(path)
        elif kind == "dcp":
            value = tensorplay.dcp.load(path)
        else:
            value = tensorplay.load_memmap(path)
    except Exception as e:  # noqa: BLE001 - judged in check.py
        return {"loader": kind, **_refusal(e)}
    return {"loader": kind, "returned": f"{type(value).__module__}.{type(value).__qualname__}"}


def unsafe_globals(path: str) -> dict:
    if os.path.isdir(path):
        return {}
    try:
        return {"listed": tensorplay.serialization.get_unsafe_globals_in_checkpoint(path)}
    except Exception as e:  # noqa: BLE001 - judged in check.py
        return _refusal(e)


# The loader builds torch tensors (its default backend with torch installed), so it
# runs where torch is already imported; the scan and the listing need no torch.
JOBS = {SCAN: (scan, LIGHT_GROUP), LOAD: (load, TORCH_GROUP), UNSAFE_GLOBALS: (unsafe_globals, LIGHT_GROUP)}
IMPORTS = {TORCH_GROUP: ("torch", "tensorplay._tensordict")}
