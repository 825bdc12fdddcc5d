"""The integrations the docs (docs/scanning/ci.md) give CI engineers, run for real: the pre-commit
hook (`.pre-commit-hooks.yaml`) through `pre-commit try-repo` on a temporary
git repository, and the command lines of the GitHub Actions recipe."""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import TORCH_FIXTURES

ROOT = Path(__file__).resolve().parent.parent
MALICIOUS = TORCH_FIXTURES.parent.parent / "malicious" / "files"


def _git(cwd, *args: str) -> None:
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@example.com", *args], cwd=cwd, check=True,
                   capture_output=True, timeout=60)


@pytest.fixture
def models(tmp_path):
    repo = tmp_path / "models"
    repo.mkdir()
    _git(repo, "init", "-q")
    shutil.copy(TORCH_FIXTURES / "seed_batchnorm_state_dict.pt", repo / "clean.pt")
    (repo / "README.md").write_text("# models\n")
    _git(repo, "add", ".")
    return repo


def test_the_pre_commit_hook_passes_clean_files_and_blocks_a_hostile_one(models, tmp_path):
    """`pre-commit try-repo` installs the hook from this checkout (its
    `language: python` environment builds tensorplay from source) and runs it
    on the staged files its pattern selects."""
    # The hook's environment builds tensorplay from a copy of this checkout: an
    # unoptimised build (what is tested is the hook, not the scanner's speed), in
    # the checkout's own target folder, where what cargo test compiled is reused.
    env = {**os.environ, "PRE_COMMIT_HOME": str(tmp_path / "pre-commit-home"),
           "CARGO_TARGET_DIR": os.environ.get("CARGO_TARGET_DIR", str(ROOT / "target")),
           "MATURIN_PEP517_ARGS": "--profile dev"}

    def try_repo() -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "pre_commit", "try-repo", str(ROOT), "tensorplay-scan",
                               "--all-files", "--verbose"], cwd=models, env=env, capture_output=True, text=True,
                              timeout=1800)

    clean = try_repo()
    assert clean.returncode == 0, clean.stdout + clean.stderr
    assert re.search(r"tensorplay scan\.+Passed", clean.stdout), clean.stdout
    assert "CLEAN" in clean.stdout and "clean.pt" in clean.stdout
    assert "README.md" not in clean.stdout.split("Passed", 1)[1]  # not a model file: not handed to the hook
    shutil.copy(MALICIOUS / "global_reduce_os_system.pt", models / "evil.pt")
    _git(models, "add", "evil.pt")
    hostile = try_repo()
    assert hostile.returncode == 1, hostile.stdout + hostile.stderr
    assert re.search(r"tensorplay scan\.+Failed", hostile.stdout), hostile.stdout
    assert "UNSAFE" in hostile.stdout and "os.system  [dangerous]" in hostile.stdout


def _recipe() -> str:
    page = (ROOT / "docs" / "scanning" / "ci.md").read_text()
    (workflow,) = re.findall(r"```yaml\n(# \.github/workflows/scan-models\.yml\n.*?)```", page, re.S)
    return workflow


def _recipe_commands() -> list[str]:
    return re.findall(r"^\s+(?:- )?run: (tensorplay .*)$", _recipe(), re.M)


def test_the_github_actions_recipe_writes_a_sarif_log_and_fails_on_a_hostile_file(models):
    commands = _recipe_commands()
    assert commands == ["tensorplay scan --format sarif -o tensorplay.sarif ."], commands
    # The upload step runs whatever the scan's exit code, so findings reach code scanning.
    assert re.search(r"if: \$\{\{ always\(\) \}\}\n\s+uses: github/codeql-action/upload-sarif@v\d+\n\s+with:\n"
                     r"\s+sarif_file: tensorplay\.sarif", _recipe())
    tensorplay = [sys.executable, "-m", "tensorplay"]

    def run(command: str) -> int:
        argv = command.split()
        assert argv[0] == "tensorplay"
        return subprocess.run(tensorplay + argv[1:], cwd=models, capture_output=True, timeout=300).returncode

    assert run(commands[0]) == 0
    log = json.loads((models / "tensorplay.sarif").read_text())
    assert log["version"] == "2.1.0" and log["runs"][0]["results"] == []
    shutil.copy(MALICIOUS / "global_reduce_os_system.pt", models / "evil.pt")
    assert run(commands[0]) == 1
    (result,) = json.loads((models / "tensorplay.sarif").read_text())["runs"][0]["results"]
    assert result["ruleId"] == "TP001" and result["level"] == "error"
    # GitHub matches a result to the repository's file by a path relative to its root.
    assert result["locations"][0]["physicalLocation"]["artifactLocation"]["uri"] == "evil.pt"
