"""Shared test setup: the fixture folder is importable (fixture_classes, describe),
and every test starts from an empty user allowlist."""
from __future__ import annotations

import json
import pathlib
import sys

import pytest

TESTS = pathlib.Path(__file__).resolve().parent
FIXTURES = TESTS / "fixtures"
TORCH_FIXTURES = FIXTURES / "torch"
sys.path.insert(0, str(FIXTURES))
sys.path.insert(0, str(TESTS))


def torch_manifest() -> list[dict]:
    return json.loads((TORCH_FIXTURES / "manifest.json").read_text())


def has_torch() -> bool:
    try:
        import torch  # noqa: F401
    except ImportError:
        return False
    return True


@pytest.fixture(autouse=True)
def _empty_allowlist():
    import tensorplay

    tensorplay.clear_safe_globals()
    yield
    tensorplay.clear_safe_globals()
