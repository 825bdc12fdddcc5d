"""`tensorplay.pickle.load` / `loads`: a raw pickle under the weights-only rules,
against torch's weights-only unpickler (Python's unpickler restricted to the
allowlist) on random programs, and as a drop-in for `pickle.load` on plain data."""
from __future__ import annotations

import argparse
import io
import pathlib
import pickle
import warnings

import pytest
import tensorplay
import tensorplay.pickle as safe_pickle
from describe import describe
from expectations import assert_same_description
from hypothesis import example, given, settings
from hypothesis import strategies as st
from pickle_programs import assemble
from weights_only_differential import programs, refused_on_purpose

torch = pytest.importorskip("torch")

PLAIN = [
    None, True, 3, -2**70, 1.5, complex(1, 2), "text", "surrogate \udc80", b"bytes", bytearray(b"ba"),
    (1, (2, 3)), [1, [2, {"a": 1}]], {"k": [1, 2], 3: (4,)}, {1, 2},
]


@pytest.mark.parametrize("protocol", range(pickle.HIGHEST_PROTOCOL + 1))
def test_plain_data_loads_as_pickle_loads_it(protocol):
    for value in PLAIN:
        data = pickle.dumps(value, protocol=protocol)
        assert safe_pickle.loads(data) == pickle.loads(data), (protocol, value)
    # Before protocol 4 a frozenset is a call of builtins.frozenset, which torch's
    # allowlist (and so this one) leaves out.
    data = pickle.dumps(frozenset({3}), protocol=protocol)
    if protocol >= 4:
        assert safe_pickle.loads(data) == frozenset({3})
    else:
        with pytest.raises(tensorplay.UnsafeCheckpointError, match="builtins.frozenset"):
            safe_pickle.loads(data)


def test_load_leaves_the_file_after_the_pickle_as_pickle_load_does():
    f = io.BytesIO()
    pickle.dump({"a": 1}, f)
    pickle.dump([2, 3], f)
    f.write(b"rest")
    f.seek(0)
    assert safe_pickle.load(f) == {"a": 1}
    assert safe_pickle.load(f) == [2, 3]
    assert f.read() == b"rest"


def test_loads_refuses_bytes_after_stop():
    with pytest.raises(tensorplay.MalformedCheckpointError, match="follow the pickle's STOP"):
        safe_pickle.loads(pickle.dumps(1) + pickle.dumps(2))


def test_code_is_refused_and_never_run(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    payload = (pathlib.Path(__file__).parent / "malicious" / "files" / "raw_two_pickles.pkl").read_bytes()
    for data in (payload, b"cos\nsystem\n(S'touch marker'\ntR."):
        with pytest.raises(tensorplay.CheckpointError):
            safe_pickle.loads(data)
        with pytest.raises(tensorplay.CheckpointError):
            safe_pickle.loads(data, unknown_globals="stub")
    assert not list(tmp_path.iterdir())


def test_other_classes_are_refused_with_every_name_or_stubbed():
    data = pickle.dumps({"args": argparse.Namespace(lr=0.1), "ns": argparse.Namespace(x=1)})
    with pytest.raises(tensorplay.UnsafeCheckpointError, match="argparse.Namespace") as refused:
        safe_pickle.loads(data)
    assert [f.name for f in refused.value.globals] == ["argparse.Namespace"]
    with pytest.warns(tensorplay.StubWarning, match="argparse.Namespace"):
        loaded = safe_pickle.loads(data, unknown_globals="stub")
    assert loaded["args"].to_dict() == {"lr": 0.1}


def test_numpy_arrays_and_torch_values():
    import numpy as np

    data = pickle.dumps({"a": np.arange(3), "dtype": torch.float16, "size": torch.Size([2, 3])})
    numpy_side = safe_pickle.loads(data)
    np.testing.assert_array_equal(numpy_side["a"], np.arange(3))
    torch_side = safe_pickle.loads(data, backend="torch")
    assert torch_side["dtype"] is torch.float16 and torch_side["size"] == torch.Size([2, 3])


def test_a_text_file_is_refused():
    with pytest.raises(TypeError, match="binary mode"):
        safe_pickle.load(io.StringIO("text"))


# --- random programs against torch's weights-only unpickler ---------------------

@st.composite
def _no_persistent_ids(draw, values):
    return draw(values)


def _torch_loads(data: bytes):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            return torch._weights_only_unpickler.Unpickler(io.BytesIO(data), encoding="utf-8").load(), None
        except Exception as error:  # noqa: BLE001 - any exception is the reference refusing
            return None, error


@settings(max_examples=300, deadline=None)
@given(program=programs(_no_persistent_ids))
# torch.Size of a fresh empty Parameter: it iterates to nothing, so Size([]).
@example(program=[("PROTO", 2), ("GLOBAL", ("torch", "Size")), ("GLOBAL", ("torch.nn.parameter", "Parameter")),
                  ("EMPTY_TUPLE",), ("REDUCE",), ("TUPLE1",), ("REDUCE",), ("STOP",)])
def test_random_pickles_load_as_the_restricted_unpickler_loads_them(program):
    data = assemble(program)
    expected, their_error = _torch_loads(data)
    try:
        loaded, our_error = safe_pickle.loads(data, backend="torch", encoding="utf-8"), None
    except tensorplay.CheckpointError as error:
        loaded, our_error = None, error
    if their_error is None and not refused_on_purpose(our_error):
        assert our_error is None, f"the reference loads it, tensorplay.pickle refuses: {our_error}"
        assert_same_description(describe(loaded), describe(expected))
    elif their_error is not None:
        assert our_error is not None, f"the reference refuses it ({their_error!r}), tensorplay.pickle loads {loaded!r}"


@settings(max_examples=300, deadline=None)
@given(program=programs(_no_persistent_ids))
def test_random_pickles_in_stub_mode_import_and_call_nothing(program, tmp_path_factory):
    """Random programs calling allowed and forbidden globals: stub mode either loads
    (what the reference loads, the same) or refuses with a CheckpointError; it never
    imports a module, and no payload runs."""
    import os
    import sys

    data = assemble(program)
    expected, their_error = _torch_loads(data)
    safe_pickle.loads(pickle.dumps(1))  # tensorplay's own first-use imports
    before = set(sys.modules)
    cwd = tmp_path_factory.mktemp("stub_run")
    here = os.getcwd()
    os.chdir(cwd)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", tensorplay.StubWarning)
            loaded, our_error = safe_pickle.loads(data, backend="torch", encoding="utf-8",
                                                  unknown_globals="stub"), None
    except tensorplay.CheckpointError as error:
        loaded, our_error = None, error
    finally:
        os.chdir(here)
    assert set(sys.modules) - before == set(), set(sys.modules) - before
    assert not list(cwd.iterdir())
    if their_error is None and not refused_on_purpose(our_error):
        assert our_error is None, f"the reference loads it, stub mode refuses: {our_error}"
        assert_same_description(describe(loaded), describe(expected))
