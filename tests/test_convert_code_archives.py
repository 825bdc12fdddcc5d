"""tensorplay convert of the archives whose own readers run code: each becomes
the safetensors of the state dict that reader gives (``torch.jit.load(p).state_dict()``,
``torch.export.load(p).state_dict``, ``torch.load(p, weights_only=False).state_dict()``
for a whole pickled module), computed by real torch in a subprocess; nothing of
the archive runs here."""
from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("safetensors")

import tensorplay  # noqa: E402
from safetensors import safe_open  # noqa: E402
from tensorplay._convert import convert  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::tensorplay.StubWarning")

NETS = textwrap.dedent('''
    import torch
    from torch import nn

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.body = nn.Sequential(nn.Linear(4, 3), nn.ReLU(), nn.Linear(3, 3))
            self.head = nn.Linear(3, 2, bias=False)
            self.tied = self.body[2]  # one module under two names, as tied weights are
            self.register_buffer("mean", torch.arange(3.0))
            self.register_buffer("scratch", torch.zeros(2), persistent=False)

        def forward(self, x):
            return self.head(self.tied(self.body(x)) + self.mean)
''')

WRITER = textwrap.dedent('''
    import sys
    import torch
    from nets import Net

    out = sys.argv[1]
    torch.manual_seed(0)
    net = Net().eval()
    torch.jit.save(torch.jit.script(net), f"{out}/scripted.pt")
    torch.export.save(torch.export.export(net, (torch.randn(2, 4),)), f"{out}/exported.pt2")
    torch.save(net, f"{out}/module_zip.pt")
    torch.save(net, f"{out}/module_legacy.pt", _use_new_zipfile_serialization=False)
''')

READERS = {
    "scripted.pt": "torch.jit.load(path).state_dict()",
    "exported.pt2": "torch.export.load(path).state_dict",
    "module_zip.pt": "torch.load(path, weights_only=False).state_dict()",
    "module_legacy.pt": "torch.load(path, weights_only=False).state_dict()",
}

REFERENCE = textwrap.dedent('''
    import json, sys
    import torch
    import nets  # noqa: F401  (the module the whole-module files name)
    path = sys.argv[1]
    state = {expression}
    print(json.dumps({{name: [str(t.dtype).removeprefix("torch."), list(t.shape),
                               t.detach().contiguous().reshape(-1).double().tolist()]
                       for name, t in state.items()}}))
''')


@pytest.fixture(scope="module")
def archives(tmp_path_factory):
    folder = tmp_path_factory.mktemp("code_archives")
    (folder / "nets.py").write_text(NETS)
    (folder / "write.py").write_text(WRITER)
    done = subprocess.run([sys.executable, "write.py", str(folder)], capture_output=True, text=True, cwd=folder)
    assert done.returncode == 0, done.stderr
    return folder


def _reference(archives, name: str) -> dict:
    code = REFERENCE.format(expression=READERS[name])
    done = subprocess.run([sys.executable, "-c", code, str(archives / name)], capture_output=True, text=True,
                          cwd=archives, timeout=300)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.splitlines()[-1])


def _converted(path) -> dict:
    """Every name the file gives, the shared ones (named in the metadata) too."""
    with safe_open(path, "np") as f:
        arrays = {name: f.get_tensor(name) for name in f.keys()}
        metadata = f.metadata()
    for alias, kept in metadata.items():
        if kept in arrays and alias != "format":
            arrays[alias] = arrays[kept]
    return arrays


@pytest.mark.parametrize("name", list(READERS))
def test_each_converts_to_the_state_dict_its_reader_gives(archives, tmp_path, name):
    out = tmp_path / "out.safetensors"
    stub = name.startswith("module")
    convert(archives / name, out, unknown_globals="stub" if stub else "error")
    ours = _converted(out)
    reference = _reference(archives, name)
    assert sorted(ours) == sorted(reference)
    for key, (dtype, shape, values) in reference.items():
        assert (str(ours[key].dtype), list(ours[key].shape)) == (dtype, shape), key
        np.testing.assert_array_equal(ours[key].astype(np.float64).reshape(-1), np.array(values), err_msg=key)


@pytest.mark.parametrize("name", ["module_zip.pt", "module_legacy.pt"])
def test_a_whole_module_converts_only_in_stub_mode(archives, tmp_path, name):
    """Its classes are outside the allowlist: converting needs the user's word that stubs may stand in."""
    with pytest.raises((tensorplay.UnsafeCheckpointError, tensorplay.UnsupportedCheckpointError)):
        convert(archives / name, tmp_path / "out.safetensors")
    assert not (tmp_path / "out.safetensors").exists()


def test_the_command_converts_a_torchscript_archive(archives, tmp_path):
    out = tmp_path / "cli.safetensors"
    done = subprocess.run([sys.executable, "-m", "tensorplay", "convert", str(archives / "scripted.pt"), str(out)],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert sorted(_converted(out)) == sorted(_reference(archives, "scripted.pt"))
