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


def _scan_in(cwd, *args: str) -> tuple[int, dict, dict]:
    result = subprocess.run([sys.executable, "-m", "tensorplay", "scan", "--json", *args], capture_output=True,
                            text=True, timeout=120, cwd=cwd)
    if not result.stdout:
        return result.returncode, {}, {"stderr": result.stderr}
    document = json.loads(result.stdout)
    return result.returncode, {r["path"].rsplit("/", 1)[-1]: r for r in document["files"]}, document["summary"]


def test_pyproject_settings_are_the_policy_and_flags_win(folder, tmp_path):
    project = tmp_path / "project"
    (project / "sub").mkdir(parents=True)
    (project / "pyproject.toml").write_text(
        '[project]\nname = "x"\n\n[tool.tensorplay.scan]\nallow = ["fixture_classes.Point"]\n'
        'fail-on = "unsafe"\nexclude = ["evil*"]\nmax-file-size = "1M"\n')
    # Found from a folder below, as ruff and black find theirs.
    code, reports, summary = _scan_in(project / "sub", str(folder))
    assert sorted(reports) == ["broken.pkl", "clean.pt", "custom.pt"]
    assert reports["custom.pt"]["verdict"] == "clean"  # allowed by the file
    assert code == 0  # fail-on unsafe lets the broken pickle through
    policy = summary["policy"]
    assert policy["settings_file"] == str(project / "pyproject.toml")
    assert (policy["fail_on"], policy["allow"], policy["exclude"], policy["max_file_size"]) == (
        "unsafe", ["fixture_classes.Point"], ["evil*"], 1 << 20)
    # Flags replace the file's values; --allow adds to its allowlist.
    code, reports, summary = _scan_in(project, "--fail-on", "unreadable", "--exclude", "*.pkl", str(folder))
    assert sorted(reports) == ["clean.pt", "custom.pt", "evil.pt"] and code == 1
    assert summary["policy"]["allow"] == ["fixture_classes.Point"]
    # --no-config reads none; outside the project there is none.
    code, reports, _ = _scan_in(project, "--no-config", str(folder / "custom.pt"))
    assert reports["custom.pt"]["verdict"] == "unsafe" and code == 1
    code, reports, summary = _scan_in(tmp_path, str(folder / "custom.pt"))
    assert summary["policy"]["settings_file"] is None and code == 1


def test_a_pyproject_that_never_names_tensorplay_is_not_read(folder, tmp_path):
    """Not parsed at all (a broken one is not ours to refuse), unless a name in
    it could be spelt with escapes."""
    project = tmp_path / "project"
    project.mkdir()
    (project / "pyproject.toml").write_text('[project]\nname = "x"\nbroken = [\n')
    code, reports, summary = _scan_in(project, str(folder / "custom.pt"))
    assert summary["policy"]["settings_file"] is None and reports["custom.pt"]["verdict"] == "unsafe" and code == 1
    (project / "pyproject.toml").write_text('[tool."tensor\\u0070lay".scan]\nallow = ["fixture_classes.Point"]\n')
    code, reports, summary = _scan_in(project, str(folder / "custom.pt"))
    assert summary["policy"]["settings_file"] == str(project / "pyproject.toml")
    assert reports["custom.pt"]["verdict"] == "clean" and code == 0


def test_a_config_file_of_its_own(folder, tmp_path):
    own = tmp_path / "scan.toml"
    own.write_text('allow = ["fixture_classes.Point"]\ninclude = ["custom*"]\n')
    code, reports, summary = _scan_in(tmp_path, "--config", str(own), str(folder))
    assert sorted(reports) == ["custom.pt"] and reports["custom.pt"]["verdict"] == "clean" and code == 0
    assert summary["policy"]["settings_file"] == str(own)
    # A pyproject.toml named with --config is read from its table.
    (tmp_path / "pyproject.toml").write_text('[tool.tensorplay.scan]\nfail-on = "dangerous"\n')
    code, _, summary = _scan_in("/", "--config", str(tmp_path / "pyproject.toml"), str(folder))
    assert summary["policy"]["fail_on"] == "dangerous" and code == 1  # evil.pt is dangerous


@pytest.mark.parametrize(("text", "message"), [
    ('fail_on = "unsafe"\n', "unknown key 'fail_on'"),
    ('fail-on = "never"\n', "fail-on must be one of"),
    ('allow = "a.b"\n', "allow must be a list of strings"),
    ('max-file-size = "big"\n', "not a size"),
    ('allow = ["os.system"]\n', "os.system"),
    ("allow = [\n", "cannot read the settings file"),
    ("tool = 1\n", "unknown key 'tool'"),
])
def test_a_bad_settings_file_is_refused_not_ignored(folder, tmp_path, text, message):
    bad = tmp_path / "scan.toml"
    bad.write_text(text)
    result = subprocess.run([sys.executable, "-m", "tensorplay", "scan", "--config", str(bad), str(folder)],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 2 and message in result.stderr, result.stderr
    assert result.stdout == ""


def test_the_python_api_reads_the_same_settings(folder, tmp_path):
    from tensorplay import scanner

    own = tmp_path / "scan.toml"
    own.write_text('[tool.tensorplay.scan]\nallow = ["fixture_classes.Point"]\nexclude = ["evil*"]\n'
                   'max-file-size = 2000\n')
    assert scanner.scan(folder / "custom.pt").verdict == "unsafe"
    assert scanner.scan(folder / "custom.pt", config=own).verdict == "clean"
    too_large = scanner.scan(folder / "clean.pt", config=own)  # 2975 bytes
    assert too_large.verdict == "unreadable" and too_large.problems[0].kind == "too_large"
    passed_over: list[tuple[str, str]] = []
    reports = scanner.scan_paths([folder], config=own, passed_over=passed_over)
    assert sorted(r.path.rsplit("/", 1)[-1] for r in reports) == ["broken.pkl", "clean.pt", "custom.pt"]
    assert passed_over == [(str(folder / "evil.pt"), "left out by the include and exclude patterns")]
    settings = scanner.Settings.read(own)
    assert settings.policy().to_json()["allow"] == ["fixture_classes.Point"]
    with pytest.raises(scanner.SettingsError, match="unknown key"):
        scanner.Settings._from_table({"alow": []}, "x")
