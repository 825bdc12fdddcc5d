"""TorchScript archives (issue 45): written by the pinned torch in a subprocess,
read without running anything. `tensorplay.jit_state_dict` must give what
`torch.jit.load(path).state_dict()` gives (computed in that subprocess), name for
name and byte for byte; the default load refuses; `torch.jit._pickle`'s builders
are data only in a TorchScript archive's own pickles; and of `code/` only the
`__parameters__`/`__buffers__` lines are read, strictly."""
from __future__ import annotations

import io
import json
import pickle
import subprocess
import sys
import textwrap
import zipfile

import numpy as np
import pytest
import tensorplay
from tensorplay import scanner

torch = pytest.importorskip("torch")

WRITER = textwrap.dedent('''
    import sys, torch, torch.nn as nn
    out = sys.argv[1]
    torch.manual_seed(0)

    class Inner(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(3, 2)
            self.register_buffer("run", torch.arange(4.0))
            self.register_buffer("tmp", torch.ones(2), persistent=False)
            self.register_buffer("t", torch.arange(6.0).reshape(2, 3).t())
            self.plain = torch.zeros(3)
            self.k = 3
            self.f = 1.5
            self.l = [1, 2]
        def forward(self, x):
            y = self.lin(x) + self.run.sum() + self.tmp.sum() + self.plain.sum() + self.t.sum()
            return y + self.k + self.f + self.l[0]

    class Outer(nn.Module):
        def __init__(self):
            super().__init__()
            self.a = Inner()
            self.seq = nn.Sequential(nn.Linear(2, 2), nn.ReLU(), nn.Linear(2, 2))
            self.seq[2].weight = self.seq[0].weight
            self.bn = nn.BatchNorm1d(2)
            self.p = nn.Parameter(torch.randn(2))
        def forward(self, x):
            return self.bn(self.seq(self.a(x))) + self.p

    class Lists(nn.Module):
        def __init__(self):
            super().__init__()
            self.w = nn.Parameter(torch.randn(3, dtype=torch.float64))
            self.fl = [1.0, 2.0]
            self.bl = [True, False]
            self.tl = [torch.ones(2), torch.zeros(1)]
            self.d = {"a": torch.ones(1)}
            self.register_buffer("mask", torch.tensor([True, False, True]))
            self.register_buffer("h16", torch.ones(2, dtype=torch.float16))
        def forward(self, x):
            return x * self.w + self.fl[0] + self.tl[0].sum()

    class Containers(nn.Module):
        def __init__(self):
            super().__init__()
            self.layers = nn.ModuleList([nn.Linear(2, 2, bias=False), nn.Linear(2, 2)])
            self.heads = nn.ModuleDict({"x": nn.Linear(2, 1), "y": nn.Conv1d(1, 1, 1)})
            self.emb = nn.Embedding(5, 2)
        def forward(self, x):
            for layer in self.layers:
                x = layer(x)
            return self.heads["x"](x) + self.emb.weight.sum()

    class Constant(nn.Module):
        def __init__(self):
            super().__init__()
            self.w = nn.Parameter(torch.randn(3))
        def forward(self, x):
            return x * self.w + torch.tensor([1.0, 2.0, 3.0])

    def save(name, module):
        module.save(f"{out}/{name}.pt")
        loaded = torch.jit.load(f"{out}/{name}.pt")
        torch.save(list(loaded.state_dict().items()), f"{out}/{name}.ref")

    x = torch.randn(4, 3)
    save("scripted", torch.jit.script(Outer().eval()))
    save("traced", torch.jit.trace(Outer().eval(), x))
    save("lists", torch.jit.script(Lists()))
    save("containers", torch.jit.script(Containers()))
    save("constant", torch.jit.trace(Constant(), torch.randn(3), check_trace=False))
    save("linear", torch.jit.script(nn.Linear(4, 3)))
''')

CASES = ["scripted", "traced", "lists", "containers", "constant", "linear"]


@pytest.fixture(scope="module")
def archives(tmp_path_factory):
    folder = tmp_path_factory.mktemp("torchscript")
    # A file, not -c: torch.jit.script reads the classes' source.
    writer = folder / "write.py"
    writer.write_text(WRITER)
    done = subprocess.run([sys.executable, str(writer), str(folder)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return folder


def _reference(archives, name):
    return torch.load(archives / f"{name}.ref", weights_only=True)


def _described(t) -> tuple:
    """What must match: dtype, shape, strides and every byte."""
    if isinstance(t, np.ndarray):
        strides = tuple(s // t.itemsize for s in t.strides)
        return str(t.dtype), t.shape, strides, np.ascontiguousarray(t).tobytes()
    dtype = str(t.dtype).removeprefix("torch.")
    c = t.contiguous()
    return dtype, tuple(t.shape), t.stride(), c.reshape(-1).view(torch.uint8).numpy().tobytes() if c.numel() else b""


@pytest.mark.parametrize("backend", ["torch", "numpy"])
@pytest.mark.parametrize("case", CASES)
def test_jit_state_dict_is_torchs(archives, case, backend):
    ours = tensorplay.jit_state_dict(archives / f"{case}.pt", backend=backend)
    reference = _reference(archives, case)
    assert list(ours) == [name for name, _ in reference]
    for name, tensor in reference:
        expected = _described(tensor)
        got = _described(ours[name])
        if backend == "numpy":
            expected = ({"float32": "float32", "float64": "float64", "float16": "float16", "bool": "bool",
                         "int64": "int64"}[expected[0]], *expected[1:])
        assert got == expected, name


def test_names_torch_lists_include_shared_parameters_and_unpersisted_buffers(archives):
    names = [name for name, _ in _reference(archives, "scripted")]
    # torch keeps both names of a shared parameter, and a TorchScript module forgets
    # that a buffer was not persistent: the state dict lists what torch lists.
    assert "seq.0.weight" in names and "seq.2.weight" in names and "a.tmp" in names
    ours = tensorplay.jit_state_dict(archives / "scripted.pt", backend="torch")
    assert ours["seq.0.weight"] is ours["seq.2.weight"]
    assert "a.plain" not in ours  # a plain tensor attribute is neither


def test_jit_state_dict_of_bytes(archives):
    data = (archives / "linear.pt").read_bytes()
    assert list(tensorplay.jit_state_dict(data)) == ["weight", "bias"]


def test_the_default_load_refuses_a_torchscript_archive(archives):
    for backend in ("torch", "numpy"):
        with pytest.raises(tensorplay.UnsupportedCheckpointError, match="TorchScript") as e:
            tensorplay.load(archives / "scripted.pt", backend=backend)
        assert 'unknown_globals="stub"' in str(e.value) and e.value.entry == "scripted/constants.pkl"


def test_stub_mode_gives_the_modules_as_stubs(archives):
    with pytest.warns(tensorplay.StubWarning, match="__torch__.Outer"):
        root = tensorplay.load(archives / "scripted.pt", unknown_globals="stub", backend="torch")
    assert isinstance(root, tensorplay.Stub) and root.qualname == "__torch__.Outer"
    inner = root.state["a"]
    assert inner.qualname == "__torch__.Inner"
    assert (inner.state["k"], inner.state["f"], inner.state["l"]) == (3, 1.5, [1, 2])
    assert torch.equal(inner.state["plain"], torch.zeros(3))
    with pytest.warns(tensorplay.StubWarning):
        lists = tensorplay.load(archives / "lists.pt", unknown_globals="stub", backend="torch")
    state = lists.state
    assert (state["fl"], state["bl"]) == ([1.0, 2.0], [True, False])  # build_doublelist, build_boollist
    assert [t.tolist() for t in state["tl"]] == [[1.0, 1.0], [0.0]]  # build_tensorlist
    assert state["d"]["a"].tolist() == [1.0]  # restore_type_tag


def _rewritten(path, out, change):
    """The archive with each entry's bytes passed through ``change(name, data)``."""
    with zipfile.ZipFile(path) as source, zipfile.ZipFile(out, "w") as target:
        for info in source.infolist():
            target.writestr(info, change(info.filename, source.read(info)))
    return out


def _with_code(archives, tmp_path, old: bytes, new: bytes, record="code/__torch__.py"):
    def change(name, data):
        if name.endswith("/" + record):
            assert old in data
            return data.replace(old, new)
        return data

    return _rewritten(archives / "scripted.pt", tmp_path / "changed.pt", change)


@pytest.mark.parametrize("line", [
    b'__parameters__ = ["p"] + __import__("os").system("touch marker")',
    b'__parameters__ = ["p", ] if True else []',
    b"__parameters__ = ['p', ]",
    b'__parameters__ = ["p",]',
    b'__parameters__ = ["\\x70", ]',
    b'__parameters__ = list(["p", ])',
])
def test_a_parameter_list_that_is_not_plain_strings_is_refused(archives, tmp_path, line):
    path = _with_code(archives, tmp_path, b'__parameters__ = ["p", ]', line)
    with pytest.raises(tensorplay.MalformedCheckpointError, match="line 2") as e:
        tensorplay.jit_state_dict(path)
    assert e.value.entry == "scripted/code/__torch__.py"
    assert isinstance(e.value, pickle.UnpicklingError)
    assert not (tmp_path / "marker").exists()


def test_nothing_else_under_code_is_read(archives, tmp_path, monkeypatch):
    """A line that does not parse, and one that would run a command, change nothing."""
    monkeypatch.chdir(tmp_path)
    garbage = b'  __buffers__ = []\n  def )(: syntax error\nimport os; os.system("touch marker")\n'
    path = _with_code(archives, tmp_path, b"  __buffers__ = []\n", garbage)
    ours = tensorplay.jit_state_dict(path, backend="torch")
    assert list(ours) == [name for name, _ in _reference(archives, "scripted")]
    assert not (tmp_path / "marker").exists()


def test_a_module_class_without_its_lists_is_refused(archives, tmp_path):
    path = _with_code(archives, tmp_path, b'  __parameters__ = []\n  __buffers__ = ["run", "tmp", "t", ]\n', b"")
    with pytest.raises(tensorplay.MalformedCheckpointError, match="__torch__.Inner"):
        tensorplay.jit_state_dict(path)
    path = _with_code(archives, tmp_path, b'  __buffers__ = ["run", "tmp", "t", ]\n', b"")
    with pytest.raises(tensorplay.MalformedCheckpointError, match="only one of __parameters__ and __buffers__"):
        tensorplay.jit_state_dict(path)


def test_a_listed_name_the_module_lacks_is_refused(archives, tmp_path):
    path = _with_code(archives, tmp_path, b'__parameters__ = ["p", ]', b'__parameters__ = ["p", "q", ]')
    with pytest.raises(tensorplay.MalformedCheckpointError, match="'q'"):
        tensorplay.jit_state_dict(path)


def test_jit_state_dict_of_a_plain_checkpoint_is_refused(tmp_path):
    path = tmp_path / "plain.pt"
    torch.save({"w": torch.ones(2)}, path)
    with pytest.raises(tensorplay.UnsupportedCheckpointError, match="not a TorchScript archive"):
        tensorplay.jit_state_dict(path)


BUILD_INTLIST = b"\x80\x02ctorch.jit._pickle\nbuild_intlist\n]K\x01a\x85R."


@pytest.mark.parametrize("stub", [False, True])
def test_the_builders_stay_refused_outside_a_torchscript_archive(tmp_path, stub):
    path = tmp_path / "plain.pt"
    torch.save({"w": torch.ones(2)}, path)
    changed = _rewritten(path, tmp_path / "builder.pt",
                         lambda name, data: BUILD_INTLIST if name.endswith("/data.pkl") else data)
    mode = "stub" if stub else "error"
    with pytest.raises(tensorplay.UnsafeCheckpointError, match="torch.jit._pickle.build_intlist"):
        tensorplay.load(changed, unknown_globals=mode)
    with pytest.raises(tensorplay.UnsafeCheckpointError, match="torch.jit._pickle.build_intlist"):
        tensorplay.pickle.loads(BUILD_INTLIST, unknown_globals=mode)
    report = scanner.scan(changed)
    assert [(f.name, f.dangerous) for f in report.findings] == [("torch.jit._pickle.build_intlist", True)]


def test_a_scan_marks_the_builders_only_outside_a_torchscript_archives_pickles(archives):
    report = scanner.scan(archives / "scripted.pt")
    assert report.verdict == "unsafe"  # torch.load hands it to torch.jit.load, which runs its code
    assert not any(f.name.startswith("torch.jit._pickle") for f in report.findings)
    assert not any(f.dangerous for f in report.findings)


def test_build_tensor_from_id_is_no_data_builder(archives, tmp_path):
    """torch.jit.load fails on it (only RPC's unpickler has its tensor table)."""
    def change(name, data):
        if name.endswith("/data.pkl"):
            return data.replace(b"torch.jit._pickle\nbuild_intlist\n", b"torch.jit._pickle\nbuild_tensor_from_id\n")
        return data

    path = _rewritten(archives / "scripted.pt", tmp_path / "from_id.pt", change)
    with pytest.raises(tensorplay.UnsafeCheckpointError, match="build_tensor_from_id"):
        tensorplay.load(path, unknown_globals="stub")


def test_a_payload_in_a_debug_pickle_refuses_a_stub_load(archives, tmp_path):
    """Stub mode salvages data, never a file that carries a payload: the scan still
    reads every pickle of the archive, and os.system in one is dangerous."""
    payload = b"\x80\x02cos\nsystem\nX\x02\x00\x00\x00ls\x85R."
    path = _rewritten(archives / "scripted.pt", tmp_path / "payload.pt",
                      lambda name, data: payload if name.endswith("code/__torch__.py.debug_pkl") else data)
    with pytest.raises(tensorplay.UnsafeCheckpointError, match="os.system"):
        tensorplay.load(path, unknown_globals="stub")
    with pytest.raises(tensorplay.UnsafeCheckpointError, match="os.system"):
        tensorplay.jit_state_dict(path)


def test_a_bytesio_archive_loads_in_stub_mode(archives):
    with pytest.warns(tensorplay.StubWarning):
        root = tensorplay.load(io.BytesIO((archives / "linear.pt").read_bytes()), unknown_globals="stub")
    assert root.qualname.endswith("Linear")


def test_constants_are_read_and_checked_in_stub_mode(archives, tmp_path):
    """constants.pkl runs under the same policy as data.pkl, its storages checked
    against constants/ (their values are the code's, not returned)."""
    with pytest.warns(tensorplay.StubWarning):
        tensorplay.load(archives / "constant.pt", unknown_globals="stub")
    path = _rewritten(archives / "constant.pt", tmp_path / "short.pt",
                      lambda name, data: data[:-4] if name.endswith("/constants/0") else data)
    with pytest.raises(tensorplay.MalformedCheckpointError, match="constants/0"):
        tensorplay.load(path, unknown_globals="stub")


def test_a_payload_in_constants_refuses_a_stub_load(tmp_path):
    """Whether or not data.pkl needs a stub: the malicious corpus's TorchScript-shaped file."""
    from conftest import TESTS

    with pytest.raises(tensorplay.UnsafeCheckpointError, match="os.system"):
        tensorplay.load(TESTS / "malicious" / "files" / "torchscript_constants.pt", unknown_globals="stub")


def test_a_torchscript_archive_is_never_clean_whatever_its_pickles_name(tmp_path):
    """torch.load(weights_only=False) hands an archive with constants.pkl to
    torch.jit.load, which runs its code/: one whose pickles name nothing outside
    the allowlist is still no clean file."""
    import io
    import pickle
    import zipfile

    from tensorplay import cli, scanner

    path = tmp_path / "scripted.pt"
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("archive/data.pkl", pickle.dumps({}, protocol=2))
        z.writestr("archive/constants.pkl", pickle.dumps((), protocol=2))
        z.writestr("archive/code/__torch__.py", "def forward(self):\n  return None\n")
        z.writestr("archive/version", "3\n")
    with zipfile.ZipFile(path) as z:
        assert torch.serialization._is_torchscript_zip(torch._C.PyTorchFileReader(io.BytesIO(path.read_bytes())))
        assert z.namelist()
    for pickles_only in (True, False):
        report = scanner.scan(path, pickles_only=pickles_only)
        assert report.verdict == "unsafe", report
        assert [p.runs_code for p in report.problems if p.kind == "torchscript"] == [True]
        # Unsafe as a dangerous global is, under every policy.
        for fail_on in scanner.FAIL_ON:
            assert cli.exit_code([report], scanner.Policy(fail_on=fail_on)) == cli.EXIT_UNSAFE
    sarif = json.loads(subprocess.run([sys.executable, "-m", "tensorplay", "scan", "--format", "sarif", "--fail-on",
                                       "dangerous", str(path)], capture_output=True, text=True).stdout)
    (run,) = sarif["runs"]
    levels = {r["ruleId"]: r["level"] for r in run["results"]}
    assert levels["TP005"] == "error", run["results"]


EFFECT_WRITER = textwrap.dedent('''
    import sys, zipfile
    import torch

    class Effect(torch.nn.Module):
        """Its __setstate__, which torch.jit.load runs, prints the marker."""
        def __init__(self):
            super().__init__()
            self.w = torch.nn.Parameter(torch.arange(4.0))
        def forward(self, x):
            return self.w * x
        @torch.jit.export
        def __getstate__(self):
            return (self.w, self.training)
        @torch.jit.export
        def __setstate__(self, state: tuple[torch.Tensor, bool]):
            print("MARKER" + "-ran-at-load")
            self.w = state[0]
            self.training = state[1]

    out = sys.argv[1]
    torch.jit.script(Effect()).save(f"{out}/effect.pt")
    # torch.jit.load finds constants.pkl in any case; torch.load's dispatch to it asks for the exact name.
    with zipfile.ZipFile(f"{out}/effect.pt") as source, zipfile.ZipFile(f"{out}/miscased.pt", "w") as target:
        for info in source.infolist():
            data = source.read(info)
            info.filename = info.filename.replace("/constants.pkl", "/CONSTANTS.pkl")
            target.writestr(info, data)
''')

TAKE_APART = textwrap.dedent('''
    import sys, warnings
    import tensorplay
    from tensorplay import scanner

    warnings.simplefilter("ignore")
    path = sys.argv[1]
    print("verdict", scanner.scan(path).verdict, [p.kind for p in scanner.scan(path).problems])
    for take in (lambda: tensorplay.load(path, unknown_globals="stub"), lambda: tensorplay.jit_state_dict(path)):
        try:
            print("took", type(take()).__name__)
        except Exception as e:
            print("refused", type(e).__name__, e)
''')


@pytest.fixture(scope="module")
def effect_archives(tmp_path_factory):
    folder = tmp_path_factory.mktemp("effect")
    writer = folder / "write.py"
    writer.write_text(EFFECT_WRITER)
    done = subprocess.run([sys.executable, str(writer), str(folder)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return folder


def _stdout(code: str, path) -> str:
    done = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True, text=True, timeout=120)
    return done.stdout


@pytest.mark.parametrize("name", ["effect", "miscased"])
def test_code_that_has_an_effect_under_torch_jit_load_has_none_here(effect_archives, name):
    path = effect_archives / f"{name}.pt"
    ran = _stdout("import sys, torch; print(list(torch.jit.load(sys.argv[1]).state_dict()))", path)
    assert "MARKER-ran-at-load" in ran and "['w']" in ran
    ours = _stdout(TAKE_APART, path)
    assert "MARKER-ran-at-load" not in ours
    verdict = ours.splitlines()[0]
    assert "verdict unsafe" in verdict and "'torchscript'" in verdict, ours


@pytest.mark.filterwarnings("ignore::tensorplay.StubWarning")
def test_a_module_whose_state_goes_to_its_setstate_is_refused_by_name(effect_archives):
    """Which of a __setstate__ module's values are parameters is decided by its code: not guessed."""
    module = tensorplay.load(effect_archives / "effect.pt", unknown_globals="stub")
    assert isinstance(module.state, tuple)
    with pytest.raises(tensorplay.MalformedCheckpointError, match="__setstate__"):
        tensorplay.jit_state_dict(effect_archives / "effect.pt")
