"""torch.export archives (issue 45), read as data: the ``.pt2`` files torch 2.6 to
2.15 wrote (tests/fixtures/pt2/, by make_pt2_fixtures.py under each release, with
what that release's ``torch.export.load`` read), and archives the pinned torch
writes now. ``export_state_dict``/``export_constants`` must give what
``torch.export.load`` gives (run in a subprocess), name for name, in order, with
dtype, shape, stride, storage offset, storage sharing and values; the default load
refuses; hostile archives are refused with nothing run, and the scanner reports
the payloads planted in each pickled part."""
from __future__ import annotations

import io
import json
import os
import pickle
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

import numpy as np
import pytest
import sandboxed
import tensorplay
from tensorplay import scanner

torch = pytest.importorskip("torch")

ROOT = Path(__file__).resolve().parent / "fixtures" / "pt2"
RELEASES = ["2.6.0", "2.7.1", "2.8.0", "2.9.1", "2.10.0", "2.11.0", "2.12.1", "2.13.0", "2.14.1", "2.15.0"]
FIXTURES = [pytest.param(ROOT / f"torch-{r}", id=r) for r in RELEASES]
AOTI = ROOT / "aoti" / "aoti-torch-2.13.0.pt2"

# torch.export.load of the pinned torch, in a subprocess: what it made of an
# archive, described as make_pt2_fixtures.describe describes it.
READER = textwrap.dedent('''
    import json, sys, warnings
    import torch
    from make_pt2_fixtures import describe
    warnings.simplefilter("ignore")
    out = []
    for path in sys.argv[1:]:
        try:
            ep = torch.export.load(path)
        except Exception as e:
            out.append({"error": f"{type(e).__name__}: {e}"})
        else:
            out.append({"state_dict": describe(ep.state_dict), "constants": describe(ep.constants)})
    print(json.dumps(out))
''')


def torch_reads(*paths: Path) -> list[dict]:
    """What the pinned torch's ``torch.export.load`` made of each archive, in one subprocess."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT.parent), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-c", READER, *map(str, paths)], capture_output=True, text=True,
                          env=env, timeout=600)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def describe(tensors: dict, backend: str) -> list[dict]:
    """tensorplay's result as make_pt2_fixtures.describe describes torch's."""
    storages: dict[int, int] = {}
    out = []
    for name, value in tensors.items():
        if backend == "torch":
            ptr = value.untyped_storage().data_ptr()
            item = {"dtype": str(value.dtype).removeprefix("torch."), "shape": list(value.shape),
                    "stride": list(value.stride()), "storage_offset": value.storage_offset(),
                    "parameter": isinstance(value, torch.nn.Parameter), "requires_grad": value.requires_grad,
                    "values": value.detach().double().reshape(-1).tolist()}
        else:
            assert isinstance(value, np.ndarray), name
            # The array owning the memory: as_strided's views hold it through a non-array.
            root = value
            while hasattr(getattr(root, "base", None), "__array_interface__"):
                root = root.base
            root = np.asarray(root)
            offset = value.__array_interface__["data"][0] - root.__array_interface__["data"][0]
            ptr = root.__array_interface__["data"][0] if root.nbytes else 0  # torch's empty storages have none
            item = {"dtype": str(value.dtype), "shape": list(value.shape),
                    "stride": [s // value.itemsize for s in value.strides],
                    "storage_offset": offset // value.itemsize,
                    "values": value.astype(np.float64).reshape(-1).tolist()}
        item["name"] = name
        item["storage"] = storages.setdefault(ptr, len(storages)) if ptr else None
        out.append(item)
    return out


def assert_same(ours: list[dict], expected: list[dict], backend: str) -> None:
    assert [e["name"] for e in ours] == [e["name"] for e in expected]
    # A buffer viewing a parameter's storage requires grad in torch's result (a
    # view of the grad-requiring storage tensor); tensorplay's buffers are plain.
    keys = ["name", "dtype", "shape", "stride", "storage_offset", "storage", "values"]
    if backend == "torch":
        keys.append("parameter")
    for got, want in zip(ours, expected, strict=True):
        assert {k: got[k] for k in keys} == {k: want[k] for k in keys}, got["name"]
        if backend == "torch" and want["parameter"]:
            assert got["requires_grad"] == want["requires_grad"], got["name"]


def test_every_release_wrote_its_archive():
    for release in RELEASES:
        folder = ROOT / f"torch-{release}"
        assert (folder / "model.pt2").is_file(), folder
        assert json.loads((folder / "expected.json").read_text())["torch"] == release


@pytest.mark.parametrize("backend", ["torch", "numpy"])
@pytest.mark.parametrize("folder", FIXTURES)
def test_as_the_writing_release_read_it(folder, backend):
    expected = json.loads((folder / "expected.json").read_text())
    path = folder / "model.pt2"
    assert_same(describe(tensorplay.export_state_dict(path, backend=backend), backend), expected["state_dict"],
                backend)
    assert_same(describe(tensorplay.export_constants(path, backend=backend), backend), expected["constants"],
                backend)


@pytest.fixture(scope="module")
def pinned_reads():
    folders = [ROOT / f"torch-{r}" for r in RELEASES]
    return dict(zip((f.name for f in folders), torch_reads(*(f / "model.pt2" for f in folders)), strict=True))


@pytest.mark.parametrize("folder", FIXTURES)
def test_as_the_pinned_torch_reads_it(folder, pinned_reads):
    reference = pinned_reads[folder.name]
    assert "error" not in reference, reference  # the pinned torch reads every release's archive
    path = folder / "model.pt2"
    assert_same(describe(tensorplay.export_state_dict(path), "torch"), reference["state_dict"], "torch")
    assert_same(describe(tensorplay.export_constants(path), "torch"), reference["constants"], "torch")


@pytest.mark.parametrize("folder", FIXTURES)
def test_default_load_refuses_and_says_what_to_use(folder):
    with pytest.raises(tensorplay.UnsupportedCheckpointError, match="torch.export archive") as refused:
        tensorplay.load(folder / "model.pt2")
    assert 'unknown_globals="stub"' in str(refused.value)
    assert "export_state_dict" in str(refused.value)


@pytest.mark.parametrize("folder", FIXTURES)
def test_stub_load_gives_the_parts(folder):
    path = folder / "model.pt2"
    got = tensorplay.load(path, unknown_globals="stub")
    assert got["format"] == "torch.export"
    assert describe(got["state_dict"], "torch") == describe(tensorplay.export_state_dict(path), "torch")
    assert describe(got["constants"], "torch") == describe(tensorplay.export_constants(path), "torch")
    (x,), kwargs = got["sample_inputs"]
    assert torch.equal(x, torch.arange(6.0).reshape(2, 3))
    assert list(kwargs) == ["scale"] and torch.equal(kwargs["scale"], torch.tensor(0.5))
    # From its bytes and from a file object, as from its path.
    data = path.read_bytes()
    for source in (data, io.BytesIO(data)):
        again = tensorplay.load(source, unknown_globals="stub", backend="numpy")
        assert describe(again["state_dict"], "numpy") == describe(
            tensorplay.export_state_dict(path, backend="numpy"), "numpy")


@pytest.mark.parametrize("folder", FIXTURES)
def test_scan_reads_every_pickle_and_finds_nothing(folder):
    report = scanner.scan(folder / "model.pt2")
    assert report.verdict == "clean", report


# --- archives the pinned torch writes now ---------------------------------------------

WRITER = textwrap.dedent('''
    import io, json, sys, zipfile
    import torch, torch.nn as nn

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.features = nn.Sequential(nn.Conv2d(2, 3, 2), nn.BatchNorm2d(3), nn.ReLU())
            with torch.no_grad():
                for i, p in enumerate(self.parameters()):
                    p.copy_(torch.arange(p.numel(), dtype=p.dtype).reshape(p.shape) / (i + 2))
            self.cl = nn.Parameter(torch.arange(16.0).reshape(1, 4, 2, 2).to(memory_format=torch.channels_last))
            self.none = nn.Parameter(torch.zeros(0, 3))
            self.register_buffer("zero_d", torch.tensor(7, dtype=torch.int32))
            self.register_buffer("u8", torch.arange(9, dtype=torch.uint8).reshape(3, 3)[:, 1])
            self.lookup = torch.arange(4, dtype=torch.int16)
        def forward(self, x):
            y = self.features(x).sum() + self.cl.sum() + self.none.sum()
            return y + self.zero_d + self.u8.sum() + self.lookup.sum()

    out = sys.argv[1]
    ep = torch.export.export(Net().eval(), (torch.arange(18.0).reshape(1, 2, 3, 3),))
    torch.export.save(ep, f"{out}/net.pt2")

    # The pickled-weight path (tensor subclasses take it): one weight as a
    # torch.save'd tensor, its config entry saying use_pickle, as torch writes one.
    with zipfile.ZipFile(f"{out}/net.pt2") as z:
        records = {i.filename: z.read(i.filename) for i in z.infolist()}
    root = next(iter(records)).split("/")[0]
    config_name = f"{root}/data/weights/model_weights_config.json"
    config = json.loads(records[config_name])
    meta = config["config"]["features.0.weight"]
    buffer = io.BytesIO()
    torch.save(ep.state_dict["features.0.weight"], buffer)
    meta["use_pickle"] = True
    meta["path_name"] = "weight_pickled"
    records[f"{root}/data/weights/weight_pickled"] = buffer.getvalue()
    records[config_name] = json.dumps(config).encode()
    with zipfile.ZipFile(f"{out}/pickled.pt2", "w") as z:
        for name, data in records.items():
            z.writestr(name, data)
''')


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    folder = tmp_path_factory.mktemp("pt2")
    writer = folder / "write.py"
    writer.write_text(WRITER)
    done = subprocess.run([sys.executable, str(writer), str(folder)], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    return folder


@pytest.mark.parametrize("backend", ["torch", "numpy"])
@pytest.mark.parametrize("name", ["net", "pickled"])
def test_written_now_as_torch_reads_it(written, name, backend):
    path = written / f"{name}.pt2"
    (reference,) = torch_reads(path)
    assert "error" not in reference, reference
    assert_same(describe(tensorplay.export_state_dict(path, backend=backend), backend), reference["state_dict"],
                backend)
    assert_same(describe(tensorplay.export_constants(path, backend=backend), backend), reference["constants"],
                backend)


OPCODE_LED = textwrap.dedent('''
    import sys
    import torch

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.linear = torch.nn.Linear(4, 2)

        def forward(self, x):
            return self.linear(x)

    net = Net()
    with torch.no_grad():
        # Raw bytes that read, from byte 0, as a pickle naming an extension code
        # (EXT4): what random weights do about once in a hundred records.
        weight = net.linear.weight.view(-1).view(torch.uint8)
        weight[:6] = torch.tensor([0x84, 1, 2, 3, 4, 0x2E], dtype=torch.uint8)
    torch.export.save(torch.export.export(net, (torch.randn(3, 4),)), sys.argv[1])
''')


def test_raw_weights_that_start_like_a_pickle_are_read_as_torch_reads_them(tmp_path):
    """torch.export.load reads a weight its config lists with use_pickle false as
    raw bytes, whatever they start with; so does the scan (as a checkpoint's
    storages: a pickle from byte 0 only for the real globals it names), and so
    every reader that asks the scan first (export_state_dict) loads the archive."""
    path = tmp_path / "model.pt2"
    done = subprocess.run([sys.executable, "-c", OPCODE_LED, str(path)], capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr
    (reference,) = torch_reads(path)
    assert "error" not in reference, reference
    report = scanner.scan(path)
    assert report.verdict == "clean", report.to_json()
    assert scanner.scan(path, pickles_only=True).verdict == "clean"
    assert_same(describe(tensorplay.export_state_dict(path), "torch"), reference["state_dict"], "torch")
    # Listed as a pickle instead, torch.export.load would unpickle it: read as one.
    with zipfile.ZipFile(path) as z:
        config = json.loads(z.read(WEIGHTS_CONFIG))
    for meta in config["config"].values():
        meta["use_pickle"] = True
    pickled = rewritten(tmp_path, {WEIGHTS_CONFIG: json.dumps(config).encode()}, source=path)
    assert scanner.scan(pickled).verdict != "clean"


# --- hostile archives ---------------------------------------------------------------

FIXTURE = ROOT / "torch-2.13.0" / "model.pt2"
OLD_FIXTURE = ROOT / "torch-2.6.0" / "model.pt2"
WEIGHTS_CONFIG = "model/data/weights/model_weights_config.json"


def rewritten(tmp_path: Path, changes: dict[str, bytes | None], source: Path = FIXTURE) -> Path:
    """``source`` with some records replaced (None drops one) or added."""
    out = tmp_path / "changed.pt2"
    with zipfile.ZipFile(source) as z, zipfile.ZipFile(out, "w") as w:
        for name in z.namelist():
            if name not in changes:
                w.writestr(name, z.read(name))
        for name, data in changes.items():
            if data is not None:
                w.writestr(name, data)
    return out


def with_config(tmp_path: Path, edit) -> Path:
    with zipfile.ZipFile(FIXTURE) as z:
        config = json.loads(z.read(WEIGHTS_CONFIG))
    edit(config["config"])
    return rewritten(tmp_path, {WEIGHTS_CONFIG: json.dumps(config).encode()})


def _set(path: list, value):
    def edit(config):
        target = config
        for key in path[:-1]:
            target = target[key]
        if value is KeyError:
            del target[path[-1]]
        else:
            target[path[-1]] = value
    return edit


MALFORMED = {
    "offset past the storage": (["bf16", "tensor_meta", "storage_offset"], {"as_int": 3}),
    "stride past the storage": (["lin.bias", "tensor_meta", "strides"], [{"as_int": 2}]),
    "size overflow": (["lin.bias", "tensor_meta", "sizes"], [{"as_int": 1 << 62}, {"as_int": 1 << 62}]),
    "more sizes than strides": (["lin.bias", "tensor_meta", "sizes"], [{"as_int": 2}, {"as_int": 2}]),
    "missing record": (["lin.bias", "path_name"], "weight_99"),
    "path outside the folder": (["lin.bias", "path_name"], "../model.json"),
    "path name not UTF-8": (["lin.bias", "path_name"], "weight_\ud800"),
    "dtype as a string": (["lin.bias", "tensor_meta", "dtype"], "7"),
    "dtype as a bool": (["lin.bias", "tensor_meta", "dtype"], True),
    "unknown dtype": (["lin.bias", "tensor_meta", "dtype"], 99),
    "missing is_param": (["lin.bias", "is_param"], KeyError),
    "requires_grad as an int": (["lin.bias", "tensor_meta", "requires_grad"], 1),
    "symbolic size": (["lin.bias", "tensor_meta", "sizes"], [{"as_expr": {"expr_str": "s0"}}]),
    "negative offset": (["lin.bias", "tensor_meta", "storage_offset"], {"as_int": -1}),
    "entry not an object": (["lin.bias"], [1, 2]),
    "no tensor_meta for raw bytes": (["lin.bias", "tensor_meta"], None),
    "one record read as two dtypes": (["lin.weight", "tensor_meta", "dtype"], 8),
}


@pytest.mark.parametrize("case", list(MALFORMED))
def test_a_bad_config_is_refused_naming_the_entry(tmp_path, case):
    path = with_config(tmp_path, _set(*MALFORMED[case]))
    for read in (tensorplay.export_state_dict, lambda p: tensorplay.load(p, unknown_globals="stub")):
        with pytest.raises(tensorplay.CheckpointError) as refused:
            read(path)
        assert isinstance(refused.value, tensorplay.MalformedCheckpointError | tensorplay.LimitExceededError), (
            refused.value)
        assert "model_weights_config.json" in str(refused.value) or "weight_" in str(refused.value), refused.value


def test_not_json_and_no_config_are_refused(tmp_path):
    with pytest.raises(tensorplay.MalformedCheckpointError, match="not valid JSON"):
        tensorplay.export_state_dict(rewritten(tmp_path, {WEIGHTS_CONFIG: b"{\"config\": {"}))
    with pytest.raises(tensorplay.MalformedCheckpointError, match="model_weights_config.json"):
        tensorplay.export_state_dict(rewritten(tmp_path, {WEIGHTS_CONFIG: None}))
    with pytest.raises(tensorplay.MalformedCheckpointError, match="'config'"):
        tensorplay.export_state_dict(rewritten(tmp_path, {WEIGHTS_CONFIG: b"[]"}))


def test_an_unknown_archive_version_is_refused(tmp_path):
    with pytest.raises(tensorplay.UnsupportedCheckpointError, match="archive_version '7'"):
        tensorplay.export_state_dict(rewritten(tmp_path, {"model/archive_version": b"7"}))


PAYLOAD = sandboxed.torch_zip_payload()
PLANTED = {
    "pickled weight": (FIXTURE, {"model/data/weights/weight_0": PAYLOAD}, "export_state_dict"),
    "sample inputs": (FIXTURE, {"model/data/sample_inputs/model.pt": PAYLOAD}, "stub"),
    "state dict of torch 2.6": (OLD_FIXTURE, {"serialized_state_dict.pt": PAYLOAD}, "export_state_dict"),
    "constants of torch 2.6": (OLD_FIXTURE, {"serialized_constants.pt": PAYLOAD}, "export_constants"),
    "sample inputs of torch 2.6": (OLD_FIXTURE, {"serialized_example_inputs.pt": PAYLOAD}, "stub"),
    "first pt2 layout's weights": (FIXTURE, {"model/data/weights/model.pt": PAYLOAD}, "export_state_dict"),
}


def _planted(tmp_path: Path, case: str) -> Path:
    source, changes, _ = PLANTED[case]
    if case == "pickled weight":
        with zipfile.ZipFile(FIXTURE) as z:
            config = json.loads(z.read(WEIGHTS_CONFIG))
        config["config"]["h16"]["use_pickle"] = True
        changes = {**changes, WEIGHTS_CONFIG: json.dumps(config).encode()}
    return rewritten(tmp_path, changes, source)


@pytest.mark.parametrize("case", list(PLANTED))
def test_a_planted_payload_is_refused_never_run(tmp_path, case, monkeypatch):
    path = _planted(tmp_path, case)
    monkeypatch.chdir(tmp_path)
    reader = PLANTED[case][2]
    with pytest.raises(tensorplay.UnsafeCheckpointError, match="system"):
        if reader == "stub":
            tensorplay.load(path, unknown_globals="stub")
        else:
            getattr(tensorplay, reader)(path)
    assert not (tmp_path / sandboxed.MARKER).exists()


@pytest.mark.parametrize("case", ["pickled weight", "state dict of torch 2.6", "constants of torch 2.6"])
def test_torch_export_load_runs_the_planted_payload(tmp_path, case):
    # The payloads are real: torch.export.load (torch.load(weights_only=False)) runs them.
    assert sandboxed.runs_payload("import torch; torch.export.load(path)", path=str(_planted(tmp_path, case)))


@pytest.mark.parametrize("case", list(PLANTED))
def test_scan_reports_the_planted_payload(tmp_path, case):
    report = scanner.scan(_planted(tmp_path, case))
    assert report.verdict == "unsafe", report
    assert any(f.name == "posix.system" and f.dangerous for f in report.findings), report


def _with_a_main_pickle(path: Path, out: Path) -> Path:
    """``path`` with a harmless ``data.pkl`` under its root, first: a root torch.load would call a checkpoint."""
    with zipfile.ZipFile(path) as z, zipfile.ZipFile(out, "w") as w:
        root = z.namelist()[0].split("/", 1)[0]
        w.writestr(f"{root}/data.pkl", pickle.dumps({}, protocol=2))
        for name in z.namelist():
            w.writestr(name, z.read(name))
    return out


@pytest.mark.parametrize("case", [c for c, (source, _, _) in PLANTED.items() if source == FIXTURE])
def test_a_main_pickle_beside_them_hides_no_planted_payload(tmp_path, case):
    """torch.export.load still reads data/weights/ and the rest: they are no checkpoint's storages."""
    path = _with_a_main_pickle(_planted(tmp_path, case), tmp_path / "with_data_pkl.pt2")
    if case == "pickled weight":
        assert sandboxed.runs_payload("import torch; torch.export.load(path)", path=str(path))
    for pickles_only in (False, True):
        report = scanner.scan(path, pickles_only=pickles_only)
        assert report.verdict == "unsafe", report
        assert any(f.name == "posix.system" and f.dangerous for f in report.findings), report


def test_a_main_pickle_beside_it_keeps_an_aotinductor_package_unsafe(tmp_path):
    path = _with_a_main_pickle(AOTI, tmp_path / "aoti_with_data_pkl.pt2")
    for pickles_only in (False, True):
        report = scanner.scan(path, pickles_only=pickles_only)
        assert report.verdict == "unsafe", report
        assert "aoti_package" in [p.kind for p in report.problems], report


def test_stub_mode_salvages_no_archive_that_carries_a_payload(tmp_path, monkeypatch):
    """A stubbed class handed a pickle holding os.system: stubs stand in, the payload refuses the file."""
    constants = "model/data/constants/model_constants_config.json"
    with zipfile.ZipFile(FIXTURE) as z:
        config = json.loads(z.read(constants))
    config["config"]["table"] = {"path_name": "opaque_obj_0", "is_param": False, "use_pickle": True,
                                 "tensor_meta": None}
    inner = sandboxed.protocol_0_payload()
    outer = b"\x80\x03cmymod\nFoo\nC" + bytes([len(inner)]) + inner + b"\x85R."
    path = rewritten(tmp_path, {constants: json.dumps(config).encode(), "model/data/constants/opaque_obj_0": outer})
    monkeypatch.chdir(tmp_path)
    for read in (lambda: tensorplay.export_constants(path, unknown_globals="stub"),
                 lambda: tensorplay.load(path, unknown_globals="stub")):
        with pytest.raises(tensorplay.UnsafeCheckpointError, match="system"):
            read()
    assert not (tmp_path / sandboxed.MARKER).exists()


def test_an_entry_name_that_is_not_utf8_is_refused(tmp_path):
    path = tmp_path / "latin.pt2"
    with zipfile.ZipFile(FIXTURE) as z, zipfile.ZipFile(path, "w") as w:
        for name in z.namelist():
            w.writestr(name, z.read(name))
        w.writestr(zipfile.ZipInfo("model/extra"), b"")
    raw = path.read_bytes().replace(b"model/extra", b"model/\xe9xtra")
    path.write_bytes(raw)
    with pytest.raises(tensorplay.MalformedCheckpointError):
        tensorplay.export_state_dict(path)


@pytest.mark.parametrize("backend", ["numpy", "torch"])
def test_a_stride_too_large_to_address_is_refused(tmp_path, backend):
    def edit(config):
        meta = config["h16"]["tensor_meta"]
        meta["sizes"] = [{"as_int": 1} for _ in meta["sizes"]]
        meta["strides"] = [{"as_int": 2**62} for _ in meta["strides"]]
    with pytest.raises(tensorplay.CheckpointError, match="too large"):
        tensorplay.export_state_dict(with_config(tmp_path, edit), backend=backend)


def test_an_opaque_constant_is_read_by_the_safe_vm(tmp_path, monkeypatch):
    constants = "model/data/constants/model_constants_config.json"
    with zipfile.ZipFile(FIXTURE) as z:
        config = json.loads(z.read(constants))
    config["config"]["table"] = {"path_name": "opaque_obj_0", "is_param": False, "use_pickle": True,
                                 "tensor_meta": None}
    payload = b"\x80\x02" + sandboxed.protocol_0_payload()
    path = rewritten(tmp_path, {constants: json.dumps(config).encode(),
                                "model/data/constants/opaque_obj_0": payload})
    monkeypatch.chdir(tmp_path)
    with pytest.raises(tensorplay.UnsafeCheckpointError, match="system"):
        tensorplay.export_constants(path)
    assert not (tmp_path / sandboxed.MARKER).exists()
    report = scanner.scan(path)
    assert any(f.name == "posix.system" and f.dangerous for f in report.findings), report
    # A harmless one loads as its value.
    harmless = rewritten(tmp_path, {constants: json.dumps(config).encode(),
                                    "model/data/constants/opaque_obj_0": b"\x80\x02]q\x00(K\x01K\x02e."})
    assert tensorplay.export_constants(harmless)["table"] == [1, 2]


# --- AOTInductor packages -----------------------------------------------------------

def test_inspect_says_what_a_pt2_is_and_what_reads_it():
    for stub in ("error", "stub"):
        with pytest.raises(tensorplay.UnsupportedCheckpointError, match="torch.export archive.*export_state_dict"):
            tensorplay.inspect(FIXTURE, unknown_globals=stub)
    with pytest.raises(tensorplay.UnsupportedCheckpointError, match="an AOTInductor package"):
        tensorplay.inspect(AOTI)


def test_an_aotinductor_package_is_refused_naming_it():
    # Written by aoti_compile_and_package with the pinned torch, its compiled
    # library's bytes left out (tests/fixtures/README.md).
    for read in (tensorplay.export_state_dict, tensorplay.export_constants, tensorplay.load,
                 lambda p: tensorplay.load(p, unknown_globals="stub")):
        with pytest.raises(tensorplay.UnsupportedCheckpointError, match="an AOTInductor package"):
            read(AOTI)


def test_a_scan_calls_an_aotinductor_package_unsafe_under_every_policy():
    """aoti_load_package loads the compiled code it carries and runs it."""
    from tensorplay import cli, scanner

    for pickles_only in (False, True):
        report = scanner.scan(AOTI, pickles_only=pickles_only)
        assert report.verdict == "unsafe", report
        assert [p.kind for p in report.problems if p.runs_code] == ["aoti_package"]
        for fail_on in scanner.FAIL_ON:
            assert cli.exit_code([report], scanner.Policy(fail_on=fail_on)) == cli.EXIT_UNSAFE
    assert tensorplay._core.archive_kind(AOTI) == "aoti"
    assert tensorplay._core.archive_kind(FIXTURE) == "pt2"


def test_an_empty_record_reads_as_zeros_as_torch_reads_it(tmp_path):
    # What torch writes for a fake tensor: no bytes; its reader makes zeros of the entry's sizes.
    with zipfile.ZipFile(FIXTURE) as z:
        config = json.loads(z.read(WEIGHTS_CONFIG))
    record = config["config"]["lin.bias"]["path_name"]
    path = rewritten(tmp_path, {f"model/data/weights/{record}": b""})
    (reference,) = torch_reads(path)
    assert "error" not in reference, reference
    assert_same(describe(tensorplay.export_state_dict(path), "torch"), reference["state_dict"], "torch")
    assert not tensorplay.export_state_dict(path, backend="numpy")["lin.bias"].any()


def test_an_archive_without_the_model_program_says_so(tmp_path):
    # package_pt2 of a dict of programs names them; torch.export.load reads only "model".
    path = rewritten(tmp_path, {"model/models/model.json": None, "model/models/encoder.json": b"{}"})
    with pytest.raises(tensorplay.UnsupportedCheckpointError, match=r"no program named 'model'.*\['encoder'\]"):
        tensorplay.export_state_dict(path)
