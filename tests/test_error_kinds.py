"""The core's table of error kinds is the one definition: the errors raised carry
its codes and classes, `_core.error` makes exactly its kinds, and what is made from
it (the `.pyi` types, the documentation's tables and pages) matches it."""
from __future__ import annotations

import argparse
import importlib.util
import io
import pickle
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import tensorplay
import torch
from tensorplay import _core

ROOT = Path(__file__).resolve().parents[1]
KINDS = {code: (cls, summary, made) for code, cls, summary, made in _core.ERROR_KINDS}


def _generator():
    spec = importlib.util.spec_from_file_location("error_kinds", ROOT / ".ci" / "error_kinds.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_files_made_from_the_table_match_it():
    result = subprocess.run([sys.executable, ROOT / ".ci" / "error_kinds.py", "--check"], capture_output=True,
                            text=True)
    assert result.returncode == 0, result.stderr


def test_a_row_added_to_the_table_makes_the_check_fail(monkeypatch):
    generator = _generator()
    table = generator._kinds() + [("new_kind", "MalformedCheckpointError", "A kind added.", True)]
    monkeypatch.setattr(generator, "_kinds", lambda: table)
    made = generator.expected()
    assert '"new_kind"' in made[generator.STUB] and made[generator.STUB] != generator.STUB.read_text()
    assert "[`new_kind`](new_kind.md)" in made[generator.ERRORS / "index.md"]
    assert 'Raised as: `MalformedCheckpointError` (`.kind == "new_kind"`)' in made[generator.ERRORS / "new_kind.md"]


def _zip_with_pickle(payload: bytes) -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as z:
        z.writestr("archive/data.pkl", payload)
        z.writestr("archive/version", "3\n")
    return out.getvalue()


def _raised(source, **kwargs) -> BaseException:
    with pytest.raises(BaseException) as info:
        tensorplay.load(source, backend="numpy", **kwargs)
    return info.value


def _tensor_past_its_storage() -> bytes:
    saved = io.BytesIO()
    torch.save(torch.arange(4, dtype=torch.float32), saved)
    out = io.BytesIO()
    with zipfile.ZipFile(saved) as src, zipfile.ZipFile(out, "w") as dst:
        for name in src.namelist():
            data = src.read(name)
            if name.endswith("data.pkl"):
                # The tensor's size (4,) -> (400,): its storage holds 4 floats.
                assert data.count(b"K\x04\x85") == 1
                data = data.replace(b"K\x04\x85", b"M\x90\x01\x85")
            dst.writestr(name, data)
    return out.getvalue()


# One real error of each kind a load raises, from a file that has it.
ERRORS = {
    "malformed_pickle": lambda tmp: _raised(_zip_with_pickle(b"\x80\x02}q\x00(")),
    "malformed_archive": lambda tmp: _raised(b"PK\x03\x04" + b"\x00" * 40),
    "unsafe_global": lambda tmp: _raised(_zip_with_pickle(pickle.dumps(argparse.Namespace(a=1), protocol=2))),
    "blocked_global": lambda tmp: _raised(_zip_with_pickle(b"\x80\x02cos\nsystem\nq\x00.")),
    "extension_code": lambda tmp: _raised(_zip_with_pickle(b"\x80\x02\x82\x01.")),
    "limit": lambda tmp: _raised(_zip_with_pickle(pickle.dumps(list(range(100)), protocol=2)),
                                 limits={"max_nodes": 10}),
    "tensor_bounds": lambda tmp: _raised(_tensor_past_its_storage()),
    "io": lambda tmp: _raised(tmp / "missing.pt"),
}


@pytest.mark.parametrize("kind", sorted(ERRORS))
def test_each_error_raised_is_of_its_row(kind, tmp_path):
    error = ERRORS[kind](tmp_path)
    cls, _, _ = KINDS[kind]
    if cls == "OSError":
        assert isinstance(error, OSError) and not isinstance(error, _core.CheckpointError)
        return
    assert type(error).__name__ == cls, repr(error)
    assert error.kind == kind
    assert error.reason and error.reason in str(error)
    assert error.location in str(error)
    if error.offset is not None:
        assert f"byte offset {error.offset}" in error.location


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_error_makes_exactly_the_kinds_the_table_says(kind):
    cls, _, made = KINDS[kind]
    limit = "max_nodes" if kind == "limit" else None
    if not made:
        with pytest.raises(ValueError, match="not one `error` makes"):
            _core.error(kind, "why", entry="data.pkl", offset=7, limit=limit)
        return
    error = _core.error(kind, "why", entry="data.pkl", offset=7, limit=limit)
    assert type(error).__name__ == cls and error.kind == kind
    assert error.location == " [entry 'data.pkl', byte offset 7]" and error.location in str(error)
    assert error.entry == "data.pkl" and error.offset == 7


def test_an_exception_raised_while_building_carries_its_kind():
    error = _core.build_error("calling x", ValueError("no"))
    assert isinstance(error, _core.MalformedCheckpointError)
    assert error.kind == "malformed_pickle" and error.reason == "calling x: ValueError: no"
    assert error.location == "" and error.entry is None


def test_a_refusal_completed_with_every_global_keeps_the_attributes():
    # A blocked global after one outside the allowlist: the message lists both, and
    # names the place from the attributes, not from the message's text.
    data = _zip_with_pickle(b"\x80\x02cargparse\nNamespace\nq\x00cos\nsystem\nq\x01.")
    error = _raised(data)
    assert error.kind in ("unsafe_global", "blocked_global")
    assert {g.name for g in error.globals} >= {"argparse.Namespace", "os.system"}
    assert error.location and error.location in str(error)
    again = tensorplay._refusal.complete(error, data, [], _core.default_limits())
    assert (again.kind, again.reason, again.location) == (error.kind, error.reason, error.location)
