"""`tensorplay scan --format json|sarif` and `-o FILE`: the JSON document has
every field the docs' schema (docs/scanning/index.md) lists, and the SARIF log is valid SARIF 2.1.0,
checked with sarif-pydantic (a typed model of the 2.1.0 schema, the one such
package on the index: none ships the OASIS JSON schema itself), with no field
the model does not know."""
from __future__ import annotations

import gzip
import json
import shutil
import subprocess
import sys

import pytest
from conftest import TESTS, TORCH_FIXTURES
from tensorplay import _core

sarif_pydantic = pytest.importorskip("sarif_pydantic")

MALICIOUS = TORCH_FIXTURES.parent.parent / "malicious" / "files"


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    root = tmp_path_factory.mktemp("reports")
    shutil.copy(TORCH_FIXTURES / "seed_batchnorm_state_dict.pt", root / "clean.pt")
    shutil.copy(TORCH_FIXTURES / "custom_class.pt", root / "custom.pt")
    (root / "evil.pt.gz").write_bytes(gzip.compress((MALICIOUS / "global_reduce_os_system.pt").read_bytes()))
    (root / "broken.pkl").write_bytes(b"\x80\x04\x95\x10\x00\x00\x00\x00\x00\x00\x00}")
    (root / "notes.txt").write_text("no model here\n")
    return root


def _scan(*args: str, cwd=None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tensorplay", "scan", *args], capture_output=True, text=True,
                          timeout=120, cwd=cwd)


def test_the_json_document_has_a_summary_and_every_field_of_each_record(folder):
    result = _scan("--format", "json", "--fail-on", "unsafe", "--exclude", "*.txt", str(folder))
    assert result.returncode == 1
    doc = json.loads(result.stdout)
    assert set(doc) == {"summary", "files"}
    summary = doc["summary"]
    assert set(summary) == {"tool", "version", "schema_version", "started", "duration_seconds", "files", "clean",
                            "unsafe", "unreadable", "skipped", "policy", "exit_code", "passed_over", "readers"}
    assert summary["tool"] == "tensorplay" and summary["schema_version"] == 1 and summary["exit_code"] == 1
    assert (summary["files"], summary["clean"], summary["unsafe"], summary["unreadable"]) == (4, 1, 2, 1)
    assert summary["policy"] == {"fail_on": "unsafe", "allow": [], "include": [], "exclude": ["*.txt"],
                                 "max_file_size": None, "pickles_only": False, "settings_file": None}
    assert summary["passed_over"] == [{"path": str(folder / "notes.txt"),
                                       "reason": "left out by the include and exclude patterns"}]
    assert summary["started"].endswith("+00:00") and summary["duration_seconds"] >= 0
    records = {r["path"].rsplit("/", 1)[-1]: r for r in doc["files"]}
    for record in records.values():
        assert set(record) == {"path", "format", "wrappers", "verdict", "skipped_because", "globals",
                               "allowlisted_globals", "problems", "pickles", "pickles_only", "reached_from", "remote"}
        assert record["allowlisted_globals"] is None and record["skipped_because"] is None
    evil = records["evil.pt.gz"]
    assert evil["format"] == "gzip" and evil["wrappers"] == ["gzip", "zip"]  # a torch zip, gzipped
    (found,) = [g for g in evil["globals"] if g["dangerous"]]
    assert set(found) == {"name", "module", "qualname", "dangerous", "location", "offset", "wrappers"}
    assert (found["module"], found["qualname"]) in {("os", "system"), ("posix", "system")}
    assert found["wrappers"] == ["gzip", "zip"] and found["offset"] > 0
    custom = records["custom.pt"]["globals"][0]
    assert (custom["module"], custom["qualname"], custom["dangerous"]) == ("fixture_classes", "Point", False)
    (problem,) = records["broken.pkl"]["problems"]
    assert set(problem) == {"kind", "location", "message"} and problem["kind"] == "malformed_pickle"


# Fields SARIF 2.1.0 defines that sarif-pydantic 0.6.2 does not model: the log's
# `$schema` and an invocation's `exitCode`.
UNMODELLED = {"$schema", "exitCode"}


def _no_unknown_fields(model, where="log"):
    """sarif-pydantic keeps fields it does not model in `model_extra`: none may be
    there but the property bags SARIF leaves open and the fields above."""
    from pydantic import BaseModel

    if isinstance(model, BaseModel):
        extra = set(model.model_extra or {}) - UNMODELLED
        assert not extra, f"{where}: fields SARIF 2.1.0 does not define: {extra}"
        for name, value in model:
            if name != "properties":
                _no_unknown_fields(value, f"{where}.{name}")
    elif isinstance(model, (list, tuple)):
        for i, item in enumerate(model):
            _no_unknown_fields(item, f"{where}[{i}]")


@pytest.mark.parametrize(("fail_on", "levels"), [
    ("unreadable", {"TP001": "error", "TP002": "error", "TP003": "error"}),
    ("dangerous", {"TP001": "error", "TP002": "warning", "TP003": "warning"}),
])
def test_the_sarif_log_is_valid_sarif_with_a_result_per_finding(folder, tmp_path, fail_on, levels):
    out = tmp_path / "scan.sarif"
    result = _scan("--format", "sarif", "--fail-on", fail_on, "-o", str(out), str(folder), cwd=folder)
    assert result.returncode == 1 and result.stdout == ""
    raw = json.loads(out.read_text())
    log = sarif_pydantic.Sarif.model_validate(raw)
    _no_unknown_fields(log)
    assert raw["version"] == "2.1.0"
    (run,) = raw["runs"]
    rules = run["tool"]["driver"]["rules"]
    assert [r["id"] for r in rules] == ["TP001", "TP002", "TP003", "TP004", "TP005"]
    by_rule: dict[str, list[dict]] = {}
    for r in run["results"]:
        assert rules[r["ruleIndex"]]["id"] == r["ruleId"]
        by_rule.setdefault(r["ruleId"], []).append(r)
    assert {rule: {r["level"] for r in results} for rule, results in by_rule.items()} == {
        rule: {level} for rule, level in levels.items()}
    (dangerous,) = by_rule["TP001"]
    assert dangerous["locations"][0]["physicalLocation"]["artifactLocation"]["uri"].endswith("evil.pt.gz")
    assert dangerous["properties"]["offset"] > 0 and "byte" in dangerous["message"]["text"]
    assert run["invocations"][0]["exitCode"] == 1
    # The model is a real check: a level SARIF does not define is refused.
    run["results"][0]["level"] = "fatal"
    with pytest.raises(ValueError):
        sarif_pydantic.Sarif.model_validate(raw)


def test_a_parser_disagreement_has_its_own_rule(tmp_path):
    import io
    import pickle
    import zipfile

    appended = io.BytesIO()
    with zipfile.ZipFile(appended, "w") as z:
        z.writestr("data.pkl", pickle.dumps(1))
    path = tmp_path / "model.pkl"
    path.write_bytes(pickle.dumps({"a": 1}) + appended.getvalue())
    raw = json.loads(_scan("--format", "sarif", str(path)).stdout)
    assert "TP004" in {r["ruleId"] for r in raw["runs"][0]["results"]}


def test_json_is_an_alias_and_the_output_file_replaces_the_old_one(folder, tmp_path):
    out = tmp_path / "report.json"
    out.write_text("old")
    assert _scan("--json", "-o", str(out), str(folder / "clean.pt")).returncode == 0
    assert json.loads(out.read_text())["files"][0]["verdict"] == "clean"
    assert not list(tmp_path.glob(".tensorplay-*"))
    missing = tmp_path / "no" / "such" / "folder" / "r.json"
    result = _scan("--json", "-o", str(missing), str(folder / "clean.pt"))
    assert result.returncode == 2 and "cannot write" in result.stderr


def test_the_readers_the_scan_models_are_listed_in_the_docs_and_the_json_summary(tmp_path):
    """One list (src/scan/readers.rs): the Scanning page's table and every JSON summary are it."""
    readme = (TESTS.parent / "docs" / "scanning" / "index.md").read_text()
    models = _core.reader_models()
    assert {name for name, *_ in models} >= {"pickle", "torch.load", "zipfile", "tarfile", "compression", "7z",
                                             "numpy", "joblib", "pandas", "dcp", "sharded", "tensordict"}
    for name, reader, version, reads in models:
        assert f"| `{name}` | {reader} | {version} | {reads} |" in readme, name
    (tmp_path / "x.pkl").write_bytes(b"\x80\x02N.")
    result = subprocess.run([sys.executable, "-m", "tensorplay", "scan", "--json", str(tmp_path)],
                            capture_output=True, text=True, timeout=120)
    listed = json.loads(result.stdout)["summary"]["readers"]
    assert [(r["name"], r["reader"], r["version"], r["reads"]) for r in listed] == [tuple(m) for m in models]
