"""The core crate on its own: `cargo run --example load -- FILE` (examples/load.rs,
public API only, no Python) lists the same tensors as torch.load(weights_only=True),
with their dtype, shape, stride and bytes."""
from __future__ import annotations

import json
import subprocess
import zlib
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures" / "torch"


@pytest.fixture(scope="module")
def example() -> Path:
    """The example's executable, built by cargo as `cargo run` would."""
    built = subprocess.run(["cargo", "build", "--quiet", "--example", "load", "--message-format=json"], cwd=ROOT,
                           capture_output=True, text=True, timeout=1200)
    assert built.returncode == 0, built.stderr[-3000:]
    for line in built.stdout.splitlines():
        message = json.loads(line)
        if message.get("reason") == "compiler-artifact" and message["target"]["name"] == "load" \
                and message.get("executable"):
            return Path(message["executable"])
    raise AssertionError("cargo did not report the example's executable")


def _tensors(value, name=""):
    """Dense tensors reachable through dicts, lists and tuples, named as the example names them."""
    if isinstance(value, torch.Tensor):
        if not (value.is_quantized or value.is_sparse or value.is_nested or value.device.type == "meta"):
            yield name, value
        return
    if isinstance(value, dict):
        items = [(str(k), v) for k, v in value.items() if isinstance(k, (str, int)) and not isinstance(k, bool)]
    elif isinstance(value, (list, tuple)):
        items = [(str(i), v) for i, v in enumerate(value)]
    else:
        return
    for key, child in items:
        yield from _tensors(child, f"{name}.{key}" if name else key)


def _line(name: str, t) -> str:
    data = t.detach().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()
    dtype = str(t.dtype).removeprefix("torch.")
    return f"{name} {dtype} {list(t.shape)} {list(t.stride())} {len(data)} {zlib.crc32(data):08x}"


CASES = [m["file"] for m in json.loads((FIXTURES / "manifest.json").read_text()) if m.get("weights_only") == "ok"]


@pytest.mark.parametrize("file", CASES)
def test_the_example_lists_what_torch_load_gives(example, file):
    path = FIXTURES / file
    run = subprocess.run([str(example), str(path)], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    lines = run.stdout.splitlines()
    expected = torch.load(path, weights_only=True)
    assert lines[0] in ("format zip", "format legacy")
    assert lines[1:] == [_line(name, t) for name, t in _tensors(expected)]


def test_the_example_refuses_what_torch_load_refuses(example, tmp_path):
    path = FIXTURES / "custom_class.pt"
    with pytest.raises(Exception):  # noqa: B017 - torch's own refusal, whatever its class
        torch.load(path, weights_only=True)
    run = subprocess.run([str(example), str(path)], capture_output=True, text=True, timeout=120)
    assert run.returncode == 1 and "Unsupported global" in run.stderr, run.stderr
    assert run.stdout == ""
