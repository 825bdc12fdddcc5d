"""Shared test setup: the fixture folder is importable (fixture_classes, describe),
and every test starts from an empty user allowlist."""
from __future__ import annotations

import json
import os
import pathlib
import sys

import pytest

TESTS = pathlib.Path(__file__).resolve().parent
FIXTURES = TESTS / "fixtures"
TORCH_FIXTURES = FIXTURES / "torch"
sys.path.insert(0, str(FIXTURES))
sys.path.insert(0, str(TESTS))


EXTRA_FIXTURES = FIXTURES / "torch_extra"


def torch_manifest() -> list[dict]:
    """The shared corpus and tensorplay's own extra cases, each case with its folder."""
    cases = []
    for folder in (TORCH_FIXTURES, EXTRA_FIXTURES):
        for case in json.loads((folder / "manifest.json").read_text()):
            cases.append({**case, "path": folder / case["file"]})
    return cases


def views_the_mapped_file(array) -> bool:
    """Whether a numpy-backend array lies in a mapping tensorplay made (its
    storage's array views a MappedFile), not in memory numpy allocated. For the
    small files tested with it that is the checkpoint itself."""
    storage = array.base
    return storage is not None and type(storage.base).__name__ == "MappedFile"


def has_torch() -> bool:
    try:
        import torch  # noqa: F401
    except ImportError:
        return False
    return True


@pytest.fixture(autouse=True)
def _empty_allowlist():
    """Each test starts with no safe globals of tensorplay's, and torch's as torch
    registers them: importing tensordict adds its own to torch's (among them `dict`
    under another name, which lets torch's weights-only loader BUILD on any dict),
    and the tests that hold tensorplay to torch compare against torch as it ships."""
    import tensorplay

    def reset() -> None:
        tensorplay.clear_safe_globals()
        torch = sys.modules.get("torch")
        if torch is None:
            return
        registered = torch.serialization.get_safe_globals()
        kept = [entry for entry in registered if not _registered_by_tensordict(entry)]
        if len(kept) != len(registered):
            torch.serialization.clear_safe_globals()
            torch.serialization.add_safe_globals(kept)

    reset()
    yield
    reset()


def _registered_by_tensordict(entry) -> bool:
    name = entry[1] if isinstance(entry, tuple) else f"{entry.__module__}.{entry.__qualname__}"
    return name.startswith("tensordict.")


# --- a test the test command skips for a missing dependency fails instead ---------
# tests/run.sh installs every test dependency and sets TENSORPLAY_REQUIRE_DEPS=1, so
# an import that fails there is a broken environment, not a reason to skip.

def _missing_dependency(report) -> bool:
    if not (report.skipped and os.environ.get("TENSORPLAY_REQUIRE_DEPS") == "1"):
        return False
    reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
    return "could not import" in reason


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector):
    outcome = yield
    report = outcome.get_result()
    if _missing_dependency(report):
        report.outcome = "failed"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if _missing_dependency(report):
        report.outcome = "failed"
