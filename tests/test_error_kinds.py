"""The core's table of error kinds is the one definition: the errors raised carry
its codes and classes, `_core.error` makes exactly its kinds, and what is made from
it (the `.pyi` types, the documentation's tables and pages) matches it."""
from __future__ import annotations

import argparse
import datetime
import importlib.util
import io
import pickle
import subprocess
import sys
import warnings
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
    assert set(_core.ERROR_ATTRIBUTES) <= set(vars(error)), vars(error)
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


@pytest.mark.parametrize("blocked_first", [False, True])
def test_a_refusal_completed_with_every_global_keeps_the_attributes(blocked_first):
    # Two globals, one blocked: the message lists both, and names where the load
    # stopped from the attributes, not from the message's text.
    namespace, system = b"cargparse\nNamespace\nq\x00", b"cos\nsystem\nq\x01"
    data = _zip_with_pickle(b"\x80\x02" + (system + namespace if blocked_first else namespace + system) + b".")
    error = _raised(data)
    assert {g.name for g in error.globals} >= {"argparse.Namespace", "os.system"}
    assert error.location == " [entry 'archive/data.pkl', byte offset 2, opcode GLOBAL (0x63)]"
    first_line = str(error).split("\n", 1)[0]
    if blocked_first:
        assert error.kind == "blocked_global"
        assert first_line == f"Weights only load failed. {error.reason}{error.location}"
        assert "GLOBAL os.system whose module os is blocked" in error.reason
    else:
        assert error.kind == "unsafe_global"
        assert first_line.startswith("Weights only load failed. Unsupported global: GLOBAL argparse.Namespace ")
        assert first_line.endswith(error.location)
    again = tensorplay._refusal.complete(error, data, [], _core.default_limits())
    assert (again.kind, again.reason, again.location, str(again)) == (error.kind, error.reason, error.location,
                                                                       str(error))


def test_errors_of_the_builder_and_the_backends_carry_the_attributes():
    # The numpy backend's refusal of what it cannot hold.
    saved = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch deprecates quantized tensors
        torch.save(torch.quantize_per_tensor(torch.ones(3), 0.1, 0, torch.qint8), saved)
    error = _raised(saved.getvalue())
    assert type(error).__name__ == KINDS["unsupported"][0] and error.kind == "unsupported"
    assert "quantized" in error.reason and error.entry.endswith("data.pkl")
    assert error.location == f" [entry '{error.entry}']" and str(error).endswith(error.location)
    # An allowlisted class whose constructor raises on the file's arguments.
    data = _zip_with_pickle(b"\x80\x02cdatetime\ndatetime\nq\x00C\x02abq\x01\x85q\x02Rq\x03.")
    with tensorplay.serialization.safe_globals([datetime.datetime]):
        error = _raised(data)
    assert type(error).__name__ == KINDS["malformed_pickle"][0] and error.kind == "malformed_pickle"
    assert "(value #" in error.reason and isinstance(error.__cause__, TypeError)
    assert error.location == " [entry 'archive/data.pkl']" and str(error).endswith(error.location)


def test_a_payload_refused_from_the_scan_is_a_blocked_global():
    # A .pt2 reader refuses a file whose other parts carry a dangerous global.
    data = _zip_with_pickle(b"\x80\x02cargparse\nNamespace\nq\x00cos\nsystem\nq\x01.")
    with pytest.raises(_core.UnsafeCheckpointError) as refused:
        tensorplay._refusal.refuse_dangerous(data, [], _core.default_limits())
    error = refused.value
    assert (error.kind, error.entry, error.offset, error.location) == ("blocked_global", "archive/data.pkl", 24, "")
    assert "os.system" in error.reason and str(error).startswith(f"Weights only load failed. {error.reason}")
