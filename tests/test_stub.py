"""Stub mode (`unknown_globals="stub"`): a global outside the allowlist becomes an
inert `tensorplay.Stub`; nothing the file names is imported or called.

The checkpoints are written by real torch in a subprocess that can import the
classes they hold (a user's own module, a tensor subclass); this process cannot,
so a load that tried to import one would fail, and an import hook records that
it never tried."""

import argparse
import importlib.abc
import json
import pathlib
import subprocess
import sys
import textwrap
import warnings

import numpy as np
import pytest
import tensorplay

torch = pytest.importorskip("torch")

USER_MODULE = textwrap.dedent('''
    import torch

    class Config:
        """A user's config object: plain attributes, one of them a tensor."""
        def __init__(self, lr, mask):
            self.lr = lr
            self.mask = mask

    class Registry(dict):
        """A dict subclass: pickled with SETITEMS on the object."""

    class History(list):
        """A list subclass: pickled with APPENDS on the object."""

    class Point:
        """Rebuilt by a call: REDUCE with arguments."""
        def __init__(self, x, y):
            self.x, self.y = x, y
        def __reduce__(self):
            return (Point, (self.x, self.y))

    class Slotted:
        __slots__ = ("a", "b")
        def __init__(self):
            self.a, self.b = 1, torch.ones(2)

    class Marked(torch.Tensor):
        """A tensor subclass."""

    MARKER_PATH = None

    class Touch:
        """Would create a marker file if it were ever called."""
        def __reduce__(self):
            return (open, (MARKER_PATH, "w"))
''')

WRITER = textwrap.dedent('''
    import argparse, sys, torch
    sys.path.insert(0, sys.argv[1])
    import stubtest_user_module as m
    out = sys.argv[2]
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 3)
    ckpt = {
        "state_dict": model.state_dict(),
        "args": argparse.Namespace(lr=0.1, layers=[1, 2], name="run"),
        "config": m.Config(0.5, torch.arange(6.0).reshape(2, 3)),
        "registry": m.Registry(weight=torch.ones(2), step=3),
        "history": m.History([torch.zeros(1), 7]),
        "point": m.Point(1, torch.tensor([2.0])),
        "slotted": m.Slotted(),
        "marked": torch.arange(4.0).as_subclass(m.Marked),
        "epoch": 5,
    }
    torch.save(ckpt, out + "/user.pt")
    torch.save(ckpt, out + "/legacy.pt", _use_new_zipfile_serialization=False)
    torch.save({"weight": torch.ones(2), "args": argparse.Namespace(lr=0.1)}, out + "/namespace.pt")
''')


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    root = tmp_path_factory.mktemp("stub")
    mods = root / "mods"
    mods.mkdir()
    (mods / "stubtest_user_module.py").write_text(USER_MODULE)
    subprocess.run([sys.executable, "-c", WRITER, str(mods), str(root)], check=True, capture_output=True)
    return root, mods


def _unsafe(path, mods):
    """torch.load(weights_only=False) of the file, with the user's module importable."""
    sys.path.insert(0, str(mods))
    try:
        return torch.load(path, weights_only=False)
    finally:
        sys.path.remove(str(mods))
        sys.modules.pop("stubtest_user_module", None)


class _ImportTracer(importlib.abc.MetaPathFinder):
    def __init__(self):
        self.asked = []

    def find_spec(self, fullname, path=None, target=None):
        self.asked.append(fullname)
        return None


def _stub_load(path, **kw):
    tracer = _ImportTracer()
    sys.meta_path.insert(0, tracer)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            loaded = tensorplay.load(path, unknown_globals="stub", **kw)
    finally:
        sys.meta_path.remove(tracer)
    assert not [name for name in tracer.asked if "stubtest" in name], tracer.asked
    return loaded, [w for w in caught if issubclass(w.category, tensorplay.StubWarning)]


def test_the_default_refuses_a_global_outside_the_allowlist(written):
    root, _ = written
    with pytest.raises(tensorplay.UnsafeCheckpointError, match="argparse.Namespace"):
        tensorplay.load(root / "namespace.pt")


@pytest.mark.parametrize("name", ["user.pt", "legacy.pt"])
def test_stub_mode_builds_every_tensor_and_records_every_use(written, name):
    root, mods = written
    expected = _unsafe(root / name, mods)
    loaded, stub_warnings = _stub_load(root / name)
    assert "stubtest_user_module" not in sys.modules
    for key, value in expected["state_dict"].items():
        assert torch.equal(loaded["state_dict"][key], value)
    assert loaded["epoch"] == 5

    args = loaded["args"]
    assert isinstance(args, tensorplay.Stub)
    assert (args.module, args.name) == ("argparse", "Namespace")
    assert args.to_dict() == {"lr": 0.1, "layers": [1, 2], "name": "run"}
    assert repr(args).startswith("Stub(argparse.Namespace, ")

    config = loaded["config"]
    assert (config.module, config.name) == ("stubtest_user_module", "Config")
    assert config.to_dict()["lr"] == 0.5
    assert torch.equal(config.to_dict()["mask"], expected["config"].mask)

    registry = loaded["registry"]
    assert set(registry.items) == {"weight", "step"}
    assert torch.equal(registry.items["weight"], torch.ones(2)) and registry.items["step"] == 3

    history = loaded["history"]
    assert len(history.items) == 2 and torch.equal(history.items[0], torch.zeros(1)) and history.items[1] == 7

    point = loaded["point"]
    assert point.args[0] == 1 and torch.equal(point.args[1], torch.tensor([2.0]))

    slotted = loaded["slotted"].to_dict()
    assert slotted["a"] == 1 and torch.equal(slotted["b"], torch.ones(2))

    # A stubbed tensor subclass leaves the tensor itself.
    marked = loaded["marked"]
    assert type(marked) is torch.Tensor and torch.equal(marked, torch.arange(4.0))

    (warning,) = stub_warnings
    assert warning.filename == __file__  # it points at the caller of tensorplay.load
    for qualname in ("argparse.Namespace", "stubtest_user_module.Config", "stubtest_user_module.Registry",
                     "stubtest_user_module.History", "stubtest_user_module.Point", "stubtest_user_module.Marked"):
        assert qualname in str(warning.message)


def test_stub_mode_with_numpy_and_mmap(written):
    root, _ = written
    loaded, _ = _stub_load(root / "user.pt", backend="numpy", mmap=True)
    assert isinstance(loaded["state_dict"]["weight"], np.ndarray)
    assert isinstance(loaded["config"], tensorplay.Stub)
    np.testing.assert_array_equal(loaded["config"].to_dict()["mask"], np.arange(6.0).reshape(2, 3))


MALICIOUS = pathlib.Path(__file__).parent / "malicious"
HOSTILE = [e for e in json.loads((MALICIOUS / "manifest.json").read_text())
           if e["load_error"] == "UnsafeCheckpointError" and e["dangerous_globals"]
           and e["family"] in ("code_execution", "gadget", "nested_payload", "dcp")]


@pytest.mark.parametrize("entry", HOSTILE, ids=[e["file"] for e in HOSTILE])
def test_dangerous_globals_are_refused_in_stub_mode_too(entry, tmp_path, monkeypatch):
    """Every code-execution file of the corpus: stub mode never salvages one, not
    even where the payload is a pickle a stub was handed as bytes."""
    monkeypatch.chdir(tmp_path)
    path = MALICIOUS / "files" / entry["file"]
    with pytest.raises(tensorplay.CheckpointError):
        tensorplay.load(path, unknown_globals="stub")
    with pytest.raises(tensorplay.CheckpointError):
        tensorplay.inspect(path, unknown_globals="stub")
    assert not list(tmp_path.iterdir())


def test_a_payload_in_a_stubs_state_is_named_as_the_reason(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(tensorplay.UnsafeCheckpointError) as refused:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", tensorplay.StubWarning)
            tensorplay.load(MALICIOUS / "files" / "refused_class_bytes_state.pt", unknown_globals="stub")
    assert "os.system" in str(refused.value) and "treat the file as hostile" in str(refused.value)
    assert any(f.dangerous and f.name == "os.system" for f in refused.value.globals)


def test_nothing_a_stub_names_is_ever_called(written, tmp_path):
    """A class whose reduce would open a file: stubbed, its call is recorded."""
    root, mods = written
    marker = tmp_path / "ran"
    script = textwrap.dedent(f'''
        import sys, torch
        sys.path.insert(0, {str(mods)!r})
        import stubtest_user_module as m
        m.MARKER_PATH = {str(marker)!r}
        torch.save({{"x": torch.ones(1), "touch": m.Touch()}}, {str(tmp_path / "touch.pt")!r})
    ''')
    subprocess.run([sys.executable, "-c", script], check=True, capture_output=True)
    assert not marker.exists()
    with pytest.raises(tensorplay.UnsafeCheckpointError):
        tensorplay.load(tmp_path / "touch.pt", unknown_globals="stub")  # builtins.open is blocked
    assert not marker.exists()


def test_a_stub_cannot_be_saved(written, tmp_path):
    root, _ = written
    loaded, _ = _stub_load(root / "namespace.pt")
    target = tmp_path / "out.pt"
    with pytest.raises(TypeError, match="cannot be pickled or saved"):
        tensorplay.save(loaded, target)
    with pytest.raises(TypeError, match="cannot be pickled or saved"):
        torch.save(loaded, tmp_path / "torch.pt")


def test_bad_unknown_globals_values_are_refused(written):
    root, _ = written
    with pytest.raises(ValueError, match="'error' or 'stub'"):
        tensorplay.load(root / "namespace.pt", unknown_globals="ignore")
    with pytest.raises(ValueError, match="weights-only"):
        tensorplay.load(root / "namespace.pt", weights_only=False, unknown_globals="stub")


def test_no_warning_when_nothing_was_stubbed(tmp_path):
    torch.save({"w": torch.ones(2)}, tmp_path / "plain.pt")
    loaded, stub_warnings = _stub_load(tmp_path / "plain.pt")
    assert stub_warnings == [] and torch.equal(loaded["w"], torch.ones(2))


def test_a_stub_records_a_namespace_built_in_this_process(tmp_path):
    torch.save({"args": argparse.Namespace(lr=0.1)}, tmp_path / "ns.pt")
    loaded, _ = _stub_load(tmp_path / "ns.pt")
    assert loaded["args"].to_dict() == {"lr": 0.1}


# --- one complete error -------------------------------------------------------------

def test_a_refusal_names_every_global_with_where_it_is_and_the_ways_through(written):
    root, _ = written
    with pytest.raises(tensorplay.UnsafeCheckpointError) as refused:
        tensorplay.load(root / "user.pt")
    message = str(refused.value)
    assert message.startswith("Weights only load failed. Unsupported global: GLOBAL ")
    names = {f.name for f in refused.value.globals}
    assert {"argparse.Namespace", "stubtest_user_module.Config", "stubtest_user_module.Registry",
            "stubtest_user_module.History", "stubtest_user_module.Point", "stubtest_user_module.Slotted",
            "stubtest_user_module.Marked"} <= names
    assert not any(f.dangerous for f in refused.value.globals)
    for finding in refused.value.globals:
        assert f"{finding.name} (" in message and f"byte {finding.offset}" in message
    assert "tensorplay.serialization.add_safe_globals([argparse.Namespace, " in message
    assert "tensorplay scan --allow argparse.Namespace" in message
    assert 'unknown_globals="stub"' in message
    assert refused.value.kind == "unsafe_global"


def test_a_refusal_without_torch_never_suggests_weights_only_false(written, monkeypatch):
    from tensorplay import _refusal

    root, _ = written
    monkeypatch.setattr(_refusal, "_torch_installed", lambda: False)
    with pytest.raises(tensorplay.UnsafeCheckpointError) as refused:
        tensorplay.load(root / "namespace.pt", backend="numpy")
    assert "weights_only" not in str(refused.value)
    monkeypatch.setattr(_refusal, "_torch_installed", lambda: True)
    with pytest.raises(tensorplay.UnsafeCheckpointError) as refused:
        tensorplay.load(root / "namespace.pt")
    assert "weights_only=False would run code" in str(refused.value)


def test_a_dangerous_global_is_named_as_such_and_no_way_through_is_offered(tmp_path):
    corpus = pathlib.Path(__file__).parent / "malicious" / "files"
    with pytest.raises(tensorplay.UnsafeCheckpointError) as refused:
        tensorplay.load(corpus / "payload_among_tensors.pt")
    message = str(refused.value)
    assert "os.system" in message
    assert "unknown_globals" not in message and "add_safe_globals([os" not in message


# --- inspect and the command line ---------------------------------------------------

def test_inspect_in_stub_mode_lists_the_stubbed_globals(written):
    root, _ = written
    result = tensorplay.inspect(root / "namespace.pt", unknown_globals="stub")
    assert result.stubbed == ("argparse.Namespace",)
    assert result.to_json()["stubbed"] == ["argparse.Namespace"]
    with pytest.raises(tensorplay.UnsafeCheckpointError, match="argparse.Namespace"):
        tensorplay.inspect(root / "namespace.pt")


def _cli(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "tensorplay", *map(str, args)], capture_output=True, text=True,
                          cwd=cwd, timeout=120)


def test_the_command_line_gives_command_line_advice_and_stubs_on_request(written, tmp_path):
    root, _ = written
    refused = _cli("inspect", root / "namespace.pt")
    assert refused.returncode != 0
    assert "--stub" in refused.stderr and "--allow argparse.Namespace" in refused.stderr
    assert "add_safe_globals" not in refused.stderr
    assert "weights_only" not in refused.stderr and "unknown_globals" not in refused.stderr
    assert "[entry 'namespace/data.pkl', byte offset" in refused.stderr
    shown = _cli("inspect", "--stub", root / "namespace.pt")
    assert shown.returncode == 0, shown.stderr
    assert "stubbed (never imported or called): argparse.Namespace" in shown.stdout

    out = tmp_path / "user.safetensors"
    converted = _cli("convert", "--stub", "--metadata", root / "user.pt", out)
    assert converted.returncode == 0, converted.stderr
    from safetensors import safe_open

    with safe_open(str(out), "np") as f:
        keys = set(f.keys())
        np.testing.assert_array_equal(f.get_tensor("config.state.mask"), np.arange(6.0).reshape(2, 3))
        metadata = f.metadata()
    assert "state_dict.weight" in keys and "registry.items.weight" in keys
    assert metadata["config.__stub__"] == '"stubtest_user_module.Config"'
    assert metadata["args.state.lr"] == "0.1"


# --- under patch_torch, only when asked -----------------------------------------------

def test_patch_torch_stubs_only_when_asked(written, monkeypatch):
    root, _ = written
    with tensorplay.patched_torch():
        with pytest.raises(tensorplay.UnsafeCheckpointError, match="torch.serialization.add_safe_globals"):
            torch.load(root / "namespace.pt")
    with tensorplay.patched_torch(unknown_globals="stub"):
        with pytest.warns(tensorplay.StubWarning, match="argparse.Namespace"):
            loaded = torch.load(root / "namespace.pt")
    assert loaded["args"].to_dict() == {"lr": 0.1} and torch.equal(loaded["weight"], torch.ones(2))
    monkeypatch.setenv("TENSORPLAY_UNKNOWN_GLOBALS", "stub")
    with tensorplay.patched_torch():
        with pytest.warns(tensorplay.StubWarning):
            assert isinstance(torch.load(root / "namespace.pt")["args"], tensorplay.Stub)
    with pytest.raises(ValueError, match="'error' or 'stub'"):
        tensorplay.patch_torch(unknown_globals="yes")


def test_allow_on_the_command_line(written, tmp_path):
    root, _ = written
    shown = _cli("inspect", "--allow", "argparse.Namespace", root / "namespace.pt")
    assert shown.returncode == 0, shown.stderr
    assert "args = Namespace(lr=0.1)" in shown.stdout
    converted = _cli("convert", "--allow", "argparse.*", "--metadata", root / "namespace.pt", tmp_path / "n.st")
    assert converted.returncode == 0, converted.stderr
    for command in (["inspect"], ["scan"]):
        refused = _cli(*command, "--allow", "os.system", root / "namespace.pt")
        assert refused.returncode == 2 and "denylist" in refused.stderr, refused.stderr
    # inspect shows a name it cannot import as a stub (test_torch_parity); convert needs it importable
    missing = _cli("inspect", "--allow", "no_such_module_xyz.Thing", "--allow", "argparse.Namespace",
                   root / "namespace.pt")
    assert missing.returncode == 0 and "cannot import no_such_module_xyz.Thing here" in missing.stderr
    missing = _cli("convert", "--allow", "no_such_module_xyz.Thing", root / "namespace.pt", tmp_path / "m.st")
    assert missing.returncode == 2 and "no such importable object" in missing.stderr
    missing = _cli("inspect", "--allow", "no_such_module_xyz.*", root / "namespace.pt")
    assert missing.returncode == 2 and "cannot import no_such_module_xyz" in missing.stderr
    pattern = _cli("scan", "--allow", "argparse.*", root / "namespace.pt")
    assert pattern.returncode == 2 and "not patterns" in pattern.stderr
