"""Files and settings torch itself produces that tensorplay once refused: each case
is made by the real torch (or tensordict's own layout) and read back as torch reads
it (issue: checkpoints at scale, "files torch writes that fail today")."""
from __future__ import annotations

import io
import pickle
import zoneinfo

import pytest
import tensorplay
import torch  # the cases are written by torch: the test environment installs it


def _legacy(tensor, path):
    torch.save(tensor, path, _use_new_zipfile_serialization=False)


@pytest.mark.parametrize("source", ["path", "file", "bytesio"])
def test_a_legacy_checkpoint_whose_storages_pass_max_pickle_bytes_loads(tmp_path, source):
    """The limit is on what the pickles consume, not on the storages after them:
    torch.save(torch.zeros(2**28 + 1024), f, _use_new_zipfile_serialization=False)
    is this with the default 1 GiB limit, here a 2 MiB tensor under a 1 MiB one."""
    path = tmp_path / "legacy.pt"
    tensor = torch.arange(2**19, dtype=torch.float32)
    _legacy(tensor, path)
    limits = {"max_pickle_bytes": 1 << 20}
    if source == "path":
        loaded = tensorplay.load(path, limits=limits)
    elif source == "file":
        with open(path, "rb") as f:
            loaded = tensorplay.load(f, limits=limits)
    else:
        loaded = tensorplay.load(io.BytesIO(path.read_bytes()), limits=limits)
    assert torch.equal(loaded, tensor)


def test_a_pickle_longer_than_max_pickle_bytes_is_still_refused(tmp_path):
    path = tmp_path / "legacy.pt"
    _legacy({f"key{i}": i for i in range(2000)}, path)
    with pytest.raises(tensorplay.LimitExceededError, match="max_pickle_bytes"):
        tensorplay.load(path, limits={"max_pickle_bytes": 4096})


@pytest.mark.parametrize("register", ["tensorplay", "torch"])
def test_a_safe_global_without_a_module_breaks_no_load(tmp_path, register):
    """zoneinfo.ZoneInfo._unpickle is a builtin method: its __module__ is None. torch
    names such an entry "None.ZoneInfo._unpickle", which matches no GLOBAL."""
    path = tmp_path / "plain.pt"
    torch.save({"w": torch.ones(2)}, path)
    scope = (tensorplay.serialization.safe_globals if register == "tensorplay"
             else torch.serialization.safe_globals)
    with scope([zoneinfo.ZoneInfo._unpickle]):
        loaded = tensorplay.load(path)
        expected = torch.load(path, weights_only=True)
    assert torch.equal(loaded["w"], expected["w"])


@pytest.mark.parametrize("backend", ["torch", "numpy"])
def test_storages_typed_differently_on_one_empty_storage_keep_their_types(tmp_path, backend):
    """torch caches no empty storage, so each id of one gets its own dtype."""
    a = torch.tensor([], dtype=torch.float32)
    s = torch.TypedStorage(wrap_storage=a.untyped_storage(), dtype=torch.float64)
    path = tmp_path / "typed.pt"
    torch.save([a, s], path)
    expected = torch.load(path, weights_only=True)
    loaded = tensorplay.load(path, backend=backend)
    if backend == "torch":
        assert (loaded[0].dtype, loaded[1].dtype) == (expected[0].dtype, expected[1].dtype)
        assert (loaded[0].dtype, loaded[1].dtype) == (torch.float32, torch.float64)
    else:
        assert [str(x.dtype) for x in loaded] == ["float32", "float64"]


@pytest.mark.parametrize("zip_format", [True, False], ids=["zip", "legacy"])
@pytest.mark.parametrize("kind", ["file", "bytesio", "file-from-start"])
def test_objects_after_a_checkpoint_in_one_stream_stay_readable(tmp_path, zip_format, kind):
    """pickle.dump(41, f); torch.save(t, f); pickle.dump(43, f): a load from after
    41 returns t and leaves f right after the checkpoint, at 43. (torch leaves a
    legacy stream there, and a zip one at its last read: tensorplay reads a zip in
    a stream up to its first end record, so the next checkpoint loads too.)"""
    f = io.BytesIO() if kind == "bytesio" else open(tmp_path / "stream", "w+b")  # noqa: SIM115
    with f:
        if kind != "file-from-start":
            pickle.dump(41, f)
        tensor = torch.arange(6.0)
        torch.save({"t": tensor}, f, _use_new_zipfile_serialization=zip_format)
        end = f.tell()
        pickle.dump(43, f)
        torch.save(tensor * 2, f, _use_new_zipfile_serialization=zip_format)
        f.seek(0)
        if kind != "file-from-start":
            assert pickle.load(f) == 41
        loaded = tensorplay.load(f)
        assert torch.equal(loaded["t"], tensor)
        assert f.tell() == end
        assert pickle.load(f) == 43
        assert torch.equal(tensorplay.load(f), tensor * 2)


def test_bytes_after_a_legacy_checkpoint_in_a_file_of_its_own_are_refused(tmp_path):
    """A path is a file of its own: bytes after the last storage are another
    reading of it (a polyglot), so they are refused there, not left over."""
    path = tmp_path / "legacy.pt"
    _legacy(torch.arange(3.0), path)
    with open(path, "ab") as f:
        pickle.dump(43, f)
    with pytest.raises(tensorplay.MalformedCheckpointError, match="goes on for .* bytes after the last storage"):
        tensorplay.load(path)
