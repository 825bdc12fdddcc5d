"""The last differences from ``torch.load`` (issue 45): four checks of torch's own
``test/test_serialization.py`` (not shipped in the wheel, so reproduced here with
their names, files and assertions), run with ``torch.load`` unpatched and patched
by tensorplay, which must agree; then the one shape in which an allowlisted
``getattr`` loads, and ``tensorplay inspect --allow`` of a name that cannot be imported."""
from __future__ import annotations

import datetime
import io
import json
import os
import pickle
import re
import subprocess
import sys
import tempfile
import zoneinfo

import pytest

torch = pytest.importorskip("torch")

import tensorplay  # noqa: E402
from tensorplay.pickle import loads as tensorplay_loads  # noqa: E402


def _outcome(run):
    """("ok", value) or ("error", the exception)."""
    try:
        return "ok", run()
    except Exception as e:  # noqa: BLE001 - compared below
        return "error", e


def _both(run):
    """``run`` with torch.load unpatched, then patched by tensorplay."""
    assert not getattr(torch.load, "__tensorplay_patch__", False)
    unpatched = _outcome(run)
    with tensorplay.patched_torch():
        assert torch.load.__tensorplay_patch__
        patched = _outcome(run)
    return unpatched, patched


def _raises_both(run, pattern):
    """Both loaders raise a pickle.UnpicklingError whose text matches ``pattern``
    (``assertRaisesRegex`` is ``re.search``)."""
    for which, (kind, value) in zip(("unpatched", "patched"), _both(run)):
        assert kind == "error", f"{which} torch.load loaded {value!r}"
        assert isinstance(value, pickle.UnpicklingError), (which, type(value))
        assert re.search(pattern, str(value)), (which, str(value))


# --- torch's tests, by name ------------------------------------------------------


class HelloWorld:
    def __reduce__(self):
        return (print, ("Hello World!",))


def test_weights_only_assert(capsys):
    f = io.BytesIO()
    torch.save(HelloWorld(), f)

    def refused():
        f.seek(0)
        return torch.load(f, weights_only=True)

    _raises_both(refused, "Unsupported global: GLOBAL print")

    def allowed():
        with torch.serialization.safe_globals([print]):
            f.seek(0)
            return torch.load(f, weights_only=True)

    assert _both(allowed) == (("ok", None), ("ok", None))
    assert capsys.readouterr().out == "Hello World!\n" * 2


def test_weights_only_error_unsafe_global_True():
    from torch.testing._internal.two_tensor import TwoTensor

    sd = {"t": TwoTensor(torch.randn(2), torch.randn(2))}
    f = io.BytesIO()
    torch.save(sd, f, pickle_protocol=torch.serialization.DEFAULT_PROTOCOL)

    def load():
        f.seek(0)
        return torch.load(f, weights_only=True)

    _raises_both(load, "use `torch.serialization.add_safe_globals"
                       r"\(\[torch.testing._internal.two_tensor.TwoTensor\]\)`"
                       " or .* to allowlist")


def _zoneinfo_data():
    return {
        "a": torch.tensor([1, 2, 3]),
        "b": datetime.datetime(2025, 1, 1, 12, 0, tzinfo=zoneinfo.ZoneInfo(key="UTC")),
    }


def test_weights_only_blocked_func_error_msg():
    with tempfile.NamedTemporaryFile() as f:
        torch.save(_zoneinfo_data(), f)
        f.seek(0)

        def load():
            f.seek(0)
            with torch.serialization.safe_globals([datetime.datetime, getattr, zoneinfo.ZoneInfo]):
                return torch.load(f)

        _raises_both(load, ".*_unpickle.*zoneinfo.ZoneInfo.*")


def test_weights_only_with_zoneinfo_unpickle_registration_success():
    data = _zoneinfo_data()
    with tempfile.NamedTemporaryFile() as f:
        torch.save(data, f)

        def load():
            f.seek(0)
            with torch.serialization.safe_globals([datetime.datetime, getattr, zoneinfo.ZoneInfo,
                                                   zoneinfo.ZoneInfo._unpickle]):
                return torch.load(f)

        (kind, unpatched), (patched_kind, patched) = _both(load)
        assert (kind, patched_kind) == ("ok", "ok"), (unpatched, patched)
        for loaded in (unpatched, patched):
            assert loaded.keys() == data.keys()
            assert torch.equal(loaded["a"], data["a"])
            assert loaded["b"] == data["b"] and loaded["b"].tzinfo is data["b"].tzinfo


def test_the_refusal_keeps_tensorplays_fuller_message():
    f = io.BytesIO()
    torch.save({"x": HelloWorld()}, f)
    with tensorplay.patched_torch(), pytest.raises(tensorplay.UnsafeCheckpointError) as refused:
        f.seek(0)
        torch.load(f)
    first, rest = str(refused.value).split("\n", 1)
    assert first.startswith("Weights only load failed. Unsupported global: GLOBAL print was not an allowed global")
    assert "Please use `torch.serialization.add_safe_globals([print])` or the " in first
    assert "builtins.print (" in rest and "Ways through" in rest  # every global, where, and the ways through
    assert refused.value.kind == "unsafe_global"
    with pytest.raises(tensorplay.UnsafeCheckpointError) as own:
        f.seek(0)
        tensorplay.load(f)
    assert "Please use `tensorplay.serialization.add_safe_globals([print])`" in str(own.value)


# --- getattr(C, name): the one shape an allowlisted getattr loads in ----------------


class Outer:
    class Inner:
        def __init__(self, value=1):
            self.value = value

        def __eq__(self, other):
            return type(other) is type(self) and other.value == self.value


class Holder:
    system = os.system
    tag = "plain"


class Fetch:
    """Pickled as ``getattr(owner, name)``, as protocols 0 to 3 pickle a nested
    class or a method."""

    def __init__(self, owner, name):
        self.owner, self.name = owner, name

    def __reduce__(self):
        return (getattr, (self.owner, self.name))


def _saved(obj):
    f = io.BytesIO()
    torch.save(obj, f)
    return f.getvalue()


def _load_under(data, allowlist):
    def load():
        with torch.serialization.safe_globals(allowlist):
            return torch.load(io.BytesIO(data))
    return load


def test_a_nested_class_loads_when_it_and_its_owner_are_allowlisted():
    data = _saved({"inner": Outer.Inner(7)})
    assert b"getattr" in data  # protocol 2 pickles Outer.Inner as getattr(Outer, "Inner")
    (kind, unpatched), (patched_kind, patched) = _both(_load_under(data, [Outer, getattr, Outer.Inner]))
    assert (kind, patched_kind) == ("ok", "ok"), (unpatched, patched)
    assert unpatched == patched == {"inner": Outer.Inner(7)}


def test_getattr_refused_when_what_it_fetches_is_not_allowlisted():
    data = _saved({"inner": Outer.Inner(7)})
    with tensorplay.patched_torch(), pytest.raises(tensorplay.UnsafeCheckpointError, match=r"Outer\.Inner"):
        _load_under(data, [Outer, getattr])()


def test_getattr_refused_when_the_owner_is_not_allowlisted():
    data = _saved({"inner": Outer.Inner(7)})
    with tensorplay.patched_torch(), pytest.raises(tensorplay.UnsafeCheckpointError,
                                                   match="GLOBAL test_torch_parity.Outer was not"):
        _load_under(data, [getattr, Outer.Inner])()


def test_getattr_without_the_getattr_entry_stays_blocked():
    data = _saved({"inner": Outer.Inner(7)})
    with tensorplay.patched_torch(), pytest.raises(tensorplay.UnsafeCheckpointError) as refused:
        _load_under(data, [Outer, Outer.Inner])()
    assert refused.value.kind == "blocked_global" and "getattr(C, name)" in str(refused.value)


def test_getattr_never_fetches_a_types_dunder_even_allowlisted():
    data = _saved(Fetch(Outer, "__subclasses__"))
    with tensorplay.patched_torch(), pytest.raises(tensorplay.UnsafeCheckpointError, match="dunder"):
        _load_under(data, [Outer, getattr, Outer.__subclasses__])()


def test_getattr_never_fetches_a_denylisted_attribute_even_allowlisted():
    data = _saved(Fetch(Holder, "system"))
    with tensorplay.patched_torch(), pytest.raises(tensorplay.UnsafeCheckpointError, match="denylist"):
        _load_under(data, [Holder, getattr, os.system])()


def test_getattr_of_a_plain_allowlisted_attribute_and_a_default_argument():
    tag = _saved(Fetch(Holder, "tag"))
    with tensorplay.patched_torch(), pytest.raises(tensorplay.UnsafeCheckpointError, match="not allowlisted"):
        _load_under(tag, [Holder, getattr])()  # "plain" is no allowlist entry
    three = pickle.dumps(_Three(), protocol=2)
    with tensorplay.safe_globals([Holder, getattr]), pytest.raises(tensorplay.UnsafeCheckpointError,
                                                                    match=r"only as getattr\(C, name\)"):
        tensorplay_loads(three)


class _Three:
    def __reduce__(self):
        return (getattr, (Holder, "missing", None))


def test_getattr_never_fetches_from_a_module():
    # GLOBAL builtins.getattr, GLOBAL test_torch_parity.jsonmod (the json module,
    # allowlisted under that name), "dumps", TUPLE2, REDUCE, STOP
    program = (b"\x80\x02cbuiltins\ngetattr\nctest_torch_parity\njsonmod\nX\x05\x00\x00\x00dumps\x86R.")
    with tensorplay.safe_globals([getattr, (json, "test_torch_parity.jsonmod")]):
        with pytest.raises(tensorplay.UnsafeCheckpointError, match="module json"):
            tensorplay_loads(program)


def test_a_scan_reports_getattr_whatever_the_allowlist():
    """A scan runs no call, so it cannot hold getattr to the (C, name) shape: a
    file calling getattr(os, "system") is never clean, getattr allowlisted or not
    (plain pickle runs it)."""
    from tensorplay import scanner

    program = b"\x80\x02cbuiltins\ngetattr\ncos\nsep\nX\x06\x00\x00\x00systemq\x00\x86R."
    for allow in ([], ["builtins.getattr"], ["builtins.getattr", "os.sep"]):
        for pickles_only in (True, False):
            report = scanner.scan(program, allow=allow, pickles_only=pickles_only)
            assert report.verdict == "unsafe", (allow, report)
            assert any(f.name == "builtins.getattr" and f.dangerous for f in report.findings), report.findings


def test_what_getattr_fetched_is_called_only_when_allowlisted():
    # getattr(Outer, "Inner")(5): REDUCE on the fetched class
    program = (b"\x80\x02cbuiltins\ngetattr\nctest_torch_parity\nOuter\nX\x05\x00\x00\x00Inner\x86R"
               b"K\x05\x85R.")
    with tensorplay.safe_globals([getattr, Outer, Outer.Inner]):
        assert tensorplay_loads(program) == Outer.Inner(5)
    with tensorplay.safe_globals([getattr, Outer]), pytest.raises(tensorplay.UnsafeCheckpointError):
        tensorplay_loads(program)


# --- tensorplay inspect --allow of a name this process cannot import -----------------

_SAVE_FROM_A_SCRIPT = """
import dataclasses, sys, torch
@dataclasses.dataclass
class MyConfig:
    lr: float = 0.5
torch.save({"w": torch.zeros(2), "config": MyConfig()}, sys.argv[1])
"""


def _run(*args):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    return subprocess.run([sys.executable, *map(str, args)], capture_output=True, text=True, env=env, timeout=180)


def test_inspect_allow_of_an_unimportable_name_shows_a_stub(tmp_path):
    path = tmp_path / "run.pt"
    made = _run("-c", _SAVE_FROM_A_SCRIPT, path)
    assert made.returncode == 0, made.stderr
    shown = _run("-m", "tensorplay", "inspect", "--allow", "__main__.MyConfig", path)
    assert shown.returncode == 0, shown.stderr
    assert "config = Stub(__main__.MyConfig, state={'lr': 0.5})" in shown.stdout
    assert "cannot import __main__.MyConfig" in shown.stderr
    refused = _run("-m", "tensorplay", "inspect", path)
    assert refused.returncode == 1 or refused.returncode == 2
    assert "--allow __main__.MyConfig" in refused.stderr
    denied = _run("-m", "tensorplay", "inspect", "--allow", "os.system", path)
    assert denied.returncode == 2 and "denylist" in denied.stderr


# --- what a patched run of the whole test/test_serialization.py found --------------


def _raises_both_as(run, kind, pattern):
    """Both loaders raise ``kind`` with a text matching ``pattern``."""
    for which, (outcome, value) in zip(("unpatched", "patched"), _both(run)):
        assert outcome == "error", f"{which} torch.load loaded {value!r}"
        assert isinstance(value, kind), (which, type(value))
        assert re.search(pattern, str(value)), (which, str(value))


def test_serialization_zipfile_actually_jit():
    f = io.BytesIO()
    torch.jit.save(torch.jit.script(torch.nn.Linear(3, 4)), f)

    def load():
        f.seek(0)
        return torch.load(f, weights_only=True)

    _raises_both_as(load, RuntimeError,
                    re.escape("Cannot use ``weights_only=True`` with TorchScript archives passed to ``torch.load``"))


class _PreOneTensor:
    """A tensor as torch before 1.0 pickled it: ``torch.Tensor()`` (or a typed
    ``torch.FloatTensor()``), then BUILD with ``(storage, offset, size, stride)``."""

    def __init__(self, t, make=None):
        self.t, self.make = t, make or torch.Tensor

    def __reduce__(self):
        t = self.t
        return (self.make, (), (t.storage(), t.storage_offset(), tuple(t.size()), t.stride()))


@pytest.mark.parametrize("zip_format", [True, False], ids=["zip", "legacy"])
def test_a_pre_1_0_tensor_is_built_from_its_storage(zip_format):
    x = torch.randn(30).as_strided([2, 3], [9, 3], 2)
    f = io.BytesIO()
    torch.save({"x": _PreOneTensor(x), "i": _PreOneTensor(torch.arange(4, dtype=torch.int32), torch.IntTensor)},
               f, _use_new_zipfile_serialization=zip_format)

    def load():
        f.seek(0)
        return torch.load(f, weights_only=True)

    (kind, unpatched), (patched_kind, patched) = _both(load)
    assert (kind, patched_kind) == ("ok", "ok"), (unpatched, patched)
    for loaded in (unpatched, patched):
        t = loaded["x"]
        assert torch.equal(t, x) and t.stride() == x.stride() and t.storage_offset() == x.storage_offset()
        assert t.untyped_storage().nbytes() == x.untyped_storage().nbytes()
        assert torch.equal(loaded["i"], torch.arange(4, dtype=torch.int32))


def test_a_pre_1_0_tensor_refuses_a_storage_of_another_dtype():
    f = io.BytesIO()
    torch.save(_PreOneTensor(torch.randn(3), torch.IntTensor), f)

    def load():
        f.seek(0)
        return torch.load(f, weights_only=True)

    # torch raises set_'s RuntimeError "Expected a Storage of type int ..."; tensorplay
    # its own error for a bad file, naming both dtypes.
    (kind, unpatched), (patched_kind, patched) = _both(load)
    assert (kind, patched_kind) == ("error", "error"), (unpatched, patched)
    assert isinstance(unpatched, RuntimeError) and "Expected a Storage of type int" in str(unpatched)
    assert isinstance(patched, pickle.UnpicklingError), type(patched)
    assert "expected a storage of dtype int32, got one of dtype float32" in str(patched)


class _ReadsInto:
    """A file-like object with ``readinto`` (handing out at most ``chunk`` bytes a
    call) beside ``read``, which records the calls made to it."""

    def __init__(self, data, chunk=None):
        self.data, self.chunk, self.calls = io.BytesIO(data), chunk, []

    def read(self, *size):
        self.calls.append("read")
        return self.data.read(*size)

    def readinto(self, view):
        self.calls.append("readinto")
        return self.data.readinto(view if self.chunk is None else view[:self.chunk])

    def readline(self, *size):
        self.calls.append("readline")
        return self.data.readline(*size)

    def seek(self, *where):
        return self.data.seek(*where)

    def tell(self):
        return self.data.tell()


@pytest.mark.parametrize("zip_format", [True, False], ids=["zip", "legacy"])
def test_a_file_like_is_read_with_its_readinto(zip_format):
    x = torch.randn(300, 700)
    f = io.BytesIO()
    torch.save(x, f, _use_new_zipfile_serialization=zip_format)
    made = []

    def load():
        made.append(_ReadsInto(f.getvalue()))
        return torch.load(made[-1])

    (kind, unpatched), (patched_kind, patched) = _both(load)
    assert (kind, patched_kind) == ("ok", "ok"), (unpatched, patched)
    assert torch.equal(unpatched, x) and torch.equal(patched, x)
    for which, source in zip(("unpatched", "patched"), made):
        assert "readinto" in source.calls, (which, sorted(set(source.calls)))


def test_a_readinto_that_fills_less_than_asked_is_called_again():
    x = torch.randn(300, 700)
    f = io.BytesIO()
    torch.save(x, f)
    source = _ReadsInto(f.getvalue(), chunk=64 * 1024)
    assert torch.equal(tensorplay.load(source), x)
    assert source.calls.count("readinto") >= len(f.getvalue()) // (64 * 1024)


class _SeekReturnsNothing(io.RawIOBase):
    """A file object whose seek returns None, as some wrappers' do."""

    def __init__(self, data: bytes):
        self.inner = io.BytesIO(data)

    def readable(self):
        return True

    def readinto(self, b):
        return self.inner.readinto(b)

    def seek(self, offset, whence=io.SEEK_SET):
        self.inner.seek(offset, whence)

    def tell(self):
        return self.inner.tell()


def test_a_file_object_whose_seek_returns_none_loads_as_in_torch():
    x = torch.arange(12.0).reshape(3, 4)
    f = io.BytesIO()
    torch.save(x, f)
    assert torch.equal(torch.load(_SeekReturnsNothing(f.getvalue())), x)
    assert torch.equal(tensorplay.load(_SeekReturnsNothing(f.getvalue())), x)
