"""The malicious corpus (tests/malicious/): tensorplay.load must refuse every file
with exactly the manifest's exception class, and no payload may run.

Each load runs in a worker subprocess (tests/malicious/load_worker.py) whose address
space is capped at what it uses after imports plus 4 GiB, with a wall-clock bound per
load: a crash, a hang or runaway memory fails one test instead of the run. The worker
and the test both work in the test's tmp_path, where every payload would create
``tensorplay_pwned_marker``.
"""
from __future__ import annotations

import json
import os
import pathlib
import select
import subprocess
import sys
import tempfile
import time

import pytest
import tensorplay
from conftest import has_torch

MALICIOUS = pathlib.Path(__file__).resolve().parent / "malicious"
FILES = MALICIOUS / "files"
MANIFEST = json.loads((MALICIOUS / "manifest.json").read_text())
WORKER = MALICIOUS / "load_worker.py"
GENERATOR = MALICIOUS / "make_corpus.py"
MARKER = "tensorplay_pwned_marker"
LOAD_TIMEOUT = 20.0
START_TIMEOUT = 60.0
EXTRA_GIB = 4.0
ERRORS = ("UnsafeCheckpointError", "MalformedCheckpointError", "LimitExceededError", "UnsupportedCheckpointError")
FAMILIES = ("code_execution", "scanner_evasion", "numpy", "legacy", "resource", "tensor_metadata")
BIG_FILES = {"zipbomb_record_past_declared.pt"}  # a DEFLATE bomb needs ~64 KiB to inflate to 64 MiB

# Where tensorplay disagrees with the manifest today: bugs for the core, tracked here so
# the suite stays green. strict=True: a fix makes the test XPASS and fail, so the entry
# must then be removed. Keys are file names (all variants) or (file, backend, mmap).
# Files where tensorplay disagrees with the manifest: each entry is a bug to fix.
KNOWN: dict = {}

# Files that hung in one variant are not retried in the others (each hang costs LOAD_TIMEOUT).
HUNG: dict[str, str] = {}


class WorkerFailure(Exception):
    pass


class Worker:
    """One load_worker.py subprocess, restarted after it dies or times out."""

    def __init__(self, with_torch: bool):
        self.with_torch = with_torch
        self.proc: subprocess.Popen | None = None
        self.stderr = None
        self.buffer = b""

    def start(self) -> None:
        self.stderr = tempfile.TemporaryFile()
        args = [sys.executable, str(WORKER), "--extra-gib", str(EXTRA_GIB)]
        if self.with_torch:
            args.append("--torch")
        self.proc = subprocess.Popen(args, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.stderr)
        self.buffer = b""
        ready = self._read_line(START_TIMEOUT, "starting")
        assert ready.get("ready"), ready

    def stop(self) -> None:
        if self.proc is not None:
            if self.proc.poll() is None:
                self.proc.kill()
            self.proc.wait()
            self.proc = None
        if self.stderr is not None:
            self.stderr.close()
            self.stderr = None

    def _stderr_tail(self) -> str:
        if self.stderr is None:
            return ""
        self.stderr.seek(0)
        return self.stderr.read()[-3000:].decode("utf-8", "replace")

    def _read_line(self, timeout: float, what: str) -> dict:
        deadline = time.monotonic() + timeout
        fd = self.proc.stdout.fileno()
        while b"\n" not in self.buffer:
            left = deadline - time.monotonic()
            if left <= 0:
                tail = self._stderr_tail()
                self.stop()
                raise WorkerFailure(f"no answer after {timeout:.0f} s while {what} (hang?)\n{tail}")
            ready, _, _ = select.select([fd], [], [], left)
            if not ready:
                continue
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                code = self.proc.wait()
                tail = self._stderr_tail()
                self.stop()
                how = f"killed by signal {-code}" if code < 0 else f"exited with status {code}"
                raise WorkerFailure(f"the worker {how} while {what} (crash or out of memory)\n{tail}")
            self.buffer += chunk
        line, _, self.buffer = self.buffer.partition(b"\n")
        return json.loads(line)

    def load(self, path: pathlib.Path, backend: str, mmap: bool, cwd: pathlib.Path) -> dict:
        if self.proc is None:
            self.start()
        request = {"path": str(path), "backend": backend, "mmap": mmap, "cwd": str(cwd)}
        try:
            self.proc.stdin.write((json.dumps(request) + "\n").encode())
            self.proc.stdin.flush()
        except BrokenPipeError:
            pass  # the worker is gone; reading its output reports how it ended
        return self._read_line(LOAD_TIMEOUT, f"loading {path.name} ({backend}, mmap={mmap})")


@pytest.fixture(scope="module")
def workers():
    pool = {"numpy": Worker(with_torch=False), "torch": Worker(with_torch=True)}
    yield pool
    for worker in pool.values():
        worker.stop()


VARIANTS = [("numpy", False), ("numpy", True), ("torch", False), ("torch", True)]


def _cases():
    for entry in MANIFEST:
        for backend, mmap in VARIANTS:
            marks = []
            if backend == "torch" and not has_torch():
                marks.append(pytest.mark.skip(reason="torch not installed"))
            reason = KNOWN.get((entry["file"], backend, mmap)) or KNOWN.get(entry["file"])
            if reason:
                marks.append(pytest.mark.xfail(strict=True, reason=reason))
            ident = f"{entry['file']}-{backend}-{'mmap' if mmap else 'copy'}"
            yield pytest.param(entry, backend, mmap, id=ident, marks=marks)


@pytest.mark.parametrize("entry,backend,mmap", list(_cases()))
def test_load_refuses_without_running_anything(entry, backend, mmap, workers, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    if entry["file"] in HUNG:
        pytest.fail(f"not retried: the load hung in the {HUNG[entry['file']]} variant")
    try:
        result = workers[backend].load(FILES / entry["file"], backend, mmap, tmp_path)
    except WorkerFailure as e:
        if "no answer" in str(e):
            HUNG[entry["file"]] = f"{backend}/{'mmap' if mmap else 'copy'}"
        raise
    finally:
        ran = (tmp_path / MARKER).exists()
    assert not ran, f"a payload ran: {MARKER} was created"
    expected = entry["load_error"]
    if result["outcome"] == "returned":
        pytest.fail(f"loaded (returned a {result['type']}) instead of raising {expected}")
    assert result["tensorplay_class"] == expected, (
        f"raised {result['type']} instead of {expected}: {result['message']}\n{result.get('traceback', '')}"
    )
    assert result["unpickling_error"]


def test_worker_failures_are_reported(tmp_path):
    """A hang or a crash in a load must be a clean failure, and the worker must recover."""
    worker = Worker(with_torch=False)
    try:
        worker.start()
        worker.proc.kill()
        with pytest.raises(WorkerFailure, match="killed by signal"):
            worker.load(FILES / MANIFEST[0]["file"], "numpy", False, tmp_path)
        result = worker.load(FILES / MANIFEST[0]["file"], "numpy", False, tmp_path)
        assert result["outcome"] == "raised"
    finally:
        worker.stop()


# --- the corpus itself --------------------------------------------------------------

def test_manifest_describes_a_complete_corpus():
    names = [e["file"] for e in MANIFEST]
    assert len(names) == len(set(names)), "duplicate file names"
    assert len(names) >= 45
    assert {e["family"] for e in MANIFEST} == set(FAMILIES)
    assert sorted(p.name for p in FILES.iterdir()) == sorted(names), "files/ and the manifest differ"
    for e in MANIFEST:
        assert set(e) == {"file", "family", "description", "load_error", "scan_verdict", "dangerous_globals"}, e
        assert e["load_error"] in ERRORS, e
        assert issubclass(getattr(tensorplay, e["load_error"]), __import__("pickle").UnpicklingError)
        data = (FILES / e["file"]).read_bytes()
        assert len(data) < 64 * 1024 or e["file"] in BIG_FILES, f"{e['file']} is {len(data)} bytes"
        if e["dangerous_globals"]:
            assert e["scan_verdict"] == "unsafe", e
        if e["scan_verdict"] == "unsafe":
            assert MARKER.encode() in data, f"{e['file']}: the payload does not target the marker"
        for name in e["dangerous_globals"]:
            module, _, attr = name.rpartition(".")
            assert module and attr.encode() in data, f"{e['file']}: {name} not found in the file"


def test_corpus_on_disk_matches_the_generator(tmp_path):
    """Nobody edits the corpus by hand: regenerating it gives the same bytes."""
    subprocess.run([sys.executable, str(GENERATOR), "--out", str(tmp_path)], check=True,
                   capture_output=True, timeout=300)
    assert (tmp_path / "manifest.json").read_text() == (MALICIOUS / "manifest.json").read_text()
    fresh = sorted(p.name for p in (tmp_path / "files").iterdir())
    assert fresh == sorted(p.name for p in FILES.iterdir())
    for name in fresh:
        assert (tmp_path / "files" / name).read_bytes() == (FILES / name).read_bytes(), f"{name} differs"


@pytest.mark.parametrize("entry", MANIFEST, ids=[e["file"] for e in MANIFEST])
def test_scan_flags_every_file(entry, tmp_path, monkeypatch):
    """The scanner never calls a file clean; it names every code-execution global."""
    from tensorplay import scanner

    monkeypatch.chdir(tmp_path)
    report = scanner.scan(FILES / entry["file"])
    assert report.verdict == entry["scan_verdict"], (report.findings, report.problems)
    dangerous = {f.name for f in report.findings if f.dangerous}
    assert set(entry["dangerous_globals"]) <= dangerous, report.findings
    assert not (tmp_path / MARKER).exists()


@pytest.mark.parametrize("entry", MANIFEST, ids=[e["file"] for e in MANIFEST])
def test_a_pickles_only_scan_flags_every_global_the_full_scan_flags(entry):
    """Reading only the directory and the pickles misses no global the directory
    leads to: every unsafe file is unsafe with the same findings, but for entries
    in local headers no directory lists (found by walking the bytes between
    payloads, which a pickles-only scan does not read). What it gives up is the
    load's other refusals (limits, tensors outside their storage, compressed
    payloads), so a file only a load would refuse is clean or unreadable, never
    unsafe."""
    from tensorplay import scanner

    full = scanner.scan(FILES / entry["file"])
    quick = scanner.scan(FILES / entry["file"], pickles_only=True)
    listed = tuple(f for f in full.findings if "[an unlisted local header]" not in f.location)
    if listed:
        assert quick.verdict == "unsafe", (quick.findings, quick.problems)
        assert quick.findings == listed
    elif entry["scan_verdict"] == "unsafe":
        assert quick.verdict == "unreadable", (quick.findings, quick.problems)
    else:
        assert quick.verdict in ("clean", "unreadable") and not quick.findings


def test_the_scan_command_exits_1_on_the_corpus():
    result = subprocess.run([sys.executable, "-m", "tensorplay", "scan", "--json", str(FILES)],
                            capture_output=True, text=True)
    assert result.returncode == 1
    verdicts = {pathlib.Path(r["path"]).name: r["verdict"] for r in json.loads(result.stdout)}
    assert verdicts == {e["file"]: e["scan_verdict"] for e in MANIFEST}
