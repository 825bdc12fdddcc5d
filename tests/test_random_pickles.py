"""Random pickle programs, run by torch's weights-only unpickler and by tensorplay.

torch.save only writes well-formed pickles of a few shapes; an attacker writes any
opcode stream. This generates programs from exactly the opcodes torch's
weights-only unpickler implements (so torch is the reference everywhere), mostly
well-formed (containers, memo puts and gets, calls of allowed and forbidden
globals, BUILD and NEWOBJ on anything, persistent ids and tensors over real
records) and then mutated (ops deleted, duplicated, inserted, swapped). Where
torch's loader accepts a program, tensorplay loads the same object; where torch's
refuses it, tensorplay refuses it with a CheckpointError, never another exception.
The scans agree with the loads, and with torch's scanner. The generator and the
comparison are weights_only_differential.py's; this file holds what is particular
to zip checkpoints."""
from __future__ import annotations

import io
import pathlib
import tempfile
import zipfile

import pytest
import tensorplay
from hypothesis import given, settings
from hypothesis import strategies as st
from pickle_programs import assemble, write_checkpoint
from weights_only_differential import KEYS, RECORDS, compare, integer, programs, text, torch_load, tuple_of

torch = pytest.importorskip("torch")

# --- zip checkpoints: data/<key> records, storages named by 5-tuples --------------


@st.composite
def _persistent_id(draw, values):
    storage_type = draw(st.sampled_from([("torch", "FloatStorage"), ("torch", "LongStorage"),
                                         ("torch", "ByteStorage"), ("torch.storage", "UntypedStorage")]))
    numel = integer(draw(st.integers(0, 9)))
    items = [text("storage"), [("GLOBAL", storage_type)], text(draw(KEYS)), text("cpu"), numel]
    if draw(st.integers(0, 9)) == 0:  # anything in any slot
        items[draw(st.integers(0, 4))] = draw(values)
    return tuple_of(items) + [("BINPERSID",)]


_programs = programs(_persistent_id)


def _write_checkpoint(path: pathlib.Path, pickle: bytes) -> None:
    write_checkpoint(torch, path, pickle, RECORDS)


def _torch_scan(path):
    """torch's get_unsafe_globals_in_checkpoint, and whether its scan reached the
    pickle's end (it stops at the first STOP), or None where it raises."""
    try:
        names = torch.serialization.get_unsafe_globals_in_checkpoint(path)
    except Exception:  # noqa: BLE001 - torch's scanner raising is its verdict
        return None
    pickle = io.BytesIO(zipfile.ZipFile(path).read(f"{path.stem}/data.pkl"))
    torch._weights_only_unpickler.get_globals_in_pkl(pickle)
    return sorted(names), not pickle.read()


def _compare(path: pathlib.Path) -> None:
    compare(path, _torch_scan)


@settings(max_examples=500, deadline=None)
@given(program=_programs)
def test_random_pickles_load_as_torch_loads_them_or_are_refused_as_torch_refuses_them(program):
    with tempfile.TemporaryDirectory() as folder:
        path = pathlib.Path(folder, "ckpt.pt")
        _write_checkpoint(path, assemble(program))
        _compare(path)


# --- cases the random programs found ----------------------------------------------

def _g(module, name):
    return [("GLOBAL", (module, name))]


def _call(func, *args, op="REDUCE"):
    return func + tuple_of(list(args)) + [(op,)]


def _storage_id(key="0", location=None, numel=None, storage_type=("torch", "FloatStorage")):
    location = text("cpu") if location is None else location
    numel = integer(8) if numel is None else numel
    return tuple_of([text("storage"), _g(*storage_type), text(key), location, numel]) + [("BINPERSID",)]


def _rebuild(storage, offset, size, stride, requires_grad=False):
    hooks = _call(_g("collections", "OrderedDict"))
    return _call(_g("torch._utils", "_rebuild_tensor_v2"), storage, integer(offset),
                 tuple_of([integer(v) for v in size]), tuple_of([integer(v) for v in stride]),
                 [("NEWTRUE",)] if requires_grad else [("NEWFALSE",)], hooks)


def _pair(key, value):
    return [("EMPTY_LIST",)] + key + [("APPEND",)] + value + [("APPEND",)]


def _list(*items):
    return [("EMPTY_LIST",), ("MARK",)] + [op for item in items for op in item] + [("APPENDS",)]


TORCH_LOADS = {
    "Size()": _call(_g("torch", "Size")),
    "Size of negative ints": _call(_g("torch", "Size"), tuple_of([integer(-1), [("NEWTRUE",)]])),
    "Size built by NEWOBJ": _call(_g("torch", "Size"), tuple_of([integer(2), integer(3)]), op="NEWOBJ"),
    "device(3) is cuda:3": _call(_g("torch", "device"), integer(3)),
    "device built by NEWOBJ": _call(_g("torch", "device"), text("cpu"), op="NEWOBJ"),
    "OrderedDict of [key, value] lists (Python 2)": _call(
        _g("collections", "OrderedDict"), _list(_pair(text("a"), integer(1)), _pair(text("b"), [("NONE",)]))),
    "OrderedDict of an empty string": _call(_g("collections", "OrderedDict"), text("")),
    "Counter(None)": _call(_g("collections", "Counter"), [("NONE",)]),
    "complex(True, 2**70)": _call(_g("builtins", "complex"), [("NEWTRUE",)], integer(2**70)),
    "bytearray of ints": _call(_g("builtins", "bytearray"), tuple_of([integer(1), integer(255)])),
    "bytearray(True)": _call(_g("builtins", "bytearray"), [("NEWTRUE",)]),
    "an empty state BUILDs nothing on a set": _call(_g("builtins", "set")) + [("EMPTY_DICT",), ("BUILD",)],
    "a (None, None) state BUILDs nothing on a Size": _call(_g("torch", "Size")) + tuple_of([[("NONE",)]] * 2)
    + [("BUILD",)],
    "an empty tensor past its storage's end": _rebuild(_storage_id("2", numel=integer(0)), 3, [0, 2], [1, 1]),
    "Parameter(None) is an empty Parameter": _call(_g("torch.nn.parameter", "Parameter"), [("NONE",)]),
    "a legacy storage class as a value": _g("torch", "FloatStorage"),
    "a storage size of False": _storage_id("2", numel=[("NEWFALSE",)]),
}

BOTH_REFUSE = {
    "an int tensor that requires grad": _call(
        _g("torch._utils", "_rebuild_parameter"),
        _rebuild(_storage_id("0", numel=integer(4), storage_type=("torch", "LongStorage")), 0, [4], [1]),
        [("NEWTRUE",)], [("EMPTY_DICT",)]),
    "a uint8 tensor that requires grad": _rebuild(_storage_id("1", storage_type=("torch", "ByteStorage")), 0, [8], [1],
                                                  requires_grad=True),
    "a set of a dict (unhashable)": _call(_g("builtins", "set"), tuple_of([[("EMPTY_DICT",)]])),
    "a storage located at an int": _storage_id(location=integer(0)),
    "a storage located at no device": _storage_id(location=text("cuda:01")),
}


@pytest.mark.parametrize("name", sorted(TORCH_LOADS))
def test_programs_torch_loads_load_the_same(name, tmp_path):
    path = tmp_path / "ckpt.pt"
    _write_checkpoint(path, assemble([("PROTO", 2)] + TORCH_LOADS[name] + [("STOP",)]))
    assert torch_load(path)[1] is None
    _compare(path)


@pytest.mark.parametrize("name", sorted(BOTH_REFUSE))
def test_programs_torch_refuses_are_refused_with_a_checkpoint_error(name, tmp_path):
    path = tmp_path / "ckpt.pt"
    _write_checkpoint(path, assemble([("PROTO", 2)] + BOTH_REFUSE[name] + [("STOP",)]))
    assert torch_load(path)[1] is not None
    with pytest.raises(tensorplay.CheckpointError):
        tensorplay.load(path, backend="torch")
    _compare(path)


@pytest.mark.filterwarnings("ignore:TypedStorage is deprecated")
def test_a_device_this_machine_lacks_is_unsupported_and_says_what_to_pass(tmp_path):
    path = tmp_path / "ckpt.pt"
    _write_checkpoint(path, assemble([("PROTO", 2)] + _storage_id(location=text("cuda:0")) + [("STOP",)]))
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    with pytest.raises(tensorplay.UnsupportedCheckpointError, match="map_location") as caught:
        tensorplay.load(path, backend="torch")
    assert isinstance(caught.value.__cause__, RuntimeError)  # torch's own message, chained
    assert tensorplay.load(path, backend="torch", map_location="cpu").device.type == "cpu"
    assert tensorplay.load(path, backend="numpy").dtype == "float32"


def test_a_device_index_torch_would_wrap_into_another_device_is_refused(tmp_path):
    path = tmp_path / "ckpt.pt"
    _write_checkpoint(path, assemble([("PROTO", 2)] + _call(_g("torch", "device"), integer(195)) + [("STOP",)]))
    assert str(torch_load(path)[0]) == "cuda:-61"
    for backend in ("torch", "numpy"):
        with pytest.raises(tensorplay.MalformedCheckpointError, match="does not fit torch's 8-bit device index"):
            tensorplay.load(path, backend=backend)
