"""Whole pickled nn.Modules (issue 45): `torch.save(model)` in the zip and the legacy
format, written by the pinned torch in a subprocess. In stub mode both load, the
legacy file's `('module', cls, source_file, source)` persistent ids giving each
class's stub its source as text; `tensorplay.module_state_dict` must give what
`torch.load(path, weights_only=False).state_dict()` gives (computed in a
subprocess), name for name and byte for byte. Hostile variants: a source that is
code is never run, a module id of any other shape is refused, and a payload
elsewhere in the pickle (which real torch.load runs, shown in a sandbox) refuses
the load."""
from __future__ import annotations

import io
import json
import os
import pathlib
import pickle
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import tensorplay
from sandboxed import COMMAND, MARKER, runs_payload

torch = pytest.importorskip("torch")

# The classes, in a module the subprocesses import (torch records their source).
CLASSES = textwrap.dedent('''
    import torch
    from torch import nn

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(3, 4, bias=False)
            self.register_buffer("running", torch.arange(4.0))
            self.register_buffer("scratch", torch.ones(2), persistent=False)
            self.register_buffer("nothing", None)
            self.register_buffer("t", torch.arange(6, dtype=torch.int64).reshape(2, 3).t())

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.seq = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), Block())
            self.head = nn.Linear(4, 2)
            self.tied = self.head
            self.twin = nn.Linear(4, 4)
            self.twin.weight = self.seq[0].weight
            self.bn = nn.BatchNorm1d(3)
            self.p = nn.Parameter(torch.randn(2, dtype=torch.float64))
            self.register_buffer("mask", torch.tensor([True, False]))
            self.register_buffer("h16", torch.ones(3, dtype=torch.float16))
            self.note = "plain attribute"

    def deep(levels):
        m = nn.Linear(2, 2)
        for _ in range(levels):
            m = nn.Sequential(m)
        return m
''')

WRITER = textwrap.dedent('''
    import json, sys, torch, wholemods
    from torch import nn
    from torch.serialization import get_source_lines_and_file
    out = sys.argv[1]
    torch.manual_seed(0)
    models = {"net": wholemods.Net(), "sequential": nn.Sequential(nn.Linear(2, 3), nn.Tanh()),
              "deep": wholemods.deep(60)}
    for name, model in models.items():
        torch.save(model, f"{out}/{name}.zip.pt")
        torch.save(model, f"{out}/{name}.legacy.pt", _use_new_zipfile_serialization=False)
    # What torch's legacy writer records for each class, as it computes it.
    classes = [wholemods.Net, wholemods.Block, nn.Sequential, nn.Linear, nn.ReLU, nn.BatchNorm1d, nn.Tanh]
    sources = {f"{c.__module__}.{c.__qualname__}": "".join(get_source_lines_and_file(c)[0]) for c in classes}
    json.dump(sources, open(f"{out}/sources.json", "w"))
''')

# The real reader, in a process of its own: torch.load(weights_only=False).state_dict().
REFERENCE = textwrap.dedent('''
    import sys, torch
    sys.path.insert(0, sys.argv[1])
    for path in sys.argv[2:]:
        state = torch.load(path, weights_only=False).state_dict()
        torch.save(list(state.items()), path + ".ref")
''')

MODELS = ["net", "sequential", "deep"]
FORMATS = ["zip", "legacy"]


def _run(folder, *args):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(folder), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, *args], capture_output=True, cwd=folder, env=env)
    assert done.returncode == 0, done.stderr.decode()
    return done.stdout


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    folder = tmp_path_factory.mktemp("whole_modules")
    (folder / "wholemods.py").write_text(CLASSES)
    _run(folder, "-c", WRITER, str(folder))
    _run(folder, "-c", REFERENCE, str(folder), *(str(folder / f"{m}.{f}.pt") for m in MODELS for f in FORMATS))
    return folder


def _described(t) -> tuple:
    """What must match: dtype, shape, strides and every byte."""
    if isinstance(t, np.ndarray):
        strides = tuple(s // t.itemsize for s in t.strides)
        return str(t.dtype), t.shape, strides, np.ascontiguousarray(t).tobytes()
    dtype = str(t.dtype).removeprefix("torch.")
    c = t.contiguous()
    return dtype, tuple(t.shape), t.stride(), c.reshape(-1).view(torch.uint8).numpy().tobytes() if c.numel() else b""


def _stub_load(path, **kwargs):
    with pytest.warns(tensorplay.StubWarning):
        return tensorplay.load(path, unknown_globals="stub", **kwargs)


@pytest.mark.parametrize("backend", ["torch", "numpy"])
@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("model", MODELS)
def test_module_state_dict_is_torchs(written, model, fmt, backend):
    path = written / f"{model}.{fmt}.pt"
    reference = torch.load(f"{path}.ref", weights_only=True)
    ours = tensorplay.module_state_dict(path, backend=backend)
    assert list(ours) == [name for name, _ in reference]
    for name, tensor in reference:
        expected = _described(tensor)
        if backend == "numpy":
            expected = ({"float16": "float16", "float32": "float32", "float64": "float64", "bool": "bool",
                         "int64": "int64"}[expected[0]], *expected[1:])
        assert _described(ours[name]) == expected, name
        if backend == "torch":
            assert type(ours[name]) is torch.Tensor and not ours[name].requires_grad, name


def test_the_names_include_shared_tensors_and_leave_out_what_torch_leaves_out(written):
    names = list(tensorplay.module_state_dict(written / "net.legacy.pt"))
    # A module under two names, and a parameter two modules share, are under each.
    assert {"head.weight", "tied.weight", "seq.0.weight", "twin.weight"} <= set(names)
    # A non-persistent buffer, a None buffer and a None bias are not.
    assert not [n for n in names if n.endswith(("scratch", "nothing", "lin.bias"))]
    assert "bn.num_batches_tracked" in names


def test_shared_tensors_share_their_storage(written):
    sd = tensorplay.module_state_dict(written / "net.legacy.pt")
    assert sd["seq.0.weight"].data_ptr() == sd["twin.weight"].data_ptr()
    assert sd["head.bias"].data_ptr() == sd["tied.bias"].data_ptr()


def test_the_legacy_file_gives_each_class_its_recorded_source(written):
    sources = json.loads((written / "sources.json").read_text())
    root = _stub_load(written / "net.legacy.pt")
    seen = {}
    pending = [root]
    while pending:
        stub = pending.pop()
        seen[stub.qualname] = stub.source
        pending.extend(m for m in stub.state["_modules"].values() if m is not None)
    assert seen == {name: source for name, source in sources.items() if name != "torch.nn.modules.activation.Tanh"}
    assert all(isinstance(s, str) and s.startswith("class ") for s in seen.values())


def test_a_zip_file_records_no_source(written):
    root = _stub_load(written / "net.zip.pt")
    assert root.qualname == "wholemods.Net" and root.source is None


def test_the_stub_tree_holds_parameters_as_torch_rebuilds_them(written):
    root = _stub_load(written / "net.legacy.pt")
    weight = root.state["_modules"]["head"].state["_parameters"]["weight"]
    assert isinstance(weight, torch.nn.Parameter) and weight.requires_grad
    assert root.state["note"] == "plain attribute"


def test_the_default_load_refuses_a_legacy_whole_module_and_says_what_it_is(written):
    with pytest.raises(tensorplay.UnsupportedCheckpointError) as refused:
        tensorplay.load(written / "net.legacy.pt")
    message = str(refused.value)
    assert "whole pickled nn.Module" in message and "wholemods.Net" in message
    assert 'unknown_globals="stub"' in message and "module_state_dict" in message
    # Allowlisting the classes does not change that: the module ids stay refused.
    sys.path.insert(0, str(written))
    try:
        import wholemods
    finally:
        sys.path.remove(str(written))
    nn = torch.nn
    classes = [wholemods.Net, wholemods.Block, nn.Sequential, nn.Linear, nn.ReLU, nn.BatchNorm1d]
    with tensorplay.serialization.safe_globals(classes):
        with pytest.raises(tensorplay.UnsupportedCheckpointError, match="whole pickled nn.Module"):
            tensorplay.load(written / "net.legacy.pt")


def test_the_default_load_refuses_the_zip_file_for_its_globals(written):
    with pytest.raises(tensorplay.UnsafeCheckpointError, match="wholemods.Net"):
        tensorplay.load(written / "net.zip.pt")


def test_module_state_dict_of_a_loaded_stub_and_of_bytes(written):
    path = written / "net.legacy.pt"
    expected = tensorplay.module_state_dict(path)
    assert list(tensorplay.module_state_dict(_stub_load(path))) == list(expected)
    assert list(tensorplay.module_state_dict(path.read_bytes())) == list(expected)


# --- malformed stub trees ----------------------------------------------------------

def _module(qualname="m.M", **state):
    module, name = qualname.rsplit(".", 1)
    stub = tensorplay.Stub(module, name, ())
    stub.state = {"_parameters": {}, "_buffers": {}, "_modules": {}, **state}
    return stub


def test_a_very_deep_tree_is_walked_without_recursion():
    leaf = _module(_parameters={"w": torch.ones(1)})
    root = leaf
    for _ in range(50_000):
        root = _module(_modules={"0": root})
    sd = tensorplay.module_state_dict(root)
    assert list(sd) == ["0." * 50_000 + "w"]


@pytest.mark.parametrize(("state", "words"), [
    ({"_parameters": None}, r"module a \(m.M\) has a NoneType _parameters"),
    ({"_parameters": {"w": 3}}, r"module a \(m.M\) has parameter 'w' that is a int, not a tensor"),
    ({"_buffers": {1: torch.ones(1)}}, r"module a \(m.M\) has a int key in its _buffers"),
    ({"_modules": {"x": 3}}, r"module a \(m.M\) has submodule 'x' that is a int"),
    ({"_non_persistent_buffers_set": [1]}, r"module a \(m.M\) has a list _non_persistent_buffers_set"),
])
def test_a_malformed_module_is_refused_naming_its_path(state, words):
    child = _module(**state)
    root = _module("m.Root", _modules={"a": child})
    with pytest.raises(tensorplay.MalformedCheckpointError, match=words):
        tensorplay.module_state_dict(root)


def test_a_module_without_its_dicts_or_state_is_refused():
    bare = tensorplay.Stub("m", "M", ())
    with pytest.raises(tensorplay.MalformedCheckpointError, match=r"module <root> \(m.M\) has nothing as its state"):
        tensorplay.module_state_dict(bare)
    bare.state = {"training": True}
    with pytest.raises(tensorplay.MalformedCheckpointError, match="has no _parameters, not a dict"):
        tensorplay.module_state_dict(bare)
    with pytest.raises(tensorplay.MalformedCheckpointError, match="holds a dict, not a pickled nn.Module"):
        plain = io.BytesIO()
        torch.save({"w": torch.ones(1)}, plain)
        tensorplay.module_state_dict(plain.getvalue())


def test_a_module_that_holds_itself_is_refused():
    root = _module()
    child = _module(_modules={"up": root})
    root.state["_modules"]["c"] = child
    with pytest.raises(tensorplay.MalformedCheckpointError, match=r"module c.up \(m.M\) contains itself"):
        tensorplay.module_state_dict(root)


def test_sharing_that_would_not_end_hits_a_limit():
    # Each level holds the next twice: 2**40 walks, as torch's state_dict would make.
    node = _module(_parameters={"w": torch.ones(1)})
    for _ in range(40):
        node = _module(_modules={"a": node, "b": node})
    with pytest.raises(tensorplay.LimitExceededError, match="max_nodes"):
        tensorplay.module_state_dict(node, limits={"max_nodes": 10_000})


# --- hostile legacy files ------------------------------------------------------------

def _legacy_with_module_ids(folder, model_expr: str, rewrite: str, repeat: bool = False) -> bytes:
    """A legacy file torch writes of ``model_expr``, each module persistent id
    passed through ``rewrite`` (an expression of ``pid``) on its way out; with
    ``repeat``, a class's later uses repeat its id where torch refers to the first."""
    code = textwrap.dedent(f'''
        import io, os, pickle, sys, types, torch, wholemods
        torch.manual_seed(0)
        class Payload:
            def __reduce__(self):
                return os.system, ({COMMAND!r},)
        class Pickler(pickle._Pickler):
            ids = {{}}
            inside = False
            def save_pers(self, pid):
                if isinstance(pid, tuple) and pid[0] == "module":
                    self.ids[pid[1]] = pid
                    pid = {rewrite}
                self.inside = True
                super().save_pers(pid)
                self.inside = False
            def save(self, obj, save_persistent_id=True):
                # Before the memo, which holds the class since its first id.
                if {repeat} and isinstance(obj, type) and obj in self.ids and not self.inside:
                    return self.save_pers(self.ids[obj])
                super().save(obj, save_persistent_id)
        module = types.SimpleNamespace(Pickler=Pickler, dump=pickle.dump, __name__="rewriting")
        out = io.BytesIO()
        torch.save({model_expr}, out, pickle_module=module, _use_new_zipfile_serialization=False)
        sys.stdout.buffer.write(out.getvalue())
    ''')
    return _run(folder, "-c", code)


# The torch reader: sys.path gets the classes' folder, then the file is loaded as torch loads it.
TORCH_LOADS = "import sys, torch; sys.path.insert(0, folder); torch.load(path, weights_only=False)"
TENSORPLAY_LOADS = ("import sys, warnings; sys.path.insert(0, root); import tensorplay; "
                    "warnings.simplefilter('ignore')\n"
                    "try:\n  tensorplay.module_state_dict(path)\nexcept tensorplay.CheckpointError:\n  pass")


def _tensorplay_root() -> str:
    return str(pathlib.Path(tensorplay.__file__).parent.parent)


def test_a_source_that_is_code_is_text_never_run(written, tmp_path):
    code = f"import os\nos.system({COMMAND!r})\n"
    data = _legacy_with_module_ids(written, "wholemods.Net()", f"(pid[0], pid[1], pid[2], {code!r})")
    path = tmp_path / "code_as_source.pt"
    path.write_bytes(data)
    # torch only compares the text with the class's own; neither reader runs it.
    assert not runs_payload(TORCH_LOADS, folder=str(written), path=str(path))
    assert not runs_payload(TENSORPLAY_LOADS, root=_tensorplay_root(), path=str(path))
    root = _stub_load(path)
    assert root.source == code
    assert list(tensorplay.module_state_dict(root)) == [n for n, _ in torch.load(
        written / "net.legacy.pt.ref", weights_only=True)]
    assert not (tmp_path / MARKER).exists()


@pytest.mark.parametrize(("rewrite", "words"), [
    ("pid[:3]", "must be \\('module', class, source_file, source\\), 4 items; this one has 3"),
    ("pid + (None,)", "4 items; this one has 5"),
    ("(pid[0], 'wholemods.Net', pid[2], pid[3])", "must name its module class as a global, not a str"),
    ("(pid[0], pid[1], pid[2], 42)", "must have a str or None source, not a int"),
    ("(pid[0], pid[1], 7, pid[3])", "must have a str or None source file name, not a int"),
    ("(pid[0], pid[1], pid[2], pid[3].encode('utf-16'))", "has a source that is not UTF-8 text"),
    ("(pid[0], __import__('collections').OrderedDict, pid[2], pid[3])", "names an allowlisted global"),
])
def test_a_module_id_of_another_shape_is_refused(written, tmp_path, rewrite, words):
    path = tmp_path / "bad_id.pt"
    path.write_bytes(_legacy_with_module_ids(written, "wholemods.Net()", rewrite))
    with pytest.raises(tensorplay.UnsafeCheckpointError, match=words):
        tensorplay.load(path, unknown_globals="stub")


def test_a_second_module_id_for_one_class_is_refused(written, tmp_path):
    model = "torch.nn.Sequential(torch.nn.Linear(1, 1), torch.nn.Linear(1, 1))"
    once = tmp_path / "once.pt"
    once.write_bytes(_legacy_with_module_ids(written, model, "pid"))
    # As torch writes it, a class's second use is a plain global: it loads.
    assert len(tensorplay.module_state_dict(once)) == 4
    twice = tmp_path / "twice.pt"
    twice.write_bytes(_legacy_with_module_ids(written, model, "pid", repeat=True))
    with pytest.raises(tensorplay.UnsafeCheckpointError, match="names torch.nn.modules.linear.Linear a second time"):
        tensorplay.load(twice, unknown_globals="stub")


@pytest.mark.parametrize("where", ["source", "attribute"])
def test_a_payload_in_a_whole_module_refuses_the_load(written, tmp_path, where):
    if where == "source":
        data = _legacy_with_module_ids(written, "wholemods.Net()", "(pid[0], pid[1], pid[2], Payload())")
    else:
        data = _legacy_with_module_ids(written, "(lambda m: (setattr(m, 'extra', Payload()), m)[1])(wholemods.Net())",
                                       "pid")
    path = tmp_path / f"payload_in_{where}.pt"
    path.write_bytes(data)
    assert runs_payload(TORCH_LOADS, folder=str(written), path=str(path))
    for load in (lambda: tensorplay.load(path, unknown_globals="stub"), lambda: tensorplay.module_state_dict(path),
                 lambda: tensorplay.load(path)):
        with pytest.raises(tensorplay.UnsafeCheckpointError, match="system"):
            load()
    assert not runs_payload(TENSORPLAY_LOADS, root=_tensorplay_root(), path=str(path))


def test_a_module_id_in_a_zip_file_stays_refused(written, tmp_path):
    """Only the legacy format has module ids; in a zip checkpoint one is refused as today."""
    import zipfile

    class ModuleIds(pickle.Pickler):
        written = False

        def persistent_id(self, obj):
            if obj is not torch.nn.Linear or self.written:
                return None
            self.written = True
            return ("module", torch.nn.Linear, "linear.py", "class Linear: ...")

    out = io.BytesIO()
    ModuleIds(out, protocol=2).dump([torch.nn.Linear])
    path = tmp_path / "zip_module_id.pt"
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("archive/data.pkl", out.getvalue())
        z.writestr("archive/version", "3\n")
        z.writestr("archive/byteorder", "little")
    with pytest.raises(tensorplay.UnsafeCheckpointError, match="Only persistent_load of storage is allowed"):
        tensorplay.load(path, unknown_globals="stub")
