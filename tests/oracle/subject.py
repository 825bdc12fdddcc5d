"""The system under test, as sandbox jobs: tensorplay's scan (with the command
line's exit code under the default policy), the pickles-only scan (for the kinds
that have a second reading: torch.export archives, whose programs are JSON), the
loader for the case's kind, and ``get_unsafe_globals_in_checkpoint``. Each
returns what ``check.py`` judges."""
from __future__ import annotations

import os

import tensorplay
import tensorplay._export
import tensorplay.cli
import tensorplay.dcp
import tensorplay.scanner
import tensorplay.serialization

from .readers import LIGHT_GROUP, TORCH_GROUP

SCAN, LOAD, UNSAFE_GLOBALS = "tensorplay:scan", "tensorplay:load", "tensorplay:unsafe_globals"
SCAN_PICKLES = "tensorplay:scan-pickles_only"


def loader_kind(path: str) -> str:
    """Which tensorplay loader a program would call on this case."""
    if not os.path.isdir(path):
        # A program calls the .pt2 readers on a torch.export archive (load refuses it, naming them).
        return "export" if tensorplay._export.is_export_archive(path, None) else "load"
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


def scan_pickles_only(path: str) -> dict:
    report = tensorplay.scanner.scan(path, pickles_only=True)
    return {"verdict": report.verdict, "format": report.format, "globals": list(report.globals),
            "problems": [p.kind for p in report.problems][:8]}


def _refusal(e: Exception) -> dict:
    """An exception as check.py judges it: a CheckpointError is a refusal, anything else a defect."""
    return {"raised": f"{type(e).__module__}.{type(e).__qualname__}", "message": str(e)[:300],
            "checkpoint_error": isinstance(e, tensorplay.CheckpointError), "memory": isinstance(e, MemoryError)}


def load(path: str) -> dict:
    kind = loader_kind(path)
    if not kind:
        return {"loader": ""}
    if kind == "export":
        return _export(path)
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


def _export(path: str) -> dict:
    """Both readers of a .pt2: accepted when either returns; a defect of either is
    the one reported (else the first refusal)."""
    returned, refusals = [], []
    for name, read in (("load(stub)", lambda: tensorplay.load(path, unknown_globals="stub")),
                       ("export_state_dict", lambda: tensorplay.export_state_dict(path))):
        try:
            value = read()
        except Exception as e:  # noqa: BLE001 - judged in check.py
            refusals.append(_refusal(e))
        else:
            returned.append(f"{name}: {type(value).__module__}.{type(value).__qualname__}")
    out: dict = {"loader": "export"}
    if returned:
        out["returned"] = ", ".join(returned)
    defects = [r for r in refusals if not (r["checkpoint_error"] or r["memory"])]
    if defects or refusals:
        out.update((defects or refusals)[0])
    return out


def unsafe_globals(path: str) -> dict:
    if os.path.isdir(path):
        return {}
    try:
        return {"listed": tensorplay.serialization.get_unsafe_globals_in_checkpoint(path)}
    except Exception as e:  # noqa: BLE001 - judged in check.py
        return _refusal(e)


# The loader builds torch tensors (its default backend with torch installed), so it
# runs where torch is already imported; the scan and the listing need no torch.
JOBS = {SCAN: (scan, LIGHT_GROUP), SCAN_PICKLES: (scan_pickles_only, LIGHT_GROUP), LOAD: (load, TORCH_GROUP),
        UNSAFE_GLOBALS: (unsafe_globals, LIGHT_GROUP)}
IMPORTS = {TORCH_GROUP: ("torch", "tensorplay._tensordict")}
