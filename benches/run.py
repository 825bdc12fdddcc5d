"""Side-by-side load and scan benchmarks: tensorplay against torch.load, safetensors,
torch.distributed.checkpoint and picklescan, with the cost of reading the file and of
a memcpy as floors.

    python benches/generate.py --scale small          # once per scale
    python benches/run.py --scale small [--runs 5] [--only gpt2,views] [--threads-sweep]
    python benches/run.py --smoke                     # CI: small data in a temp dir, every operation once

Every run of every operation is a fresh process (benches/_child.py) that imports
its modules first and times only the operation. Runs go round-robin over the
operations of a checkpoint, with the checkpoint's files read once before each round
(warm page cache). Writes benches/out/results.json and benches/RESULTS.md; see
benches/README.md for what each operation measures.
"""
from __future__ import annotations

import argparse
import compileall
import datetime as dt
import importlib.util
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import chart  # benches/chart.py, beside this script

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
CHILD = HERE / "_child.py"
CHECKPOINTS = ["gpt2", "llama_bf16", "many_small", "training", "views"]
MIB = 2**20
# How long a "_batch" operation repeats its scan (at least twice): long enough for a
# steady per-scan mean, short enough for picklescan's 4 s scans of the 50k file.
BATCH_SECONDS = 0.25


@dataclass(frozen=True)
class Op:
    id: str
    label: str
    # Which of the checkpoint's files it reads: "torch", "safetensors" or "dcp" (the
    # DCP folder, which only some checkpoints have: elsewhere the operation is left out).
    file: str
    needs: str | None = None  # a capability from probe(); skipped when missing
    cli: bool = False  # timed from outside, as a whole process
    env: tuple[tuple[str, str], ...] = ()  # set for its process


OPS = [
    Op("tp_torch_eager", "tensorplay.load(backend='torch')", "torch"),
    Op("tp_torch_eager_4k", "tensorplay.load(backend='torch'), TENSORPLAY_HUGE_PAGES=0", "torch",
       env=(("TENSORPLAY_HUGE_PAGES", "0"),)),
    Op("tp_torch_mmap", "tensorplay.load(backend='torch', mmap=True)", "torch"),
    Op("tp_torch_mmap_touch", "tensorplay.load(backend='torch', mmap=True) + touch", "torch"),
    Op("tp_numpy_eager", "tensorplay.load(backend='numpy')", "torch"),
    Op("tp_numpy_eager_4k", "tensorplay.load(backend='numpy'), TENSORPLAY_HUGE_PAGES=0", "torch",
       env=(("TENSORPLAY_HUGE_PAGES", "0"),)),
    Op("tp_numpy_mmap", "tensorplay.load(backend='numpy', mmap=True)", "torch"),
    Op("tp_numpy_mmap_touch", "tensorplay.load(backend='numpy', mmap=True) + touch", "torch"),
    Op("tp_torch_fileobj", "tensorplay.load(open(path, 'rb'), backend='torch')", "torch"),
    Op("torch_load", "torch.load(weights_only=True)", "torch"),
    Op("torch_load_thp", "torch.load(weights_only=True), THP_MEM_ALLOC_ENABLE=1 (torch's huge pages)", "torch",
       env=(("THP_MEM_ALLOC_ENABLE", "1"),)),
    Op("torch_load_fileobj", "torch.load(open(path, 'rb'), weights_only=True)", "torch"),
    Op("torch_load_mmap", "torch.load(weights_only=True, mmap=True)", "torch"),
    Op("torch_load_mmap_touch", "torch.load(weights_only=True, mmap=True) + touch", "torch"),
    Op("st_torch", "safetensors.torch.load_file", "safetensors"),
    Op("st_torch_touch", "safetensors.torch.load_file + touch", "safetensors"),
    Op("st_numpy", "safetensors.numpy.load_file", "safetensors"),
    Op("st_numpy_touch", "safetensors.numpy.load_file + touch", "safetensors"),
    Op("tp_scan_api", "tensorplay.serialization.get_unsafe_globals_in_checkpoint", "torch", needs="tp_scan_api"),
    Op("tp_scanner_api", "tensorplay.scanner.scan (in process)", "torch", needs="tp_scanner_api"),
    Op("tp_scanner_pickles", "tensorplay.scanner.scan(pickles_only=True)", "torch", needs="tp_scanner_pickles"),
    Op("torch_scan", "torch.serialization.get_unsafe_globals_in_checkpoint", "torch"),
    Op("picklescan_api", "picklescan.scanner.scan_file_path", "torch", needs="picklescan_api"),
    Op("tp_scan_api_warm", "tensorplay get_unsafe_globals_in_checkpoint, warm", "torch", needs="tp_scan_api"),
    Op("tp_scanner_api_warm", "tensorplay.scanner.scan (in process), warm", "torch", needs="tp_scanner_api"),
    Op("tp_scanner_pickles_warm", "tensorplay.scanner.scan(pickles_only=True), warm", "torch",
       needs="tp_scanner_pickles"),
    Op("torch_scan_warm", "torch get_unsafe_globals_in_checkpoint, warm", "torch"),
    Op("picklescan_api_warm", "picklescan.scanner.scan_file_path, warm", "torch", needs="picklescan_api"),
    Op("tp_scan_api_batch", "tensorplay get_unsafe_globals_in_checkpoint, per file in a batch", "torch",
       needs="tp_scan_api"),
    Op("tp_scanner_api_batch", "tensorplay.scanner.scan (in process), per file in a batch", "torch",
       needs="tp_scanner_api"),
    Op("tp_scanner_pickles_batch", "tensorplay.scanner.scan(pickles_only=True), per file in a batch", "torch",
       needs="tp_scanner_pickles"),
    Op("torch_scan_batch", "torch get_unsafe_globals_in_checkpoint, per file in a batch", "torch"),
    Op("picklescan_api_batch", "picklescan.scanner.scan_file_path, per file in a batch", "torch",
       needs="picklescan_api"),
    Op("tp_scan_cli", "`tensorplay scan FILE` (whole process)", "torch", needs="tp_scan_cli", cli=True),
    Op("picklescan_cli", "`picklescan --path FILE` (whole process)", "torch", needs="picklescan_cli", cli=True),
    Op("torch_dcp_load", "dcp.load(sd, storage_reader=torch's FileSystemReader)", "dcp"),
    Op("tp_dcp_reader", "dcp.load(sd, storage_reader=tensorplay.dcp.FileSystemReader)", "dcp"),
    Op("torch_dcp_full", "torch: a DCP folder into a new state dict (dcp_to_torch_save's load)", "dcp"),
    Op("tp_dcp_full", "tensorplay.load(folder, backend='torch')", "dcp"),
    Op("tp_dcp_full_numpy", "tensorplay.load(folder, backend='numpy')", "dcp"),
    Op("floor_read", "floor: read the .pt file into fresh memory", "torch"),
    Op("floor_memcpy", "floor: memcpy of the payload into fresh memory", "torch"),
    Op("floor_objects", "floor: the safetensors file's tensors, made zero-filled into one dict (torch)",
       "safetensors"),
    Op("floor_scan", "floor: open, fstat, read 4 KiB at each end, close", "torch"),
    Op("floor_scan_warm", "floor: open, fstat, read 4 KiB at each end, close, warm", "torch"),
    Op("floor_scan_batch", "floor: open, fstat, read 4 KiB at each end, close, per file in a batch", "torch"),
]
OPS_BY_ID = {op.id: op for op in OPS}

SKIP_REASONS = {
    "tp_scan_api": "tensorplay.serialization.get_unsafe_globals_in_checkpoint does not exist yet",
    "tp_scanner_api": "tensorplay.scanner does not exist yet",
    "tp_scanner_pickles": "tensorplay.scanner.scan has no pickles_only option yet",
    "tp_scan_cli": "the `tensorplay scan` command does not exist yet (no tensorplay.cli module)",
    "picklescan_api": "picklescan is not installed (pip install picklescan)",
    "picklescan_cli": "the picklescan command is not on PATH (pip install picklescan)",
}

PROBE = r"""
import importlib, importlib.util, json, os, shutil, sys
from pathlib import Path
# Commands installed beside this interpreter count even when its environment is
# not activated (CI runs the venv's python by path).
def which(name):
    return shutil.which(name, path=os.pathsep.join([os.path.dirname(sys.executable), os.environ.get("PATH", "")]))
out = {"python": sys.version.split()[0]}
for mod in ("torch", "numpy", "safetensors", "tensorplay", "picklescan", "ml_dtypes", "psutil"):
    try:
        m = importlib.import_module(mod)
        out[mod] = getattr(m, "__version__", None) or "installed"
    except Exception:
        out[mod] = None
try:
    import importlib.metadata as md
    out["picklescan"] = out["picklescan"] and md.version("picklescan")
except Exception:
    pass
caps = {}
if out["tensorplay"]:
    import tensorplay, tensorplay.serialization
    caps["tp_scan_api"] = hasattr(tensorplay.serialization, "get_unsafe_globals_in_checkpoint")
    caps["tp_scanner_api"] = importlib.util.find_spec("tensorplay.scanner") is not None
    if caps["tp_scanner_api"]:
        import inspect, tensorplay.scanner
        caps["tp_scanner_pickles"] = "pickles_only" in inspect.signature(tensorplay.scanner.scan).parameters
    caps["tp_scan_cli"] = bool(which("tensorplay")) and importlib.util.find_spec("tensorplay.cli") is not None
    # The thread override is honoured if the package or its core mentions the variable.
    pkg = Path(tensorplay.__file__).parent
    out["tensorplay_path"] = str(Path(tensorplay.__file__).parent)
    import hashlib
    cores = sorted(Path(tensorplay.__file__).parent.glob("_core*"))
    out["tensorplay_core_sha256"] = cores and hashlib.sha256(cores[0].read_bytes()).hexdigest()[:12]
    huge_pages = getattr(importlib.import_module("tensorplay._core"), "huge_pages", None)
    out["tensorplay_huge_pages"] = huge_pages() if huge_pages else "not asked for (this version never does)"
    caps["tp_threads_env"] = any(
        b"TENSORPLAY_THREADS" in p.read_bytes() for p in pkg.rglob("*") if p.suffix in (".py", ".so", ".pyd")
    )
caps["picklescan_api"] = bool(out["picklescan"])
caps["picklescan_cli"] = bool(which("picklescan"))
out["caps"] = caps
print(json.dumps(out))
"""


# --- small helpers ------------------------------------------------------------------


def sh(*cmd: str) -> str:
    try:
        return subprocess.run(cmd, capture_output=True, text=True, cwd=REPO, timeout=30).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


def probe() -> dict:
    p = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=120)
    lines = [ln for ln in p.stdout.splitlines() if ln.startswith("{")]
    if not lines:
        raise SystemExit(f"probe failed:\n{p.stderr[-2000:]}")
    return json.loads(lines[-1])


def machine(versions: dict) -> dict:
    cpu = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem = 0
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                mem = int(line.split()[1]) * 1024
    except OSError:
        pass
    thp = {}
    for knob in ("enabled", "defrag"):
        try:
            thp[knob] = Path(f"/sys/kernel/mm/transparent_hugepage/{knob}").read_text().strip()
        except OSError:
            thp[knob] = "unknown"
    commit = sh("git", "rev-parse", "--short", "HEAD") or "unknown"
    if sh("git", "status", "--porcelain", "--", "src", "python", "Cargo.toml"):
        commit += " (with uncommitted changes in src/ or python/)"
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "usable_cores": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
        "ram_bytes": mem,
        "kernel": f"{platform.system()} {platform.release()}",
        "loadavg_at_start": os.getloadavg() if hasattr(os, "getloadavg") else None,
        "openblas_env": {k: v for k, v in os.environ.items() if k.startswith("OPENBLAS_")},
        "transparent_hugepage": thp,
        "tensorplay_commit": commit,
        "versions": {k: v for k, v in versions.items() if k != "caps"},
    }


def warm(paths: list[Path]) -> None:
    """Read each file (each file of a folder) once so every measurement starts from
    a warm page cache."""
    buf = bytearray(8 * MIB)
    for file in (f for p in paths for f in (sorted(p.iterdir()) if p.is_dir() else [p])):
        with open(file, "rb", buffering=0) as f:
            while f.readinto(buf):
                pass


def run_child(jobs: list[dict], env: dict | None = None, timeout: float = 1800) -> list[dict]:
    cmd = [sys.executable, str(CHILD), json.dumps(jobs)]
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env, cwd=REPO)
    except subprocess.TimeoutExpired:
        return [{"op": j["op"], "error": f"timed out after {timeout:.0f} s"} for j in jobs]
    recs = {}
    for line in p.stdout.splitlines():
        if line.startswith("{"):
            rec = json.loads(line)
            recs[rec["op"]] = rec
    tail = (p.stderr.strip().splitlines() or [f"exit status {p.returncode}"])[-1]
    return [recs.get(j["op"]) or {"op": j["op"], "error": f"child died (exit {p.returncode}): {tail}"[:500]}
            for j in jobs]


def compile_bytecode(package_dirs: list[str]) -> None:
    """Leave each package byte-compiled, as `pip install` does, so that no run
    compiles its modules, which also grows the heap a first call then finds free
    (see benches/README.md). Under PYTHONDONTWRITEBYTECODE, which this machine
    sets, Python still reads cached bytecode; it only never writes it."""
    for d in package_dirs:
        compileall.compile_dir(d, quiet=1)


def run_cli(op: Op, path: Path, timeout: float = 1800) -> dict:
    """Whole-process wall time and peak RSS (ru_maxrss of the child) of a command."""
    argv = {"tp_scan_cli": ["tensorplay", "scan", str(path)],
            "picklescan_cli": ["picklescan", "--path", str(path)]}[op.id]
    argv[0] = shutil.which(argv[0], path=os.pathsep.join([os.path.dirname(sys.executable),
                                                          os.environ.get("PATH", "")])) or argv[0]
    t0 = time.perf_counter()
    # From outside this checkout, as a hub's worker runs it: here `tensorplay scan`
    # would also read the repository's pyproject.toml as a project's settings.
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, cwd=tempfile.gettempdir())
    deadline = t0 + timeout
    while True:
        pid, status, ru = os.wait4(proc.pid, os.WNOHANG)
        if pid:
            break
        if time.perf_counter() > deadline:
            proc.kill()
            return {"op": op.id, "error": f"timed out after {timeout:.0f} s"}
        time.sleep(0.0005)
    ms = (time.perf_counter() - t0) * 1e3
    out = proc.stdout.read().decode(errors="replace") if proc.stdout else ""
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        last = (out.strip().splitlines() or [""])[-1]
        return {"op": op.id, "error": f"exit {proc.returncode}: {last}"[:500]}
    return {"op": op.id, "ms": ms, "load_ms": ms, "touch_ms": None, "peak_kib": ru.ru_maxrss,
            "peak_delta_kib": ru.ru_maxrss, "anon_delta_kib": None, "whole_process": True,
            "result": (out.strip().splitlines() or [""])[-1][:200]}


def summarize(op: Op, recs: list[dict]) -> dict:
    ok = [r for r in recs if "error" not in r]
    errors = sorted({r["error"] for r in recs if "error" in r})
    entry = {"label": op.label, "file": op.file, "runs": recs, "errors": errors, "n": len(ok)}
    if ok:
        ms = [r["ms"] for r in ok]
        entry.update(
            median_ms=statistics.median(ms),
            min_ms=min(ms),
            peak_delta_mib=statistics.median(r["peak_delta_kib"] for r in ok) / 1024,
            anon_delta_mib=(statistics.median(r["anon_delta_kib"] for r in ok) / 1024
                            if ok[0].get("anon_delta_kib") is not None else None),
            touch_ms=(statistics.median(r["touch_ms"] for r in ok) if ok[0].get("touch_ms") is not None else None),
            whole_process=bool(ok[0].get("whole_process")),
            result=ok[0].get("result"),
        )
    return entry


# --- measuring ------------------------------------------------------------------------


def checkpoint_files(info: dict, data: Path) -> dict[str, Path]:
    """The checkpoint's files by Op.file; the manifest names each one it has."""
    return {kind: data / info[kind] for kind in ("torch", "safetensors", "dcp") if kind in info}


def measure_checkpoint(name: str, info: dict, data: Path, ops: list[Op], caps: dict, runs: int,
                       smoke: bool, log) -> dict:
    files = checkpoint_files(info, data)
    ops = [op for op in ops if op.file in files]
    active = [op for op in ops if not op.needs or caps.get(op.needs)]
    skipped = {op.id: SKIP_REASONS[op.needs] for op in ops if op not in active}
    recs: dict[str, list[dict]] = {op.id: [] for op in active}

    def job(op: Op) -> dict:
        # The smoke run checks that a batch runs, not its mean: two scans do.
        return {"op": op.id, "path": str(files[op.file]), "payload": info["payload_bytes"],
                "batch_seconds": 0 if smoke else BATCH_SECONDS}

    for r in range(runs):
        warm(list(files.values()))
        child_ops = [op for op in active if not op.cli]
        if smoke:  # one process for all of a checkpoint's operations: checks the runner, not timings
            for rec in run_child([job(op) for op in child_ops if not op.env]):
                recs[rec["op"]].append(rec)
        for op in child_ops:
            if not smoke or op.env:
                recs[op.id].append(run_child([job(op)], env=op_env(op))[0])
        for op in active:
            if op.cli:
                recs[op.id].append(run_cli(op, files[op.file]))
        log(f"  {name}: round {r + 1}/{runs} done")
    result = {op.id: summarize(op, recs[op.id]) for op in active}
    for op_id, why in skipped.items():
        result[op_id] = {"label": OPS_BY_ID[op_id].label, "file": OPS_BY_ID[op_id].file, "skipped": why}
    return {
        "info": info,
        "measured_at": dt.datetime.now().isoformat(timespec="seconds"),
        "ops": {op.id: result[op.id] for op in ops},
    }


def evict(paths: list[Path]) -> None:
    """Drop each file's pages from the page cache (POSIX_FADV_DONTNEED: clean
    pages only, no privileges needed), so the next read comes from the disk."""
    for file in (f for p in paths for f in (sorted(p.iterdir()) if p.is_dir() else [p])):
        fd = os.open(file, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


COLD_OPS = ["tp_torch_eager", "tp_torch_mmap_touch", "tp_numpy_eager", "torch_load", "torch_load_mmap_touch",
            "floor_read"]


def cold_cache(data: Path, info: dict, runs: int, log) -> dict:
    """The eager and the touched mmap loads of a checkpoint whose file was just
    evicted from the page cache, against torch's and the read-file floor."""
    path = data / info["torch"]
    recs: dict[str, list[dict]] = {op: [] for op in COLD_OPS}
    for _ in range(runs):
        for op in COLD_OPS:
            evict([path])
            recs[op] += run_child([{"op": op, "path": str(path), "payload": info["payload_bytes"]}])
    log("  cold cache done")
    return {op: summarize(OPS_BY_ID[op], rs) for op, rs in recs.items()}


def op_env(op: Op) -> dict | None:
    return {**os.environ, **dict(op.env)} if op.env else None


REPEAT_OPS = {"tp_torch_eager_repeat": "tensorplay.load(backend='torch')",
              "torch_load_repeat": "torch.load(weights_only=True)"}


def repeated_loads(data: Path, files: dict[str, str], runs: int, log) -> dict:
    """Each file loaded 15 times in one process, by tensorplay and by torch: the
    first load, and the steady state (median of loads 6-15), median over runs."""
    out: dict = {}
    for label, name in files.items():
        path = data / name
        recs: dict[str, list[dict]] = {op: [] for op in REPEAT_OPS}
        for _ in range(runs):
            warm([path])
            for op in REPEAT_OPS:
                recs[op] += run_child([{"op": op, "path": str(path), "payload": path.stat().st_size}])
        out[label] = {}
        for op, rs in recs.items():
            ok = [r for r in rs if "error" not in r]
            out[label][op] = {"errors": sorted({r["error"] for r in rs if "error" in r}), "n": len(ok)}
            if ok:
                out[label][op].update({k: statistics.median(r[k] for r in ok)
                                       for k in ("first_ms", "steady_ms", "steady_faults")})
    log("  repeated loads done")
    return out


def threads_sweep(data: Path, info: dict, caps: dict, runs: int, log) -> dict:
    if not caps.get("tp_threads_env"):
        return {"skipped": "tensorplay does not read TENSORPLAY_THREADS yet"}
    path = data / info["torch"]
    settings = {"1": "1", "default": None}
    recs: dict[str, list[dict]] = {k: [] for k in settings}
    op = OPS_BY_ID["tp_torch_eager"]
    for _ in range(runs):
        warm([path])
        for key, value in settings.items():
            env = {k: v for k, v in os.environ.items() if k != "TENSORPLAY_THREADS"}
            if value is not None:
                env["TENSORPLAY_THREADS"] = value
            recs[key].append(run_child([{"op": op.id, "path": str(path), "payload": info["payload_bytes"]}],
                                       env=env)[0])
    log("  threads sweep done")
    return {key: summarize(op, rs) for key, rs in recs.items()}


# --- reporting ------------------------------------------------------------------------


def fmt_ms(v: float | None) -> str:
    if v is None:
        return "–"
    return f"{v:.1f}" if v >= 10 else f"{v:.2f}" if v >= 1 else f"{v:.3f}"


def fmt_mib(v: float | None) -> str:
    return "–" if v is None else f"{v:.1f}"


def get(results: dict, ck: str, op: str, key: str = "median_ms"):
    e = results["checkpoints"].get(ck, {}).get("ops", {}).get(op, {})
    return e.get(key)


RATIOS_SPEED = [
    ("eager: torch.load(weights_only=True) ÷ tensorplay (torch backend)", "torch_load", "tp_torch_eager"),
    ("file object: torch.load(open(path, 'rb')) ÷ tensorplay (torch backend)", "torch_load_fileobj",
     "tp_torch_fileobj"),
    ("mmap: torch.load(weights_only=True, mmap=True) ÷ tensorplay mmap (torch)", "torch_load_mmap", "tp_torch_mmap"),
    ("mmap + touch: torch.load mmap ÷ tensorplay mmap (torch)", "torch_load_mmap_touch", "tp_torch_mmap_touch"),
    ("safetensors.torch.load_file ÷ tensorplay mmap (torch)", "st_torch", "tp_torch_mmap"),
    ("safetensors.torch.load_file + touch ÷ tensorplay mmap + touch (torch)", "st_torch_touch",
     "tp_torch_mmap_touch"),
    ("safetensors.numpy.load_file ÷ tensorplay eager (numpy)", "st_numpy", "tp_numpy_eager"),
    ("eager: torch.load with THP_MEM_ALLOC_ENABLE=1 ÷ tensorplay (torch backend)", "torch_load_thp",
     "tp_torch_eager"),
    ("eager, torch backend: tensorplay with TENSORPLAY_HUGE_PAGES=0 ÷ tensorplay", "tp_torch_eager_4k",
     "tp_torch_eager"),
    ("eager, numpy backend: tensorplay with TENSORPLAY_HUGE_PAGES=0 ÷ tensorplay", "tp_numpy_eager_4k",
     "tp_numpy_eager"),
    ("safetensors.numpy.load_file + touch ÷ tensorplay mmap + touch (numpy)", "st_numpy_touch",
     "tp_numpy_mmap_touch"),
    ("DCP into a state dict: dcp.load with torch's FileSystemReader ÷ with tensorplay's", "torch_dcp_load",
     "tp_dcp_reader"),
    ("DCP whole folder: torch (dcp_to_torch_save's load) ÷ tensorplay.load(folder) (torch)", "torch_dcp_full",
     "tp_dcp_full"),
    ("scan: picklescan API ÷ tensorplay get_unsafe_globals_in_checkpoint", "picklescan_api", "tp_scan_api"),
    ("scan: torch get_unsafe_globals_in_checkpoint ÷ tensorplay's", "torch_scan", "tp_scan_api"),
    ("scan: picklescan API ÷ tensorplay.scanner.scan", "picklescan_api", "tp_scanner_api"),
    ("scan: torch get_unsafe_globals_in_checkpoint ÷ tensorplay.scanner.scan", "torch_scan", "tp_scanner_api"),
    ("scan: picklescan API ÷ tensorplay.scanner.scan(pickles_only=True)", "picklescan_api", "tp_scanner_pickles"),
    ("scan: torch get_unsafe_globals_in_checkpoint ÷ tensorplay.scanner.scan(pickles_only=True)", "torch_scan",
     "tp_scanner_pickles"),
    ("scan, warm: picklescan API ÷ tensorplay get_unsafe_globals_in_checkpoint", "picklescan_api_warm",
     "tp_scan_api_warm"),
    ("scan, warm: torch get_unsafe_globals_in_checkpoint ÷ tensorplay's", "torch_scan_warm", "tp_scan_api_warm"),
    ("scan, warm: picklescan API ÷ tensorplay.scanner.scan", "picklescan_api_warm", "tp_scanner_api_warm"),
    ("scan, warm: torch get_unsafe_globals_in_checkpoint ÷ tensorplay.scanner.scan", "torch_scan_warm",
     "tp_scanner_api_warm"),
    ("scan, warm: picklescan API ÷ tensorplay.scanner.scan(pickles_only=True)", "picklescan_api_warm",
     "tp_scanner_pickles_warm"),
    ("scan, warm: torch get_unsafe_globals_in_checkpoint ÷ tensorplay.scanner.scan(pickles_only=True)",
     "torch_scan_warm", "tp_scanner_pickles_warm"),
    ("scan, batch: picklescan API ÷ tensorplay get_unsafe_globals_in_checkpoint", "picklescan_api_batch",
     "tp_scan_api_batch"),
    ("scan, batch: torch get_unsafe_globals_in_checkpoint ÷ tensorplay's", "torch_scan_batch", "tp_scan_api_batch"),
    ("scan, batch: picklescan API ÷ tensorplay.scanner.scan", "picklescan_api_batch", "tp_scanner_api_batch"),
    ("scan, batch: torch get_unsafe_globals_in_checkpoint ÷ tensorplay.scanner.scan", "torch_scan_batch",
     "tp_scanner_api_batch"),
    ("scan, batch: picklescan API ÷ tensorplay.scanner.scan(pickles_only=True)", "picklescan_api_batch",
     "tp_scanner_pickles_batch"),
    ("scan, batch: torch get_unsafe_globals_in_checkpoint ÷ tensorplay.scanner.scan(pickles_only=True)",
     "torch_scan_batch", "tp_scanner_pickles_batch"),
    ("scan CLI: `picklescan --path` ÷ `tensorplay scan`", "picklescan_cli", "tp_scan_cli"),
]
RATIOS_FLOOR = [
    ("tensorplay eager (torch) ÷ read-file floor", "tp_torch_eager", "floor_read"),
    ("tensorplay eager (numpy) ÷ read-file floor", "tp_numpy_eager", "floor_read"),
    ("tensorplay eager (torch) ÷ memcpy floor", "tp_torch_eager", "floor_memcpy"),
    ("torch.load(weights_only=True) ÷ read-file floor", "torch_load", "floor_read"),
    ("tensorplay get_unsafe_globals_in_checkpoint ÷ scan floor", "tp_scan_api", "floor_scan"),
    ("torch get_unsafe_globals_in_checkpoint ÷ scan floor", "torch_scan", "floor_scan"),
    ("picklescan API ÷ scan floor", "picklescan_api", "floor_scan"),
    ("tensorplay get_unsafe_globals_in_checkpoint ÷ scan floor, warm", "tp_scan_api_warm", "floor_scan_warm"),
    ("picklescan API ÷ scan floor, warm", "picklescan_api_warm", "floor_scan_warm"),
    ("tensorplay get_unsafe_globals_in_checkpoint ÷ scan floor, batch", "tp_scan_api_batch", "floor_scan_batch"),
    ("picklescan API ÷ scan floor, batch", "picklescan_api_batch", "floor_scan_batch"),
]
RATIOS_RSS = [  # (label, operation, which number)
    ("tensorplay eager (torch): peak RSS Δ", "tp_torch_eager", "peak_delta_mib"),
    ("tensorplay eager (torch): anon Δ (kept)", "tp_torch_eager", "anon_delta_mib"),
    ("tensorplay eager (numpy): peak RSS Δ", "tp_numpy_eager", "peak_delta_mib"),
    ("tensorplay eager (numpy): anon Δ (kept)", "tp_numpy_eager", "anon_delta_mib"),
    ("tensorplay from a file object (torch): peak RSS Δ", "tp_torch_fileobj", "peak_delta_mib"),
    ("torch.load(weights_only=True): peak RSS Δ", "torch_load", "peak_delta_mib"),
    ("torch.load from a file object: peak RSS Δ", "torch_load_fileobj", "peak_delta_mib"),
    ("torch.load(weights_only=True): anon Δ (kept)", "torch_load", "anon_delta_mib"),
    ("safetensors.numpy.load_file: peak RSS Δ", "st_numpy", "peak_delta_mib"),
    ("floor: the same tensors made directly into one dict (torch): peak RSS Δ", "floor_objects",
     "peak_delta_mib"),
    ("DCP into a state dict, torch's reader: peak RSS Δ", "torch_dcp_load", "peak_delta_mib"),
    ("DCP into a state dict, tensorplay's reader: peak RSS Δ", "tp_dcp_reader", "peak_delta_mib"),
    ("DCP whole folder, torch: peak RSS Δ", "torch_dcp_full", "peak_delta_mib"),
    ("DCP whole folder, tensorplay.load (torch): peak RSS Δ", "tp_dcp_full", "peak_delta_mib"),
]
# What the memory table divides by, by Op.file: the payload of the file the operation
# reads (the safetensors file drops gpt2's tied copy and clones views; the DCP folder
# stores the tied tensor twice).
PAYLOAD_KEYS = {"torch": "payload_bytes", "safetensors": "safetensors_payload_bytes", "dcp": "dcp_payload_bytes"}


def ratio_tables(results: dict) -> list[str]:
    cks = [c for c in CHECKPOINTS if c in results["checkpoints"]]
    head = "| comparison | " + " | ".join(cks) + " |"
    sep = "| --- |" + " ---: |" * len(cks)

    def cell(c: str, num: str, den: str) -> str:
        med = [get(results, c, num), get(results, c, den)]
        low = [get(results, c, num, "min_ms"), get(results, c, den, "min_ms")]
        if not all(med) or not all(low):
            return "n/a"
        return f"{med[0] / med[1]:.2f}× ({low[0] / low[1]:.2f}×)"

    lines = ["### Speed", "",
             "Baseline ÷ tensorplay, of the medians (and in brackets of the minimums): above 1 means tensorplay "
             "is faster.", "", head, sep]
    for label, base, tp in RATIOS_SPEED:
        lines.append(f"| {label} | " + " | ".join(cell(c, base, tp) for c in cks) + " |")
    lines += ["", "### Against the floors", "",
              "tensorplay ÷ floor, of the medians (and of the minimums): 1 is as fast as the floor. Both floors are "
              "single-threaded; tensorplay's eager copy uses every core, so it can go below 1.", "", head, sep]
    for label, num, den in RATIOS_FLOOR:
        lines.append(f"| {label} | " + " | ".join(cell(c, num, den) for c in cks) + " |")
    lines += ["", "### Memory (median RSS Δ ÷ payload bytes: 1 is one copy of the tensors)", "", head, sep]
    for label, op, key in RATIOS_RSS:
        cells = []
        for c in cks:
            peak = get(results, c, op, key)
            payload = results["checkpoints"][c]["info"].get(PAYLOAD_KEYS[OPS_BY_ID[op].file])
            cells.append("n/a" if peak is None or not payload else f"{peak * MIB / payload:.2f}")
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return lines


# Sections of RESULTS.md that other benchmarks' runs wrote (benches/dcp_metadata.py, remote.py),
# from the first of these headings to the end: a rewrite of the report keeps them.
KEPT_SECTIONS = ("## DCP `.metadata`", "## Remote scans by ranges", "## Repeated loads, from the second")


def kept_sections(path: Path) -> str:
    """The kept sections of the report at ``path`` (empty when it has none), to end a rewrite of it."""
    text = path.read_text() if path.exists() else ""
    found = [at for at in (text.find(heading) for heading in KEPT_SECTIONS) if at >= 0]
    return "\n" + text[min(found):] if found else ""


def render(results: dict) -> str:
    m = results["machine"]
    v = m["versions"]
    load = m.get("loadavg_at_start")
    thp = m.get("transparent_hugepage", {})
    lines = [
        "# tensorplay benchmark results",
        "",
        f"Written by `{results['command']}` on {results.get('written_at') or results['finished_at']}. "
        "See [README.md](README.md) for what each operation measures.",
        "",
        "## Machine",
        "",
        f"- CPU: {m['cpu']}, {m['cores']} cores ({m['usable_cores']} usable)",
        f"- RAM: {m['ram_bytes'] / 2**30:.1f} GiB",
        f"- Kernel: {m['kernel']}",
        f"- Python {v.get('python')}, torch {v.get('torch')}, numpy {v.get('numpy')}, "
        f"safetensors {v.get('safetensors')}, picklescan {v.get('picklescan')}, ml_dtypes {v.get('ml_dtypes')}",
        f"- tensorplay {v.get('tensorplay')}, commit {m['tensorplay_commit']}, core sha256 "
        f"{v.get('tensorplay_core_sha256')}{' (a snapshot taken at the start)' if results.get('snapshot') else ''}",
        f"- Load average when the run started: {', '.join(f'{x:.2f}' for x in load) if load else 'unknown'}"
        " (the machine may be shared; min is the least disturbed run)",
        f"- Transparent huge pages: enabled `{thp.get('enabled')}`, defrag `{thp.get('defrag')}`; tensorplay: "
        f"{v.get('tensorplay_huge_pages', 'unknown')}. numpy madvises huge pages for arrays of 4 MiB and more, "
        "so with defrag on madvise the first touch of a big numpy-allocated result (safetensors.numpy) can stall "
        "in memory compaction: compare medians with minimums there.",
        "",
        "## Method",
        "",
        f"- Scale: **{results['scale']}**; {results['runs']} runs per operation "
        f"({'below the 5 the suite is meant for: a development run' if results['runs'] < 5 else 'round-robin'}).",
        "- Every run is a fresh Python process that imports its modules first; only the operation is timed.",
        "- Warm page cache: each checkpoint's files are read once before every round of runs.",
        "- Peak RSS Δ: the child's peak RSS (VmHWM, reset just before the operation) minus its RSS before it, "
        "median over runs. Pages of a memory-mapped file count once touched. "
        "Anon Δ: the change in anonymous (non-file) RSS, i.e. memory the load allocated and kept.",
        "- `+ touch` reads one byte of every page of every loaded tensor after the load, and is timed with it.",
        "- Whole-process rows (CLIs) include interpreter start-up and imports; their RSS is the absolute peak.",
        "- tensorplay and picklescan are byte-compiled before the first run, as `pip install` leaves them "
        "(a first call then runs in a heap the imports grew less: see benches/README.md).",
        "- `, warm` scan rows first scan a small other checkpoint in the same process (untimed), so the code is "
        "paged in: what a long-running scanning service sees from its second file on. The plain rows are the "
        "first call of a fresh process.",
        f"- `, per file in a batch` scan rows, after that warm-up, scan the same file over and over for "
        f"{BATCH_SECONDS} s (at least twice) and report the mean time per scan: a scanning service's throughput.",
    ]
    for u in results.get("updates", []):
        lines.append(f"- Re-measured by `{u['command']}` at {u['at']} (commit {u['commit']}, core sha256 "
                     f"{u['core_sha256']}): only the checkpoints and operations it names.")
    if results.get("skipped_notes"):
        lines += ["", "Skipped operations:", ""]
        lines += [f"- `{k}`: {why}" for k, why in results["skipped_notes"].items()]
    lines += ["", "## Results", ""]
    for ck in CHECKPOINTS:
        entry = results["checkpoints"].get(ck)
        if not entry:
            continue
        info = entry["info"]
        lines += [
            f"### {ck}",
            "",
            f"torch file {info['torch_file_bytes'] / MIB:.1f} MiB ({info['tensors']} tensors in "
            f"{info['storages']} storages, payload {info['payload_bytes'] / MIB:.1f} MiB); safetensors file "
            f"{info['safetensors_file_bytes'] / MIB:.1f} MiB ({info['safetensors_tensors']} tensors)"
            + (f"; DCP folder {info['dcp_bytes'] / MIB:.1f} MiB ({info['dcp_tensors']} tensors, payload "
               f"{info['dcp_payload_bytes'] / MIB:.1f} MiB, and non-tensor items)" if "dcp" in info else "")
            + f". Measured {entry['measured_at']}.",
            "",
            "| operation | median ms | min ms | peak RSS Δ MiB | anon Δ MiB | runs |",
            "| --- | ---: | ---: | ---: | ---: | ---: |",
        ]
        for op in OPS:
            e = entry["ops"].get(op.id)
            if e is None:
                continue
            if "skipped" in e:
                lines.append(f"| {e['label']} | skipped | | | | 0 |")
            elif not e.get("n"):
                lines.append(f"| {e['label']} | error: {'; '.join(e['errors'])[:120]} | | | | 0 |")
            else:
                err = f" ({len(e['runs']) - e['n']} failed)" if e["errors"] else ""
                lines.append(f"| {e['label']} | {fmt_ms(e['median_ms'])} | {fmt_ms(e['min_ms'])} | "
                             f"{fmt_mib(e['peak_delta_mib'])} | {fmt_mib(e.get('anon_delta_mib'))} | {e['n']}{err} |")
        lines.append("")
    lines += ["## Ratios", ""] + ratio_tables(results) + [""]
    cold = results.get("cold_cache")
    if cold:
        lines += ["## Cold page cache (gpt2)", "",
                  "Each run first evicts the file from the page cache (`posix_fadvise(POSIX_FADV_DONTNEED)`), so "
                  "the load reads it from the disk; the warm rows above read it from memory.", "",
                  "| operation | median ms | min ms | ÷ read-file floor (cold) |", "| --- | ---: | ---: | ---: |"]
        floor = cold.get("floor_read", {}).get("median_ms")
        for e in cold.values():
            if not e.get("n"):
                lines.append(f"| {e['label']} | error: {'; '.join(e['errors'])[:120]} | | |")
                continue
            ratio = f"{e['median_ms'] / floor:.2f}×" if floor else ""
            lines.append(f"| {e['label']} | {fmt_ms(e['median_ms'])} | {fmt_ms(e['min_ms'])} | {ratio} |")
        lines.append("")
    repeated = results.get("repeated_loads")
    if repeated:
        lines += ["## Repeated loads in one process", "",
                  "Each file loaded 15 times in one fresh process, the last load's objects dropped before the next: "
                  "the first load, and the steady state (median of loads 6-15) with its minor page faults per "
                  "load; medians over runs.", "",
                  "| file | loader | first ms | steady ms | faults per load | steady: torch ÷ tensorplay |",
                  "| --- | --- | ---: | ---: | ---: | ---: |"]
        for label, by_op in repeated.items():
            ours, theirs = by_op.get("tp_torch_eager_repeat", {}), by_op.get("torch_load_repeat", {})
            ratio = (f"{theirs['steady_ms'] / ours['steady_ms']:.2f}x"
                     if ours.get("steady_ms") and theirs.get("steady_ms") else "")
            for op, e in by_op.items():
                if not e.get("n"):
                    lines.append(f"| {label} | {REPEAT_OPS[op]} | error: {'; '.join(e['errors'])[:120]} | | | |")
                    continue
                lines.append(f"| {label} | {REPEAT_OPS[op]} | {fmt_ms(e['first_ms'])} | {fmt_ms(e['steady_ms'])} "
                             f"| {e['steady_faults']:.0f} | {ratio if op == 'tp_torch_eager_repeat' else ''} |")
        lines.append("")
    sweep = results.get("threads_sweep")
    if sweep:
        lines += ["## Copy threads (tensorplay eager load of gpt2, torch backend)", ""]
        if "skipped" in sweep:
            lines.append(f"Skipped: {sweep['skipped']}.")
        else:
            lines += ["| TENSORPLAY_THREADS | median ms | min ms | peak RSS Δ MiB |", "| --- | ---: | ---: | ---: |"]
            for key, e in sweep.items():
                if e.get("n"):
                    lines.append(f"| {key} | {fmt_ms(e['median_ms'])} | {fmt_ms(e['min_ms'])} | "
                                 f"{fmt_mib(e['peak_delta_mib'])} |")
                else:
                    lines.append(f"| {key} | error: {'; '.join(e.get('errors', []))[:120]} | | |")
        lines.append("")
    return "\n".join(lines)


# --- smoke checks ---------------------------------------------------------------------


def smoke_problems(results: dict) -> list[str]:
    problems = []
    for ck, entry in results["checkpoints"].items():
        info = entry["info"]
        for op_id, e in entry["ops"].items():
            if "skipped" in e:
                continue
            if e["errors"] or not e.get("n"):
                problems.append(f"{ck}/{op_id}: {'; '.join(e['errors']) or 'no result'}")
                continue
            if not e["median_ms"] > 0:
                problems.append(f"{ck}/{op_id}: no time measured")
            want = None
            if OPS_BY_ID[op_id].file == "dcp":  # every loader's result, nested as saved
                want = f"{info['dcp_tensors']} tensors"
            elif op_id.startswith(("tp_torch", "tp_numpy", "torch_load")):
                want = f"{info['tensors']} tensors"
            elif op_id.startswith("st_"):
                want = f"{info['safetensors_tensors']} tensors"
            if want and e.get("result") != want:
                problems.append(f"{ck}/{op_id}: returned {e.get('result')}, expected {want}")
    return problems


# --- main -----------------------------------------------------------------------------


def _repeats(tokens: list[str], command: str) -> bool:
    """Does a run with --only TOKENS re-measure everything the earlier COMMAND did?"""
    earlier = command.split("--only ", 1)[1].split()[0].split(",") if "--only " in command else []

    def covered(names: list[str], universe) -> set[str]:
        return {t for t in names if t in universe} or set(universe)

    return bool(earlier) and all(
        covered(earlier, u) <= covered(tokens, u) for u in (CHECKPOINTS, OPS_BY_ID)
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="tensorplay side-by-side benchmarks")
    ap.add_argument("--scale", choices=["small", "full"], default="small")
    ap.add_argument("--runs", type=int, default=5, help="runs per operation (default 5)")
    ap.add_argument("--only", default="", help="comma-separated checkpoint names and/or operation ids")
    ap.add_argument("--data", type=Path, default=HERE / "data", help="where generate.py wrote (default benches/data)")
    ap.add_argument("--out", type=Path, default=HERE / "out", help="raw results folder (default benches/out)")
    ap.add_argument("--results", type=Path, default=HERE / "RESULTS.md", help="report (default benches/RESULTS.md)")
    ap.add_argument("--threads-sweep", action="store_true",
                    help="also time tensorplay's eager gpt2 load with TENSORPLAY_THREADS=1 against the default")
    ap.add_argument("--cold", action="store_true",
                    help="also time gpt2's eager and touched-mmap loads with its file evicted from the page cache")
    ap.add_argument("--repeated", action="store_true",
                    help="also time 15 loads in one process of small files, tensorplay against torch")
    ap.add_argument("--snapshot", action="store_true",
                    help="copy the installed tensorplay package to a temp dir first and measure that copy "
                         "(for a work tree that others may rebuild during a long run)")
    ap.add_argument("--smoke", action="store_true",
                    help="CI check: generate small data in a temp dir, run every operation once, check the runner")
    args = ap.parse_args(argv)
    if args.runs < 1:
        ap.error("--runs must be at least 1")

    tokens = [t for t in args.only.split(",") if t]
    bad = [t for t in tokens if t not in CHECKPOINTS and t not in OPS_BY_ID]
    if bad:
        ap.error(f"unknown --only names {bad}; checkpoints: {CHECKPOINTS}; operations: {list(OPS_BY_ID)}")
    cks = [c for c in CHECKPOINTS if c in tokens] or CHECKPOINTS
    ops = [op for op in OPS if op.id in tokens] or OPS

    t_start = time.perf_counter()
    tmp = None
    if args.smoke:
        tmp = tempfile.TemporaryDirectory(prefix="tensorplay-bench-smoke-")
        root = Path(tmp.name)
        args.scale, args.data, args.out, args.results = "small", root / "data", root / "out", root / "RESULTS.md"
        args.runs = 1  # every operation once: the smoke test checks the runner, not timings
        gen = subprocess.run([sys.executable, str(HERE / "generate.py"), "--scale", "small", "--out", str(args.data)],
                             capture_output=True, text=True)
        if gen.returncode:
            print(f"smoke: generate.py failed:\n{gen.stderr[-2000:]}")
            return 1

    log = (lambda msg: None) if args.smoke else (lambda msg: print(msg, flush=True))
    data = args.data / args.scale
    manifest_path = data / "manifest.json"
    if not manifest_path.exists():
        print(f"no {args.scale} checkpoints in {data}: run `python benches/generate.py --scale {args.scale}` first")
        return 2
    manifest = json.loads(manifest_path.read_text())
    missing = [c for c in cks if c not in manifest["checkpoints"]]
    if missing:
        print(f"{missing} missing from {manifest_path}: run generate.py --scale {args.scale}")
        return 2
    # Data written before the DCP folders existed: their operations have nothing to read.
    add_dcp = f"`python benches/generate.py --scale {args.scale} --only gpt2,many_small` adds them"
    if any(op.id in tokens and op.file == "dcp" for op in ops) and not any(
            "dcp" in manifest["checkpoints"][c] for c in cks):
        print(f"no DCP folder for {cks} in {manifest_path}: {add_dcp}")
        return 2
    if any(op.file == "dcp" for op in ops) and not any("dcp" in i for i in manifest["checkpoints"].values()):
        log(f"no DCP folders in {manifest_path}, so no DCP operations ({add_dcp})")
    # Only checkpoints that have a file some chosen operation reads (--only tp_dcp_full: the DCP ones).
    cks = [c for c in cks if any(op.file in manifest["checkpoints"][c] for op in ops)]

    if args.snapshot:
        # Freeze the tensorplay under test (its Python files and built core) for the
        # whole run, even if the work tree is rebuilt meanwhile: every child, and the
        # `tensorplay` command, import the copy through PYTHONPATH.
        snap = tempfile.TemporaryDirectory(prefix="tensorplay-bench-snapshot-")
        src = Path(probe()["tensorplay_path"])
        shutil.copytree(src, Path(snap.name) / "tensorplay", ignore=shutil.ignore_patterns("__pycache__"))
        os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [snap.name, os.environ.get("PYTHONPATH")]))
    info = probe()
    caps = info["caps"]
    picklescan = importlib.util.find_spec("picklescan")
    dirs = [info["tensorplay_path"]] if info.get("tensorplay_path") else []
    if picklescan and picklescan.submodule_search_locations:
        dirs += picklescan.submodule_search_locations
    compile_bytecode(dirs)
    results = {
        "scale": args.scale,
        "runs": args.runs,
        "command": "python benches/run.py " + " ".join(argv if argv is not None else sys.argv[1:]),
        "machine": machine(info),
        "caps": caps,
        "snapshot": bool(args.snapshot),
        "checkpoints": {},
    }
    raw = args.out / "results.json"
    if not args.smoke and raw.exists() and (tokens or not set(cks) >= set(CHECKPOINTS)):
        # A partial run (--only) updates the previous results of the same scale and run count.
        old = json.loads(raw.read_text())
        if old.get("scale") == args.scale and old.get("runs") != args.runs:
            # Measured anyway, it would replace every other row with nothing.
            print(f"the {args.scale} results in {raw} are from {old.get('runs')} runs per operation: "
                  f"a partial run must use --runs {old.get('runs')} (or remove {raw} to start over)")
            return 2
        if old.get("scale") == args.scale:
            results["checkpoints"] = old.get("checkpoints", {})
            results["threads_sweep"] = old.get("threads_sweep")
            results["repeated_loads"] = old.get("repeated_loads")
            results["cold_cache"] = old.get("cold_cache")
            # The header keeps describing the run that made most of the numbers; the
            # partial re-measurements are listed with their own commit.
            # An earlier re-measurement this one repeats in full is no longer shown.
            results["updates"] = [u for u in old.get("updates", []) if not _repeats(tokens, u["command"])] + [{
                "command": results["command"],
                "commit": results["machine"]["tensorplay_commit"],
                "core_sha256": info.get("tensorplay_core_sha256"),
                "at": dt.datetime.now().isoformat(timespec="seconds"),
            }]
            results["command"], results["machine"] = old["command"], old["machine"]
            results["written_at"] = old.get("written_at") or old.get("finished_at")
            results["skipped_notes_before"] = old.get("skipped_notes", {})
    log(f"scale {args.scale}, {args.runs} runs, checkpoints {cks}; tensorplay {info.get('tensorplay')}, "
        f"torch {info.get('torch')}")
    for ck in cks:
        entry = measure_checkpoint(ck, manifest["checkpoints"][ck], data, ops, caps, args.runs, args.smoke, log)
        if tokens and ck in results["checkpoints"] and set(o.id for o in ops) != set(OPS_BY_ID):
            results["checkpoints"][ck]["ops"].update(entry["ops"])  # only some operations were re-measured
        else:
            results["checkpoints"][ck] = entry
        results["finished_at"] = dt.datetime.now().isoformat(timespec="seconds")
        args.out.mkdir(parents=True, exist_ok=True)
        raw.write_text(json.dumps(results, indent=1) + "\n")  # after each checkpoint: a crash keeps the rest
    if args.threads_sweep or args.smoke:
        if "gpt2" in manifest["checkpoints"]:
            results["threads_sweep"] = threads_sweep(data, manifest["checkpoints"]["gpt2"], caps,
                                                     1 if args.smoke else args.runs, log)
    if (args.cold or args.smoke) and "gpt2" in manifest["checkpoints"]:
        results["cold_cache"] = cold_cache(data, manifest["checkpoints"]["gpt2"], 1 if args.smoke else args.runs, log)
    if (args.repeated or args.smoke) and "repeat" in manifest:
        results["repeated_loads"] = repeated_loads(data, manifest["repeat"], 1 if args.smoke else args.runs, log)
    results["skipped_notes"] = results.pop("skipped_notes_before", {})
    results["skipped_notes"].update(
        {op.id: SKIP_REASONS[op.needs] for op in ops if op.needs and not caps.get(op.needs)})
    if isinstance(results.get("threads_sweep"), dict) and "skipped" in results["threads_sweep"]:
        results["skipped_notes"]["threads sweep"] = results["threads_sweep"]["skipped"]
    results["finished_at"] = dt.datetime.now().isoformat(timespec="seconds")
    args.out.mkdir(parents=True, exist_ok=True)
    raw.write_text(json.dumps(results, indent=1) + "\n")
    report = render(results)
    args.results.write_text(report.rstrip("\n") + "\n" + kept_sections(args.results))
    if args.scale == "full":  # the chart on the docs' Performance page (benches/chart.py)
        chart.CHART.write_text(chart.draw(args.results.read_text()))

    if args.smoke:
        problems = smoke_problems(results)
        sweep = results.get("threads_sweep") or {}
        problems += [f"threads sweep/{k}: {e['errors']}" for k, e in sweep.items()
                     if isinstance(e, dict) and e.get("errors")]
        problems += [f"cold cache/{op}: {e['errors'] or 'not run'}"
                     for op, e in (results.get("cold_cache") or {}).items() if e["errors"] or not e["n"]]
        problems += [f"repeated loads/{label}/{op}: {e['errors'] or 'not run'}"
                     for label, by_op in (results.get("repeated_loads") or {}).items()
                     for op, e in by_op.items() if e["errors"] or not e["n"]]
        n_ops = sum(1 for e in results["checkpoints"].values() for o in e["ops"].values() if "skipped" not in o)
        skipped = sorted(results["skipped_notes"])
        tmp.cleanup()
        status = "FAILED" if problems else "ok"
        print(f"bench smoke {status}: {n_ops} operations on {len(results['checkpoints'])} checkpoints in "
              f"{time.perf_counter() - t_start:.1f} s; skipped: {', '.join(skipped) or 'none'}")
        for p in problems[:20]:
            print(f"  {p}")
        return 1 if problems else 0
    log(f"wrote {args.results} and {raw} in {time.perf_counter() - t_start:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
