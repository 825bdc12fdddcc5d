"""The malicious corpus (tests/malicious/): tensorplay.load must refuse every file
with exactly the manifest's exception class, and no payload may run.

Each load runs in a worker subprocess (tests/malicious/load_worker.py) whose address
space is capped at what it uses after imports plus 4 GiB, with a wall-clock bound per
load: a crash, a hang or runaway memory fails one test instead of the run. The worker
and the test both work in the test's tmp_path, where every payload would create
``tensorplay_pwned_marker``.
"""
from __future__ import annotations

import bz2
import gzip
import io
import json
import lzma
import os
import pathlib
import select
import struct
import subprocess
import sys
import tarfile
import tempfile
import time
import zipfile
import zlib
from collections.abc import Iterator

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
FAMILIES = ("code_execution", "scanner_evasion", "numpy", "legacy", "resource", "tensor_metadata",
            "compressed_wrapper", "zip_confusion", "pickle_differential", "nested_payload", "gadget", "dcp",
            "reader_model")
EXIT_CODES = {"unsafe": 1, "unreadable": 2}  # `tensorplay scan`'s exit code for one file of that verdict
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

def _sevenzip_members(data: bytes) -> list[bytes]:
    """The files of a 7z archive as make_corpus.py writes them (a plain header, one
    folder of one coder per file), decoded with Python's own lzma, bz2 and zlib."""
    next_offset, next_size = struct.unpack_from("<QQ", data, 12)
    header = data[32 + next_offset:32 + next_offset + next_size]
    pos = 0

    def byte() -> int:
        nonlocal pos
        pos += 1
        return header[pos - 1]

    def number() -> int:  # 7z's: leading one bits of the first byte count the bytes that follow
        first, value = byte(), 0
        for k in range(8):
            if not first & (0x80 >> k):
                return value | ((first & ((0x80 >> k) - 1)) << (8 * k))
            value |= byte() << (8 * k)
        return value

    assert [byte(), byte(), byte()] == [0x01, 0x04, 0x06], "not a plain 7z header"
    pack_pos, count = number(), number()
    assert byte() == 0x09
    sizes = [number() for _ in range(count)]
    assert byte() == 0x00 and [byte(), byte()] == [0x07, 0x0B]
    folders = number()
    assert byte() == 0 and folders == count
    coders = []
    for _ in range(folders):
        assert number() == 1, "one coder a folder"
        flags = byte()
        method = bytes(byte() for _ in range(flags & 0x0F))
        props = bytes(byte() for _ in range(number())) if flags & 0x20 else b""
        coders.append((method, props))
    assert byte() == 0x0C
    unpacked = [number() for _ in range(folders)]
    out, at = [], 32 + pack_pos
    for size, (method, props), usize in zip(sizes, coders, unpacked):
        packed, at = data[at:at + size], at + size
        if method == b"\x00":
            out.append(packed)
        elif method == b"\x21":
            out.append(lzma.decompress(packed, lzma.FORMAT_RAW, filters=[{"id": lzma.FILTER_LZMA2,
                                                                         "dict_size": 1 << 20}]))
        elif method == b"\x03\x01\x01":
            lc, rest = props[0] % 9, props[0] // 9
            filters = [{"id": lzma.FILTER_LZMA1, "lc": lc, "lp": rest % 5, "pb": rest // 5,
                        "dict_size": struct.unpack_from("<I", props, 1)[0]}]
            # No end marker: the folder's unpacked size ends the stream.
            out.append(lzma.LZMADecompressor(lzma.FORMAT_RAW, filters=filters).decompress(packed, usize))
        elif method == b"\x04\x02\x02":
            out.append(bz2.decompress(packed))
        elif method == b"\x04\x01\x08":
            out.append(zlib.decompress(packed, -15))
        else:
            raise AssertionError(f"7z method {method.hex()}")
    return out


def _unwrapped(data: bytes) -> list[bytes]:
    """What Python's own decompressors and archive readers make of `data` (gzip, bzip2,
    xz, LZMA-alone, zlib, tar, zip, and make_corpus's 7z). zstd has no module before
    Python 3.14: the corpus writes it as raw blocks, whose bytes are the file's own."""
    found = []
    attempts = [
        (data[:2] == b"\x1f\x8b", lambda: [gzip.decompress(data)]),
        (data[:3] == b"BZh", lambda: [bz2.decompress(data)]),
        (data[:6] == b"\xfd7zXZ\x00", lambda: [lzma.decompress(data)]),
        (data[:1] == b"\x5d", lambda: [lzma.decompress(data, lzma.FORMAT_ALONE)]),
        (len(data) > 2 and data[0] & 0x0F == 8 and (data[0] << 8 | data[1]) % 31 == 0,
         lambda: [zlib.decompress(data)]),
        (data[:6] == b"7z\xbc\xaf\x27\x1c", lambda: _sevenzip_members(data)),
        (True, lambda: [tar.extractfile(m).read() for tar in [tarfile.open(fileobj=io.BytesIO(data))]
                        for m in tar.getmembers() if m.isfile()]),
        (b"PK\x05\x06" in data, lambda: [z.read(info) for z in [zipfile.ZipFile(io.BytesIO(data))]
                                         for info in z.infolist()]),
    ]
    for applies, unwrap in attempts:
        if applies:
            try:
                found += unwrap()
            except Exception:  # noqa: BLE001 - not that format after all (or a hostile header)
                pass
    return found


def _views(data: bytes, depth: int = 0) -> Iterator[bytes]:
    """The file's bytes, then, recursively and only as far as the caller reads on,
    everything unwrapped from them (lazily: the corpus's zip bombs would otherwise be
    inflated, and a zip listing one member 40 times four levels deep read 40**4 times)."""
    yield data
    if depth < 4:
        for inner in _unwrapped(data):
            yield from _views(inner, depth + 1)


def test_manifest_describes_a_complete_corpus():
    names = [e["file"] for e in MANIFEST]
    assert len(names) == len(set(names)), "duplicate file names"
    assert len(names) >= 200
    assert {e["family"] for e in MANIFEST} == set(FAMILIES)
    assert sorted(p.name for p in FILES.iterdir()) == sorted(names), "files/ and the manifest differ"
    for e in MANIFEST:
        assert set(e) - {"readers"} == {"file", "family", "description", "load_error", "scan_verdict",
                                        "dangerous_globals"}, e
        assert e["load_error"] in ERRORS, e
        assert issubclass(getattr(tensorplay, e["load_error"]), __import__("pickle").UnpicklingError)
        data = (FILES / e["file"]).read_bytes()
        assert len(data) < 64 * 1024 or e["file"] in BIG_FILES, f"{e['file']} is {len(data)} bytes"
        if e["dangerous_globals"]:
            assert e["scan_verdict"] == "unsafe", e
        # Compressed and archived payloads are looked for in what Python's own readers unwrap.
        if e["scan_verdict"] == "unsafe":
            found = any(MARKER.encode() in v for v in _views(data))
            assert found, f"{e['file']}: the payload does not target the marker"
        for name in e["dangerous_globals"]:
            module, _, attr = name.rpartition(".")
            found = any(attr.encode() in v for v in _views(data))
            assert module and found, f"{e['file']}: {name} not found in the file"


@pytest.mark.skipif(not has_torch(), reason="the generator saves some tensor_metadata cases with torch")
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
    """Reading only the directory, the pickles and a few local headers misses no
    global the directory leads to: every unsafe file is unsafe with the full scan's
    findings, but for entries in local headers no directory lists, which it finds
    only before the first entry, after the pickles and before the directory (the
    full scan looks between every two payloads). What it gives up is the load's
    other refusals (limits, tensors outside their storage, compressed payloads),
    so a file only a load would refuse is clean or unreadable, never unsafe."""
    from tensorplay import scanner

    full = scanner.scan(FILES / entry["file"])
    quick = scanner.scan(FILES / entry["file"], pickles_only=True)
    listed = {f for f in full.findings if "[an unlisted local header]" not in f.location}
    if listed:
        assert quick.verdict == "unsafe", (quick.findings, quick.problems)
    elif full.findings:
        assert quick.verdict in ("unsafe", "unreadable"), (quick.findings, quick.problems)
    else:
        assert quick.verdict in ("clean", "unreadable") and not quick.findings
    assert listed <= set(quick.findings) <= set(full.findings)


WITH_DANGEROUS = [e for e in MANIFEST if e["dangerous_globals"]]


@pytest.mark.parametrize("entry", WITH_DANGEROUS, ids=[e["file"] for e in WITH_DANGEROUS])
def test_get_unsafe_globals_in_checkpoint_lists_every_dangerous_global(entry, tmp_path, monkeypatch):
    """torch's function, answered for every file: a file it cannot list is no answer."""
    from tensorplay.serialization import get_unsafe_globals_in_checkpoint

    monkeypatch.chdir(tmp_path)
    found = get_unsafe_globals_in_checkpoint(FILES / entry["file"])
    assert not (tmp_path / MARKER).exists()
    assert set(entry["dangerous_globals"]) <= set(found), found


def test_the_scan_command_exits_1_on_the_corpus():
    result = subprocess.run([sys.executable, "-m", "tensorplay", "scan", "--json", str(FILES)],
                            capture_output=True, text=True)
    assert result.returncode == 1
    verdicts = {pathlib.Path(r["path"]).name: r["verdict"] for r in json.loads(result.stdout)["files"]}
    assert verdicts == {e["file"]: e["scan_verdict"] for e in MANIFEST}


# --- the command line on every file: from a pipe, and through symbolic links -----------
# `scan -` and links inside a scanned folder are specified in the command's issue; until
# they land, these fail (today `-` is a missing path, and folder walks skip links).

@pytest.mark.parametrize("entry", MANIFEST, ids=[e["file"] for e in MANIFEST])
def test_the_scan_command_reads_each_file_from_stdin(entry, tmp_path):
    """`tensorplay scan -` with the file piped in: the manifest's exit code, and the
    report a scan of the same bytes gives (a pipe has no name to go by)."""
    from tensorplay import scanner

    data = (FILES / entry["file"]).read_bytes()
    result = subprocess.run([sys.executable, "-m", "tensorplay", "scan", "--json", "-"], input=data,
                            capture_output=True, cwd=tmp_path, timeout=60)
    assert not (tmp_path / MARKER).exists()
    assert result.returncode == EXIT_CODES[entry["scan_verdict"]], (result.stdout[-2000:], result.stderr[-2000:])
    (report,) = json.loads(result.stdout)["files"]
    expected = scanner.scan(data)
    assert report["verdict"] == entry["scan_verdict"]
    assert [g["name"] for g in report["globals"]] == [f.name for f in expected.findings]
    assert report["problems"] == [p.to_json() for p in expected.problems]


@pytest.fixture(scope="module")
def scan_of_linked_folder(tmp_path_factory):
    """`tensorplay scan --json` of a folder holding one symbolic link per corpus file."""
    folder = tmp_path_factory.mktemp("links")
    for entry in MANIFEST:
        (folder / entry["file"]).symlink_to(FILES / entry["file"])
    result = subprocess.run([sys.executable, "-m", "tensorplay", "scan", "--json", str(folder)],
                            capture_output=True, text=True, cwd=folder, timeout=600)
    reports = {pathlib.Path(r["path"]).name: r for r in json.loads(result.stdout)["files"]}
    return result, reports


@pytest.mark.parametrize("entry", MANIFEST, ids=[e["file"] for e in MANIFEST])
def test_a_folder_of_links_is_scanned_like_the_files(entry, scan_of_linked_folder):
    """A link in a scanned folder is scanned as the file it points to."""
    result, reports = scan_of_linked_folder
    assert result.returncode == 1, result.stderr[-2000:]
    assert entry["file"] in reports, f"no report for the link {entry['file']}"
    report = reports[entry["file"]]
    assert report["verdict"] == entry["scan_verdict"], report
    dangerous = {g["name"] for g in report["globals"] if g["dangerous"]}
    assert set(entry["dangerous_globals"]) <= dangerous, report["globals"]


# Files whose manifest names the real readers that run their payload (the oracle
# harness's, tests/oracle/readers.py): each reader, run on the file in the
# harness's sandbox, must create the marker, or the case proves nothing.
PROVEN = [e for e in MANIFEST if e.get("readers")]


@pytest.fixture(scope="module")
def oracle_sandbox():
    from oracle.sandbox import Sandbox

    with Sandbox(timeout=30.0) as box:
        yield box


@pytest.mark.parametrize("entry", PROVEN, ids=[e["file"] for e in PROVEN])
def test_the_readers_a_file_names_run_its_payload(entry, oracle_sandbox):
    outcomes = oracle_sandbox.run(str(FILES / entry["file"]), False, entry["readers"])
    assert {name: o.fired for name, o in outcomes.items()} == {name: True for name in entry["readers"]}, outcomes
