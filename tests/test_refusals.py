"""The error contract of a refusal for a global, on every path that loads: the
exception is an ``UnsafeCheckpointError`` (so a ``pickle.UnpicklingError``), its
``.globals`` lists every global of the file outside the allowlist as
``scanner.GlobalFinding`` records, dangerous ones marked, and for a file with a
dangerous global the message never suggests ``weights_only=False`` (it says to
treat the file as hostile). Paths: ``tensorplay.load``, the patched ``torch.load``,
``tensorplay.pickle``, ``load_memmap``'s pickle sidecars, the DCP reader (its
``.metadata``, its chunks, and torch's ``dcp.load`` through it) and the command
line's ``inspect`` and ``convert``."""
from __future__ import annotations

import pickle
import shutil
import subprocess
import sys

import pytest
import tensorplay
from conftest import FIXTURES
from sandboxed import protocol_0_payload
from tensorplay.scanner import GlobalFinding

MALICIOUS = FIXTURES.parent / "malicious" / "files"
HOSTILE_ZIP = MALICIOUS / "global_reduce_os_system.pt"
ADVICE_THAT_RUNS_CODE = ("weights_only=False", "weights_only` set to `False", "will likely succeed")


def _check(refused: BaseException, name: str) -> None:
    assert isinstance(refused, tensorplay.UnsafeCheckpointError) and isinstance(refused, pickle.UnpicklingError)
    assert refused.kind in ("blocked_global", "unsafe_global")
    found = refused.globals
    assert found and all(isinstance(f, GlobalFinding) for f in found), found
    assert any(f.name == name and f.dangerous for f in found), found
    message = str(refused)
    assert not any(advice in message for advice in ADVICE_THAT_RUNS_CODE), message
    assert "treat the file as hostile" in message


@pytest.mark.parametrize("backend", ["numpy", "torch"])
@pytest.mark.parametrize("how", ["path", "bytes", "stream"])
def test_load(how, backend):
    source = {"path": HOSTILE_ZIP, "bytes": HOSTILE_ZIP.read_bytes()}.get(how)
    with pytest.raises(tensorplay.UnsafeCheckpointError) as refused:
        if how == "stream":
            with open(HOSTILE_ZIP, "rb") as f:
                f.read(0)
                tensorplay.load(f, backend=backend)
        else:
            tensorplay.load(source, backend=backend)
    _check(refused.value, "os.system")


def test_load_of_a_raw_pickle_is_refused_for_its_global_as_torch_refuses_it(tmp_path):
    path = tmp_path / "raw.pkl"
    path.write_bytes(protocol_0_payload())
    with pytest.raises(tensorplay.UnsafeCheckpointError) as refused:
        tensorplay.load(path)
    _check(refused.value, "posix.system")


def test_patched_torch_load():
    torch = pytest.importorskip("torch")
    with tensorplay.patched_torch(), pytest.raises(pickle.UnpicklingError) as refused:
        torch.load(HOSTILE_ZIP)
    _check(refused.value, "os.system")


def test_tensorplay_pickle():
    with pytest.raises(tensorplay.UnsafeCheckpointError) as refused:
        tensorplay.pickle.loads(protocol_0_payload())
    _check(refused.value, "posix.system")


def test_load_memmap_sidecar(tmp_path):
    folder = tmp_path / "td"
    shutil.copytree(FIXTURES / "tensordict" / "pickled", folder)
    (folder / "tags" / "other.pickle").write_bytes(protocol_0_payload())
    with pytest.raises(tensorplay.UnsafeCheckpointError) as refused:
        tensorplay.load_memmap(folder, allow_pickle=True, backend="numpy")
    _check(refused.value, "posix.system")


@pytest.fixture(scope="module")
def dcp_folder(tmp_path_factory):
    folder = tmp_path_factory.mktemp("dcp") / "ckpt"
    code = ("import warnings, torch, torch.distributed.checkpoint as dcp\nwarnings.simplefilter('ignore')\n"
            f"dcp.save({{'w': torch.arange(8.0)}}, checkpoint_id={str(folder)!r})\n")
    subprocess.run([sys.executable, "-c", code], check=True)
    return folder


def test_dcp_metadata(dcp_folder, tmp_path):
    folder = tmp_path / "ckpt"
    shutil.copytree(dcp_folder, folder)
    (folder / ".metadata").write_bytes(protocol_0_payload())
    with pytest.raises(tensorplay.UnsafeCheckpointError) as refused:
        tensorplay.dcp.read_metadata(folder)
    _check(refused.value, "posix.system")
    with pytest.raises(tensorplay.UnsafeCheckpointError) as refused:
        tensorplay.load(folder)
    _check(refused.value, "posix.system")


def test_dcp_chunk(dcp_folder, tmp_path):
    """A tensor chunk whose archive's data.pkl names os.system, read by
    ``tensorplay.load`` of the folder and by tensorplay's reader for ``dcp.load``."""
    import dataclasses

    torch = pytest.importorskip("torch")
    import torch.distributed.checkpoint as dcp

    folder = tmp_path / "ckpt"
    shutil.copytree(dcp_folder, folder)
    distcp = next(folder.glob("*.distcp"))
    offset = distcp.stat().st_size
    with open(distcp, "ab") as f:
        f.write(HOSTILE_ZIP.read_bytes())
    metadata = dcp.FileSystemReader(str(folder)).read_metadata()
    for index, info in list(metadata.storage_data.items()):
        metadata.storage_data[index] = dataclasses.replace(info, offset=offset, length=HOSTILE_ZIP.stat().st_size)
    (folder / ".metadata").write_bytes(pickle.dumps(metadata))
    with pytest.raises(tensorplay.UnsafeCheckpointError) as refused:
        tensorplay.load(folder)
    _check(refused.value, "os.system")
    state = {"w": torch.zeros(8)}
    # torch's CheckpointException is a BaseException.
    with pytest.raises(BaseException) as failed:
        dcp.load(state, storage_reader=tensorplay.dcp.FileSystemReader(folder))
    assert "os.system" in str(failed.value)
    assert not any(advice in str(failed.value) for advice in ADVICE_THAT_RUNS_CODE)


@pytest.mark.parametrize("command", ["inspect", "convert"])
def test_command_line(command, tmp_path):
    args = [sys.executable, "-m", "tensorplay", command, str(HOSTILE_ZIP)]
    if command == "convert":
        args.append(str(tmp_path / "out.safetensors"))
    result = subprocess.run(args, capture_output=True, text=True, timeout=120)
    assert result.returncode != 0
    assert "os.system" in result.stderr and "DANGEROUS" in result.stderr
    assert not any(advice in result.stderr for advice in ADVICE_THAT_RUNS_CODE), result.stderr
    assert "--allow" not in result.stderr and "--stub" not in result.stderr
