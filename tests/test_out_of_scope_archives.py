"""Archives torch writes that hold code its readers run, out of tensorplay's scope
(issue 45), written by the pinned torch in a subprocess: `torch.package` archives
(`PackageImporter` imports the modules they carry) and mobile (lite interpreter)
bytecode. Loads refuse them naming the kind (a lite-interpreter zip that is also a
full TorchScript archive reads as TorchScript); scans read every pickle in them
and never call them clean."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import zipfile

import pytest
import tensorplay
from sandboxed import COMMAND, protocol_0_payload, runs_payload
from tensorplay import scanner

torch = pytest.importorskip("torch")

CLASSES = textwrap.dedent(f'''
    import os
    import torch
    from torch import nn

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(3, 2)

    class Payload:
        def __reduce__(self):
            return os.system, ({COMMAND!r},)
''')

WRITER = textwrap.dedent('''
    import sys, torch, pkgmods
    from torch import nn
    from torch.package import PackageExporter
    out = sys.argv[1]
    torch.manual_seed(0)
    with PackageExporter(f"{out}/model.package.pt") as e:
        e.intern("pkgmods")
        e.extern(["torch.**", "os", "posix"])
        e.save_pickle("model", "model.pkl", pkgmods.Net())
        e.save_pickle("weights", "weights.pkl", pkgmods.Net().state_dict())
    with PackageExporter(f"{out}/weights.package.pt") as e:
        e.extern("torch.**")
        e.save_pickle("weights", "weights.pkl", {"w": torch.ones(2)})
    with PackageExporter(f"{out}/payload.package.pt") as e:
        e.intern("pkgmods")
        e.extern(["torch.**", "os", "posix"])
        e.save_pickle("evil", "evil.pkl", pkgmods.Payload())
    scripted = torch.jit.script(nn.Sequential(nn.Linear(3, 2), nn.ReLU(), nn.Linear(2, 2)))
    scripted._save_for_lite_interpreter(f"{out}/lite.ptl")
    scripted._save_for_lite_interpreter(f"{out}/lite_flatbuffer.ptl", _use_flatbuffer=True)
    # torch's own readers of both, to show what the files are.
    torch.save(list(torch.jit.load(f"{out}/lite.ptl").state_dict().items()), f"{out}/lite.ref")
    from torch.jit.mobile import _load_for_lite_interpreter
    _load_for_lite_interpreter(f"{out}/lite_flatbuffer.ptl")
''')


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    folder = tmp_path_factory.mktemp("out_of_scope")
    (folder / "pkgmods.py").write_text(CLASSES)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(folder), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-c", WRITER, str(folder)], capture_output=True, text=True, cwd=folder,
                          env=env)
    assert done.returncode == 0, done.stderr
    return folder


def _refused_by_every_reader(path, words):
    for read in (lambda: tensorplay.load(path), lambda: tensorplay.load(path, unknown_globals="stub"),
                 lambda: tensorplay.jit_state_dict(path), lambda: tensorplay.module_state_dict(path)):
        with pytest.raises(tensorplay.UnsupportedCheckpointError, match=words):
            read()


def _scanned(path):
    """Both scans, which must agree that the file is not clean."""
    reports = [scanner.scan(path, pickles_only=p) for p in (False, True)]
    for report in reports:
        assert report.verdict != "clean", report
    return reports


# --- torch.package ---------------------------------------------------------------------

@pytest.mark.parametrize("name", ["model", "weights", "payload"])
def test_a_torch_package_is_refused_by_name(written, name):
    _refused_by_every_reader(written / f"{name}.package.pt", "a torch.package archive")


def test_a_scan_reads_every_pickle_of_a_torch_package(written):
    for report in _scanned(written / "model.package.pt"):
        assert "torch_package" in [p.kind for p in report.problems]
        # model.pkl names the module classes: each is reported where it is.
        assert any(f.name == "pkgmods.Net" and f.location.endswith("/model/model.pkl") for f in report.findings)
        # weights.pkl names only allowlisted globals, and was read too.
        assert report.pickles >= 2


def test_a_torch_package_of_plain_weights_is_still_not_clean(written):
    for report in _scanned(written / "weights.package.pt"):
        assert [(p.kind, p.runs_code) for p in report.problems] == [("torch_package", True)]
        # PackageImporter imports the modules it carries: unsafe, with no global to blame.
        assert report.verdict == "unsafe" and not report.findings


def test_a_payload_in_a_torch_package_is_found(written):
    path = written / "payload.package.pt"
    loads = "import sys; sys.path.insert(0, folder); from torch.package import PackageImporter\n" \
            "PackageImporter(path).load_pickle('evil', 'evil.pkl')"
    assert runs_payload(loads, folder=str(written), path=str(path))
    for report in _scanned(path):
        assert report.verdict == "unsafe"
        assert [f.name for f in report.findings if f.dangerous] == ["posix.system"]


# --- mobile (lite interpreter) bytecode --------------------------------------------------

def test_a_lite_interpreter_zip_reads_as_the_torchscript_archive_it_also_is(written):
    """_save_for_lite_interpreter writes data.pkl, constants.pkl and code/ beside
    bytecode.pkl; torch.jit.load reads that part, and so does jit_state_dict."""
    path = written / "lite.ptl"
    reference = torch.load(written / "lite.ref", weights_only=True)
    ours = tensorplay.jit_state_dict(path)
    assert list(ours) == [name for name, _ in reference]
    for name, tensor in reference:
        assert torch.equal(ours[name], tensor) and ours[name].stride() == tensor.stride(), name
    with pytest.raises(tensorplay.UnsupportedCheckpointError, match="a TorchScript archive"):
        tensorplay.load(path)
    for report in _scanned(path):
        kinds = [p.kind for p in report.problems]
        assert "torchscript" in kinds and "mobile_bytecode" in kinds


def _rewritten(source, target, replace: dict[str, bytes | None]):
    """``source`` copied to ``target`` with the records named in ``replace``
    (relative to the root folder) replaced, or left out when ``None``."""
    with zipfile.ZipFile(source) as old, zipfile.ZipFile(target, "w") as new:
        root = old.namelist()[0].split("/", 1)[0]
        for info in old.infolist():
            record = info.filename.split("/", 1)[1]
            if record in replace:
                if replace[record] is not None:
                    new.writestr(info.filename, replace[record])
                continue
            new.writestr(info, old.read(info))
        assert root
    return target


def test_a_payload_in_bytecode_pkl_is_found(written, tmp_path):
    path = _rewritten(written / "lite.ptl", tmp_path / "payload.ptl", {"bytecode.pkl": protocol_0_payload()})
    for report in _scanned(path):
        dangerous = [(f.name, f.location) for f in report.findings if f.dangerous]
        assert dangerous == [("posix.system", "lite/bytecode.pkl")]
    with pytest.raises(tensorplay.UnsafeCheckpointError, match="posix.system"):
        tensorplay.load(path, unknown_globals="stub")


def test_bytecode_without_a_torchscript_archive_is_refused_by_name(written, tmp_path):
    path = _rewritten(written / "lite.ptl", tmp_path / "bytecode_only.ptl",
                      {"data.pkl": None, "constants.pkl": None})
    _refused_by_every_reader(path, r"mobile \(lite interpreter\) bytecode")
    for report in _scanned(path):
        assert "mobile_bytecode" in [p.kind for p in report.problems]


def test_mobile_bytecode_in_flatbuffer_form_is_refused_by_name(written):
    path = written / "lite_flatbuffer.ptl"
    _refused_by_every_reader(path, r"mobile \(lite interpreter\) bytecode in flatbuffer form")
    for report in _scanned(path):
        assert [p.kind for p in report.problems] == ["mobile_bytecode"]
