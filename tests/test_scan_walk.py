"""What `tensorplay scan` reads when handed folders, links, pipes and standard input:
every file a loader could open by a name under the scanned paths is scanned as that
file, and what cannot be read is reported UNREADABLE (exit 2), never passed over."""
from __future__ import annotations

import json
import os
import pathlib
import pickle
import subprocess
import sys
import threading
import time

import pytest
from tensorplay import scanner

EVIL = pickle.dumps(os.system, protocol=2)  # names posix.system; nothing runs on a scan
CLEAN = pickle.dumps({"w": [1.0, 2.0]}, protocol=2)


def run_scan(*args: str, stdin: bytes | None = None, cwd: pathlib.Path | None = None) -> tuple[int, list[dict]]:
    result = subprocess.run([sys.executable, "-m", "tensorplay", "scan", "--json", *args], input=stdin,
                            capture_output=True, cwd=cwd, timeout=120)
    return result.returncode, json.loads(result.stdout)["files"]


def hub_cache(root: pathlib.Path, blob: bytes) -> pathlib.Path:
    """A Hugging Face cache entry: the snapshot's files are relative links into blobs/."""
    model = root / "models--org--name"
    (model / "blobs").mkdir(parents=True)
    (model / "blobs" / "0123abcd").write_bytes(blob)
    snapshot = model / "snapshots" / "rev1"
    snapshot.mkdir(parents=True)
    (snapshot / "pytorch_model.bin").symlink_to(os.path.join("..", "..", "blobs", "0123abcd"))
    return snapshot


def test_a_hub_snapshot_of_links_is_scanned_through_its_links(tmp_path):
    snapshot = hub_cache(tmp_path, EVIL)
    code, reports = run_scan(str(snapshot))
    assert code == 1
    (report,) = reports
    assert report["path"].endswith("pytorch_model.bin") and report["verdict"] == "unsafe"
    assert "posix.system" in {g["name"] for g in report["globals"]}


def test_a_link_to_a_folder_is_walked(tmp_path):
    hub_cache(tmp_path / "real", EVIL)
    (tmp_path / "scanned").mkdir()
    (tmp_path / "scanned" / "cache").symlink_to(tmp_path / "real", target_is_directory=True)
    code, reports = run_scan(str(tmp_path / "scanned"))
    assert code == 1
    assert {r["verdict"] for r in reports} == {"unsafe"} and len(reports) == 2  # the blob and its link


def test_a_loop_of_folder_links_is_walked_once(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "model.pt").write_bytes(EVIL)
    (tmp_path / "a" / "again").symlink_to(tmp_path / "a", target_is_directory=True)
    (tmp_path / "a" / "parent").symlink_to(tmp_path, target_is_directory=True)
    code, reports = run_scan(str(tmp_path))
    assert code == 1
    assert [pathlib.Path(r["path"]).name for r in reports] == ["model.pt"]


@pytest.mark.parametrize("kind", ["dangling", "loop"])
def test_a_link_that_leads_nowhere_is_unreadable(tmp_path, kind):
    (tmp_path / "ok.pt").write_bytes(CLEAN)
    if kind == "dangling":
        (tmp_path / "gone.pt").symlink_to(tmp_path / "missing.pt")
    else:
        (tmp_path / "gone.pt").symlink_to(tmp_path / "other.pt")
        (tmp_path / "other.pt").symlink_to(tmp_path / "gone.pt")
    code, reports = run_scan(str(tmp_path))
    assert code == 2
    verdicts = {pathlib.Path(r["path"]).name: r["verdict"] for r in reports}
    assert verdicts["ok.pt"] == "clean" and verdicts["gone.pt"] == "unreadable"
    gone = next(r for r in reports if r["path"].endswith("gone.pt"))
    (problem,) = gone["problems"]
    assert problem["kind"] == "io"
    assert "No such file" in problem["message"] or "symbolic links" in problem["message"]


def test_an_unlistable_folder_is_unreadable(tmp_path, monkeypatch):
    locked = tmp_path / "locked"
    locked.mkdir()
    (locked / "model.pt").write_bytes(EVIL)
    (tmp_path / "ok.pt").write_bytes(CLEAN)
    # What listing a folder without read permission raises (root may list any folder).
    real_scandir = os.scandir

    def scandir(path):
        if os.fspath(path) == str(locked):
            raise PermissionError(13, "Permission denied", os.fspath(path))
        return real_scandir(path)

    monkeypatch.setattr(os, "scandir", scandir)
    reports = {pathlib.Path(r.path).name: r for r in scanner.scan_paths([tmp_path])}
    assert reports["ok.pt"].verdict == "clean"
    assert reports["locked"].verdict == "unreadable" and "Permission denied" in reports["locked"].problems[0]
    assert reports["locked"].problems[0].kind == "io"


def test_a_pipe_inside_a_folder_is_unreadable_not_waited_on(tmp_path):
    (tmp_path / "model.pt").write_bytes(CLEAN)
    os.mkfifo(tmp_path / "stream.pt")
    code, reports = run_scan(str(tmp_path))
    assert code == 2
    verdicts = {pathlib.Path(r["path"]).name: r for r in reports}
    assert verdicts["model.pt"]["verdict"] == "clean"
    assert verdicts["stream.pt"]["verdict"] == "unreadable"
    (problem,) = verdicts["stream.pt"]["problems"]
    assert problem["kind"] == "not_a_regular_file" and "not a regular file" in problem["message"]


def test_a_named_pipe_is_read_as_a_stream(tmp_path):
    fifo = tmp_path / "upload.pt"
    os.mkfifo(fifo)

    def feed() -> None:
        with open(fifo, "wb") as f:
            f.write(EVIL)

    writer = threading.Thread(target=feed)
    writer.start()
    code, reports = run_scan(str(fifo))
    writer.join(timeout=60)
    assert code == 1 and reports[0]["verdict"] == "unsafe"


@pytest.mark.parametrize("read", ["pickles_only", "unsafe_globals"])
def test_a_named_pipe_keeps_its_reader_through_the_quick_path(tmp_path, read):
    """The quick paths (pickles only, torch's unsafe-globals list) first open a
    path to read a few ranges; a pipe they hand on must not lose its reader in
    between, or a writer still writing gets a broken pipe."""
    from tensorplay.serialization import get_unsafe_globals_in_checkpoint

    fifo = tmp_path / "upload.pt"
    os.mkfifo(fifo)
    failed: list[BaseException] = []

    def feed() -> None:
        try:
            with open(fifo, "wb", buffering=0) as f:
                for start in range(0, len(EVIL), 4):
                    f.write(EVIL[start:start + 4])
                    time.sleep(0.002)
        except BaseException as e:  # a broken pipe, reported by the test
            failed.append(e)

    found: list[object] = []

    def scan() -> None:
        if read == "pickles_only":
            report = scanner.scan(str(fifo), pickles_only=True)
            found.append((report.verdict, [f.name for f in report.findings]))
        else:
            found.append(get_unsafe_globals_in_checkpoint(str(fifo)))

    # Daemon threads: a reader waiting for a writer that broke must fail the test, not hang it.
    threads = [threading.Thread(target=feed, daemon=True), threading.Thread(target=scan, daemon=True)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert failed == []
    assert found == [("unsafe", ["posix.system"])] if read == "pickles_only" else found == [["posix.system"]]


@pytest.mark.parametrize("data, code, verdict", [(EVIL, 1, "unsafe"), (CLEAN, 0, "clean"), (b"", 0, "skipped")])
def test_a_dash_reads_standard_input(data, code, verdict, tmp_path):
    got, reports = run_scan("-", stdin=data, cwd=tmp_path)
    assert got == code
    (report,) = reports
    assert report["path"] == "-" and report["verdict"] == verdict


def test_dev_stdin_reads_the_pipe(tmp_path):
    got, reports = run_scan("/dev/stdin", stdin=EVIL, cwd=tmp_path)
    assert got == 1 and reports[0]["verdict"] == "unsafe"


def test_nothing_to_scan_exits_2(tmp_path):
    result = subprocess.run([sys.executable, "-m", "tensorplay", "scan", str(tmp_path)], capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 2
    assert "nothing was scanned" in result.stderr


def test_unsafe_outranks_unreadable_and_skipped_is_counted(tmp_path):
    (tmp_path / "evil.pt").write_bytes(EVIL)
    (tmp_path / "notes.txt").write_text("a readme, not a pickle\n")
    (tmp_path / "gone.pt").symlink_to(tmp_path / "missing")
    result = subprocess.run([sys.executable, "-m", "tensorplay", "scan", str(tmp_path)], capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 1
    assert result.stdout.rstrip().endswith("3 files: 0 clean, 1 unsafe, 1 unreadable, 1 skipped")


def test_iter_files_lists_what_a_scan_reports_on(tmp_path):
    snapshot = hub_cache(tmp_path, EVIL)
    listed = list(scanner.iter_files([tmp_path]))
    assert str(snapshot / "pytorch_model.bin") in listed
    assert [r.path for r in scanner.scan_paths([tmp_path])] == listed
