"""`tensorplay scan` policies: `--fail-on` says the least finding that fails
(a hub that accepts custom classes but blocks code execution passes
`--fail-on dangerous`), `--include`/`--exclude` choose the files of a folder
walk, and `--max-file-size` reports bigger files unreadable without reading
them. Every finding is reported whatever the policy lets through."""
from __future__ import annotations

import json
import pickle
import shutil
import subprocess
import sys

import pytest
from conftest import TORCH_FIXTURES

MALICIOUS = TORCH_FIXTURES.parent.parent / "malicious" / "files"


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    root = tmp_path_factory.mktemp("policy")
    shutil.copy(TORCH_FIXTURES / "seed_batchnorm_state_dict.pt", root / "clean.pt")
    shutil.copy(TORCH_FIXTURES / "custom_class.pt", root / "custom.pt")  # fixture_classes.Point: not dangerous
    shutil.copy(MALICIOUS / "global_reduce_os_system.pt", root / "evil.pt")
    (root / "broken.pkl").write_bytes(pickle.dumps({"a": [1, 2, 3]})[:-4])
    return root


def _scan(*args: str) -> tuple[int, dict]:
    result = subprocess.run([sys.executable, "-m", "tensorplay", "scan", "--json", *args], capture_output=True,
                            text=True, timeout=120)
    return result.returncode, {r["path"].rsplit("/", 1)[-1]: r for r in json.loads(result.stdout)["files"]}


@pytest.mark.parametrize(("files", "fail_on", "code"), [
    (["clean.pt", "custom.pt"], "dangerous", 0),
    (["clean.pt", "custom.pt"], "unsafe", 1),
    (["clean.pt", "custom.pt"], "unreadable", 1),
    (["clean.pt", "evil.pt"], "dangerous", 1),
    (["clean.pt", "broken.pkl"], "dangerous", 0),
    (["clean.pt", "broken.pkl"], "unsafe", 0),
    (["clean.pt", "broken.pkl"], "unreadable", 2),
    (["custom.pt", "broken.pkl"], "unsafe", 1),
    (["clean.pt"], "unreadable", 0),
])
def test_fail_on_sets_the_least_finding_that_fails(folder, files, fail_on, code):
    got, reports = _scan("--fail-on", fail_on, *(str(folder / f) for f in files))
    assert got == code, reports
    # The report is the same whatever fails.
    assert {name: r["verdict"] for name, r in reports.items()} == {
        name: {"clean.pt": "clean", "custom.pt": "unsafe", "evil.pt": "unsafe", "broken.pkl": "unreadable"}[name]
        for name in files}


def test_the_default_fails_on_anything_unreadable(folder):
    assert _scan(str(folder / "clean.pt"), str(folder / "broken.pkl"))[0] == 2


def test_include_and_exclude_choose_the_files_of_a_folder(folder):
    code, reports = _scan("--include", "*.pt", "--exclude", "evil*", str(folder))
    assert sorted(reports) == ["clean.pt", "custom.pt"] and code == 1
    code, reports = _scan("--exclude", "*.pt", str(folder))
    assert sorted(reports) == ["broken.pkl"] and code == 2
    # A file named on the command line is scanned whatever the patterns say.
    code, reports = _scan("--exclude", "*.pt", str(folder / "evil.pt"))
    assert sorted(reports) == ["evil.pt"] and code == 1


def test_a_file_over_the_maximum_size_is_unreadable_not_read(folder):
    code, reports = _scan("--max-file-size", "1K", str(folder))
    for name in ("clean.pt", "custom.pt"):  # 2975 and 1676 bytes
        assert reports[name]["verdict"] == "unreadable"
        assert [p["kind"] for p in reports[name]["problems"]] == ["too_large"]
    assert reports["evil.pt"]["verdict"] == "unsafe" and code == 1  # 654 bytes: read, and unsafe outranks
    code, reports = _scan("--max-file-size", "1K", "--fail-on", "unsafe", str(folder / "clean.pt"))
    assert code == 0 and reports["clean.pt"]["verdict"] == "unreadable"
    assert _scan("--max-file-size", "10M", str(folder))[1]["custom.pt"]["verdict"] == "unsafe"


@pytest.mark.parametrize("size", ["ten", "-1", "5X"])
def test_a_bad_size_is_refused(size):
    result = subprocess.run([sys.executable, "-m", "tensorplay", "scan", "--max-file-size", size, "x"],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 2 and "not a size" in result.stderr
