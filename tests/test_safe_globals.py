"""The user's allowlist: torch's API, context-local safe_globals, the blocklist,
allowlisted classes built as torch builds them, and patching torch.load."""
from __future__ import annotations

import argparse
import contextlib
import io
import os
import pickle
import subprocess
import sys
import threading
import warnings
import zipfile

import fixture_classes
import pytest
import tensorplay
from conftest import TORCH_FIXTURES, has_torch
from tensorplay.serialization import (
    ARGPARSE_PRESET,
    add_safe_globals,
    clear_safe_globals,
    get_safe_globals,
    safe_globals,
)

needs_torch = pytest.mark.skipif(not has_torch(), reason="torch not installed")
CUSTOM = TORCH_FIXTURES / "custom_class.pt"


def _checkpoint(pickled: bytes) -> io.BytesIO:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr("archive/data.pkl", pickled)
        z.writestr("archive/version", b"3\n")
    buf.seek(0)
    return buf


def test_add_get_and_clear_follow_torch():
    add_safe_globals([fixture_classes.Point, (fixture_classes.Color, "other.Colour")])
    assert get_safe_globals() == [fixture_classes.Point, (fixture_classes.Color, "other.Colour")]
    point = tensorplay.load(CUSTOM, backend="numpy")["p"]
    assert point == fixture_classes.Point(1, 2)
    clear_safe_globals()
    assert get_safe_globals() == []
    with pytest.raises(tensorplay.UnsafeCheckpointError):
        tensorplay.load(CUSTOM, backend="numpy")


def test_get_unsafe_globals_follows_every_change_to_the_allowlist():
    # The names are remembered between calls; each kind of change must still count.
    unsafe = tensorplay.serialization.get_unsafe_globals_in_checkpoint
    point = ["fixture_classes.Point"]
    assert unsafe(CUSTOM) == point
    add_safe_globals([fixture_classes.Point])
    assert unsafe(CUSTOM) == []
    clear_safe_globals()
    assert unsafe(CUSTOM) == point
    add_safe_globals([(fixture_classes.Point, "elsewhere.Point")])
    assert unsafe(CUSTOM) == point
    with safe_globals([(fixture_classes.Point, "fixture_classes.Point")]):
        assert unsafe(CUSTOM) == []
    assert unsafe(CUSTOM) == point
    clear_safe_globals()
    if has_torch():
        import torch

        torch_own = torch.serialization.get_safe_globals()
        torch.serialization.add_safe_globals([fixture_classes.Point])
        try:
            assert unsafe(CUSTOM) == []
        finally:
            torch.serialization.clear_safe_globals()
            torch.serialization.add_safe_globals(torch_own)
        assert unsafe(CUSTOM) == point


def test_tuple_entries_match_the_given_name_only():
    add_safe_globals([(fixture_classes.Point, "fixture_classes.Point")])
    assert tensorplay.load(CUSTOM, backend="numpy")["p"].x == 1
    clear_safe_globals()
    add_safe_globals([(fixture_classes.Point, "elsewhere.Point")])
    with pytest.raises(tensorplay.UnsafeCheckpointError, match="fixture_classes.Point"):
        tensorplay.load(CUSTOM, backend="numpy")


def test_malformed_entries_are_refused_when_added():
    with pytest.raises(ValueError, match="length"):
        add_safe_globals([(fixture_classes.Point, "a", "b")])
    with pytest.raises(TypeError, match="str"):
        add_safe_globals([(fixture_classes.Point, 3)])
    with pytest.raises(TypeError):
        add_safe_globals([[1, 2]])


def test_safe_globals_is_a_context_manager_that_restores():
    with safe_globals([fixture_classes.Point]):
        assert tensorplay.load(CUSTOM, backend="numpy")["p"].y == 2
        assert get_safe_globals() == [fixture_classes.Point]  # what is in force here, as torch's lists it
    assert get_safe_globals() == []
    with pytest.raises(tensorplay.UnsafeCheckpointError):
        tensorplay.load(CUSTOM, backend="numpy")


def test_safe_globals_in_one_thread_does_not_leak_into_another():
    barrier = threading.Barrier(2, timeout=30)
    results = {}

    def allowed():
        with safe_globals([fixture_classes.Point]):
            barrier.wait()
            results["allowed"] = tensorplay.load(CUSTOM, backend="numpy")["p"]
            barrier.wait()

    def refused():
        barrier.wait()
        try:
            tensorplay.load(CUSTOM, backend="numpy")
            results["refused"] = "loaded"
        except tensorplay.UnsafeCheckpointError:
            results["refused"] = "refused"
        barrier.wait()

    threads = [threading.Thread(target=allowed), threading.Thread(target=refused)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == {"allowed": fixture_classes.Point(1, 2), "refused": "refused"}


def test_get_unsafe_globals_in_threads_with_different_allowlists():
    # Both threads share the remembered names; each must still get its own answer
    # while the interpreter switches between them as often as it can.
    unsafe = tensorplay.serialization.get_unsafe_globals_in_checkpoint
    wrong: list[tuple[str, list[str]]] = []

    def scan_often(expected: list[str]) -> None:
        for _ in range(300):
            got = unsafe(CUSTOM)
            if got != expected:
                wrong.append((threading.current_thread().name, got))

    def allowed() -> None:
        with safe_globals([fixture_classes.Point]):
            scan_often([])

    switch = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        threads = [threading.Thread(target=allowed, name="allowed"),
                   threading.Thread(target=scan_often, args=(["fixture_classes.Point"],), name="refused")]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        sys.setswitchinterval(switch)
    assert wrong == []


@pytest.mark.parametrize("backend", ["numpy", pytest.param("torch", marks=needs_torch)])
def test_enums_namedtuples_dataclasses_and_setstate_are_built_like_torch(backend):
    with safe_globals([fixture_classes.Color, fixture_classes.Pair, fixture_classes.TrainConfig]):
        obj = tensorplay.load(TORCH_FIXTURES / "custom_enum_namedtuple_dataclass.pt", backend=backend)
    assert obj["color"] is fixture_classes.Color.GREEN
    assert isinstance(obj["pair"], fixture_classes.Pair) and obj["pair"].left == 1
    assert obj["cfg"] == fixture_classes.TrainConfig()
    with safe_globals([fixture_classes.WithSetState]):
        [value] = tensorplay.load(TORCH_FIXTURES / "custom_setstate.pt", backend=backend)
    assert value.value == 5


def _forgetful_objects() -> bytes:
    """20 Forgetfuls, each state with a Scaffold of its own but the 4th and 8th,
    which share one; nothing pickled stays alive."""
    shared = {"scaffold": fixture_classes.Scaffold()}
    objects = [fixture_classes.Forgetful() for _ in range(20)]
    objects[3].__getstate__ = objects[7].__getstate__ = lambda: shared
    return pickle.dumps(objects, protocol=2)


@pytest.mark.parametrize("backend", ["numpy", pytest.param("torch", marks=needs_torch)])
def test_states_are_freed_as_the_build_goes(backend):
    """Each Forgetful's state holds a Scaffold it does not keep. The builder lets
    go of a value once its last user has it (in a checkpoint and in a bare pickle),
    instead of holding every value to the end, as pickle's memo does: a shared
    state lives until its second user, the others only through __setstate__."""
    pickled = _forgetful_objects()
    assert fixture_classes.Scaffold.live == 0
    with safe_globals([fixture_classes.Forgetful, fixture_classes.Scaffold]):
        from_checkpoint = tensorplay.load(_checkpoint(pickled), backend=backend)
        from_pickle = tensorplay.pickle.loads(pickled)
    expected = [1, 1, 1, 1, 2, 2, 2, 1] + [1] * 12
    assert [f.live_then for f in from_checkpoint] == expected
    assert [f.live_then for f in from_pickle] == expected
    assert fixture_classes.Scaffold.live == 0


@pytest.mark.parametrize("backend", ["numpy", pytest.param("torch", marks=needs_torch)])
def test_build_asks_each_object_for_its_setstate_as_pickle_does(backend):
    """BUILD calls ``__setstate__`` wherever the object finds it (its class, a
    base, ``__getattr__``) and otherwise sets a dict state's items, names
    interned; instances of one class after another, as a file mixes them."""
    objects = [fixture_classes.SetStateFromGetattr(), fixture_classes.InheritsSetState(),
               fixture_classes.Plain(), fixture_classes.SetStateFromGetattr(), fixture_classes.Plain(),
               fixture_classes.PlainUnderAMetaclass()]
    objects[0].__dict__["given"] = {"x": 1}
    objects[1].value = 4
    objects[2].__dict__.update({"name": "a", 7: "int key"})
    objects[3].__dict__["given"] = {"x": 2}
    objects[5].__dict__["kept"] = [1, 2]
    pickled = pickle.dumps(objects, protocol=2)
    classes = [fixture_classes.SetStateFromGetattr, fixture_classes.InheritsSetState, fixture_classes.Plain,
               fixture_classes.PlainUnderAMetaclass]
    with safe_globals(classes):
        loaded = tensorplay.load(_checkpoint(pickled), backend=backend)
        if has_torch:
            import torch

            with torch.serialization.safe_globals(classes):
                theirs = torch.load(_checkpoint(pickled), weights_only=True)
            assert pickle.dumps(loaded) == pickle.dumps(theirs)
    assert [type(o) for o in loaded] == [type(o) for o in objects]
    assert loaded[0].given == {"given": {"x": 1}} and loaded[3].given == {"given": {"x": 2}}
    assert loaded[1].value == 4
    assert vars(loaded[2]) == {"name": "a", 7: "int key"} and vars(loaded[4]) == {}
    assert next(iter(vars(loaded[2]))) is sys.intern("name")
    assert vars(loaded[5]) == {"kept": [1, 2]}


def test_blocked_globals_stay_blocked_even_when_allowlisted(tmp_path):
    marker = tmp_path / "marker"
    payload = b"\x80\x02cos\nsystem\nX" + len(f"touch {marker}").to_bytes(4, "little") + f"touch {marker}".encode()
    add_safe_globals([os.system, eval])
    with pytest.raises(tensorplay.UnsafeCheckpointError, match="whose module os is blocked"):
        tensorplay.load(_checkpoint(payload + b"\x85R."), backend="numpy")
    with pytest.raises(tensorplay.UnsafeCheckpointError, match="blocked"):
        tensorplay.load(_checkpoint(b"\x80\x02cbuiltins\neval\nX\x01\x00\x00\x001\x85R."), backend="numpy")
    assert not marker.exists()


def test_an_allowlisted_function_cannot_be_used_as_a_class():
    add_safe_globals([fixture_classes.Point])
    # NEWOBJ needs a class; REDUCE on the class is fine.
    newobj_on_function = b"\x80\x02cbuiltins\nlen\n)\x81."
    with pytest.raises(tensorplay.UnsafeCheckpointError):
        tensorplay.load(_checkpoint(newobj_on_function), backend="numpy")


@pytest.mark.parametrize(("pickled", "what", "cause"), [
    # BUILD with a state WithSetState.__setstate__ cannot take (an int, not a dict)
    (b"\x80\x02cfixture_classes\nWithSetState\n)\x81K\x07b.", "setting the state of a fixture_classes.WithSetState",
     TypeError),
    # NEWOBJ: Color.__new__(Color, 99), a value the enum does not have
    (b"\x80\x02cfixture_classes\nColor\nKc\x85\x81.", "creating a fixture_classes.Color", ValueError),
    # REDUCE: Point(1, 2, 3) is one argument too many
    (b"\x80\x02cfixture_classes\nPoint\nK\x01K\x02K\x03\x87R.", "calling fixture_classes.Point", TypeError),
], ids=["setstate", "new", "call"])
@pytest.mark.parametrize("backend", ["numpy", pytest.param("torch", marks=needs_torch)])
def test_what_allowlisted_code_raises_for_a_file_is_an_unpickling_error(pickled, what, cause, backend):
    """torch's weights-only loader turns any error into an UnpicklingError; so does
    tensorplay, naming what the file made it run."""
    with safe_globals([fixture_classes.Point, fixture_classes.WithSetState, fixture_classes.Color]):
        with pytest.raises(tensorplay.MalformedCheckpointError) as refused:
            tensorplay.load(_checkpoint(pickled), backend=backend)
    assert isinstance(refused.value, pickle.UnpicklingError)
    assert what in str(refused.value) and "data.pkl" in str(refused.value)
    assert isinstance(refused.value.__cause__, cause)


def test_bytes_loads_by_default_and_namespaces_by_preset():
    assert tensorplay.load(_checkpoint(pickle.dumps({"e": b""}, protocol=2)), backend="numpy") == {"e": b""}
    ns = argparse.Namespace(lr=0.1, layers=[1, 2], name="run")
    data = pickle.dumps({"args": ns}, protocol=2)
    with pytest.raises(tensorplay.UnsafeCheckpointError, match="argparse.Namespace"):
        tensorplay.load(_checkpoint(data), backend="numpy")
    add_safe_globals(ARGPARSE_PRESET)
    assert tensorplay.load(_checkpoint(data), backend="numpy")["args"] == ns


def test_the_pathlib_preset_rebuilds_paths_without_touching_files(tmp_path, monkeypatch):
    import pathlib

    from tensorplay.serialization import PATHLIB_PRESET

    monkeypatch.chdir(tmp_path)
    paths = {"pure": pathlib.PurePosixPath("a/b"), "win": pathlib.PureWindowsPath("c:/x"),
             "posix": pathlib.PosixPath("runs/missing/dir")}
    data = pickle.dumps(paths, protocol=2)
    with pytest.raises(tensorplay.UnsafeCheckpointError, match="pathlib"):
        tensorplay.load(_checkpoint(data), backend="numpy")
    add_safe_globals(PATHLIB_PRESET)
    assert tensorplay.load(_checkpoint(data), backend="numpy") == paths
    assert not list(tmp_path.iterdir())


def test_the_lightning_preset_builds_attribute_dicts():
    lightning_data = pytest.importorskip("lightning.fabric.utilities.data")
    from tensorplay.serialization import LIGHTNING_PRESET

    hparams = lightning_data.AttributeDict(lr=0.1, layers=[1, 2])
    data = pickle.dumps({"hparams": hparams}, protocol=2)
    with pytest.raises(tensorplay.UnsafeCheckpointError, match="AttributeDict"):
        tensorplay.load(_checkpoint(data), backend="numpy")
    add_safe_globals(LIGHTNING_PRESET)
    loaded = tensorplay.load(_checkpoint(data), backend="numpy")["hparams"]
    assert type(loaded) is lightning_data.AttributeDict and loaded == hparams and loaded.lr == 0.1


def test_the_argparse_preset_is_built_on_first_use():
    """argparse is a third of `import tensorplay`; only the preset needs it."""
    code = (
        "import sys, tensorplay.serialization as s\n"
        "assert 'argparse' not in sys.modules\n"
        "assert 'ARGPARSE_PRESET' in dir(s)\n"
        "from tensorplay.serialization import ARGPARSE_PRESET\n"
        "import argparse\n"
        "assert ARGPARSE_PRESET == [argparse.Namespace] and s.ARGPARSE_PRESET is ARGPARSE_PRESET\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


@needs_torch
def test_patched_torch_routes_a_third_party_call_path_through_tensorplay():
    import third_party_loader
    import torch

    protocol_4 = TORCH_FIXTURES / "protocol_4.pt"
    with pytest.raises(Exception, match="Weights only load failed"):
        third_party_loader.load_state_dict(protocol_4)  # torch refuses protocol 4
    with tensorplay.patched_torch():
        state = third_party_loader.load_state_dict(protocol_4)
        assert isinstance(state["w"], torch.Tensor) and state["s"] == "x" * 300
        model = torch.load(TORCH_FIXTURES / "whole_module.pt", weights_only=False)
        assert type(model).__name__ == "Sequential"
        with pytest.raises(tensorplay.UnsafeCheckpointError):
            torch.load(TORCH_FIXTURES / "whole_module.pt")
    assert torch.load is not None and not getattr(torch.load, "__tensorplay_patch__", False)


@needs_torch
@pytest.mark.parametrize("switches, weights_only, outcome", [
    ({"TORCH_FORCE_WEIGHTS_ONLY_LOAD": "1"}, False, tensorplay.UnsafeCheckpointError),
    ({"TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD": "yes"}, None, "Sequential"),
    ({"TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD": "1"}, True, tensorplay.UnsafeCheckpointError),
    ({"TORCH_FORCE_WEIGHTS_ONLY_LOAD": "1", "TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD": "1"}, None, RuntimeError),
])
def test_patched_torch_follows_torchs_weights_only_switches(monkeypatch, switches, weights_only, outcome):
    """Code that sets torch's environment switches gets the same kind of load
    (weights-only or pickle) from the patched torch.load as from torch's own."""
    import torch

    for name, value in switches.items():
        monkeypatch.setenv(name, value)
    whole_module = TORCH_FIXTURES / "whole_module.pt"
    kwargs = {} if weights_only is None else {"weights_only": weights_only}
    with tensorplay.patched_torch(), warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # torch's note that a switch decided
        if isinstance(outcome, str):
            assert type(torch.load(whole_module, **kwargs)).__name__ == outcome
            return
        with pytest.raises(outcome):
            torch.load(whole_module, **kwargs)
    if "TORCH_FORCE_WEIGHTS_ONLY_LOAD" in switches and weights_only is False:
        # What torch's own load does there, and what the patch does better.
        with pytest.raises(pickle.UnpicklingError, match="Weights only load failed"):
            torch.load(whole_module, weights_only=False)
        with tensorplay.patched_torch():
            assert torch.load(TORCH_FIXTURES / "protocol_4.pt", weights_only=False)["s"] == "x" * 300


@needs_torch
@pytest.mark.parametrize("patched", [False, True])
def test_torchs_own_allowlist_counts_as_it_does_for_torch_load(patched):
    import torch

    def load(path):  # torch.load looked up at the call, inside the patch
        return torch.load(path) if patched else tensorplay.load(path)

    with contextlib.ExitStack() as stack:
        if patched:
            stack.enter_context(tensorplay.patched_torch())
        with torch.serialization.safe_globals([fixture_classes.Point]):
            assert load(CUSTOM)["p"].y == 2
            assert tensorplay.serialization.get_unsafe_globals_in_checkpoint(CUSTOM) == []
        torch_own = torch.serialization.get_safe_globals()  # what torch registered for itself stays
        torch.serialization.add_safe_globals([fixture_classes.Point])
        try:
            assert load(CUSTOM)["p"].y == 2
        finally:
            torch.serialization.clear_safe_globals()
            torch.serialization.add_safe_globals(torch_own)
        with pytest.raises(tensorplay.UnsafeCheckpointError):
            load(CUSTOM)


@needs_torch
def test_a_jagged_nested_tensor_loads_with_the_globals_torch_allowlists_for_it(tmp_path):
    import tensorplay.scanner
    import torch

    jagged = torch.nested.nested_tensor([torch.arange(2.0), torch.arange(3.0)], layout=torch.jagged)
    torch.save({"njt": jagged}, tmp_path / "njt.pt")
    theirs = torch.load(tmp_path / "njt.pt")["njt"]
    ours = tensorplay.load(tmp_path / "njt.pt")["njt"]
    assert ours.layout == theirs.layout == torch.jagged
    assert [t.tolist() for t in ours.unbind()] == [t.tolist() for t in theirs.unbind()] == [[0, 1], [0, 1, 2]]
    assert tensorplay.serialization.get_unsafe_globals_in_checkpoint(tmp_path / "njt.pt") == \
        torch.serialization.get_unsafe_globals_in_checkpoint(tmp_path / "njt.pt") == []
    # The scanner's allowlist is its own (no torch needed): told torch's entries, it passes the file.
    report = tensorplay.scanner.scan(tmp_path / "njt.pt")
    assert report.verdict == "unsafe" and {f.name for f in report.findings} == {
        "torch.nested._internal.nested_tensor.NestedTensor", "torch.nested._internal.nested_tensor._rebuild_njt",
        "torch._dynamo.decorators._DimRange"}
    assert tensorplay.scanner.scan(tmp_path / "njt.pt", allow=[f.name for f in report.findings]).verdict == "clean"
    [(name, info)] = tensorplay.inspect(tmp_path / "njt.pt").tensors()
    assert name == "njt" and info.layout == "tensor subclass"


@needs_torch
def test_patched_torch_load_follows_torchs_settings(tmp_path):
    import mmap

    import numpy as np
    import torch
    from torch.utils.serialization import config as torch_config

    path = tmp_path / "t.pt"
    torch.save(torch.arange(4.0), path)
    no_byteorder = tmp_path / "no_byteorder.pt"
    with zipfile.ZipFile(path) as old, zipfile.ZipFile(no_byteorder, "w") as new:
        for info in old.infolist():
            if not info.filename.endswith("/byteorder"):
                new.writestr(info, old.read(info))
    big_endian_reading = np.frombuffer(np.arange(4, dtype="<f4").tobytes(), dtype=">f4").tolist()
    with tensorplay.patched_torch():
        with torch.serialization.skip_data():
            assert torch.load(path).shape == (4,)
            assert tensorplay.load(path).shape == (4,)
        torch.serialization.set_default_load_endianness(torch.serialization.LoadEndianness.BIG)
        try:
            assert torch.load(no_byteorder).tolist() == big_endian_reading
        finally:
            torch.serialization.set_default_load_endianness(None)
        # torch's default mmap and its mmap flags: a write reaches the file only
        # through a shared mapping, which only these two settings make.
        torch_config.load.mmap = True
        try:
            with torch.serialization.set_default_mmap_options(mmap.MAP_SHARED):
                mapped = torch.load(path)
                mapped += 10
                del mapped
        finally:
            torch_config.load.mmap = False
    assert tensorplay.load(path).tolist() == [10.0, 11.0, 12.0, 13.0]
    assert tensorplay.serialization.config.load.mmap is False


@pytest.mark.parametrize("truthy", [1, "yes"])
def test_mmap_takes_any_truth_value_as_torch_does(truthy):
    assert tensorplay.load(CUSTOM.parent / "seed_tensor.pt", backend="numpy", mmap=truthy).tolist() == [1.0, 2.0]


@needs_torch
def test_the_environment_switch_patches_at_import(tmp_path):
    code = ("import tensorplay, torch; "
            f"print(torch.load({str(TORCH_FIXTURES / 'protocol_4.pt')!r}, weights_only=True)['s'][:3])")
    env = {**os.environ, "TENSORPLAY_PATCH_TORCH": "1"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "xxx"
