"""`tensorplay.load_memmap` takes `TensorDictBase.load_memmap`'s documented
parameters (`out`, `non_blocking`, an int `device`, `mode=None`,
`allow_pickle=None`, tensorclasses and `subpath` into them, the documented
`ValueError`s), checked against the real tensordict 0.15.3 where it has the
same parameter."""
from __future__ import annotations

import pytest
import tensorplay
import torch
from tensordict import TensorDict, tensorclass
from tensorplay._tensordict.load import resolve_device
from tensorplay.serialization import safe_globals


@tensorclass
class Sample:
    x: torch.Tensor
    inner: TensorDict


@pytest.fixture
def saved(tmp_path):
    td = TensorDict(a=torch.arange(4.0), nested=TensorDict(b=torch.ones(4, 2), batch_size=[4]), batch_size=[4])
    td.memmap(tmp_path / "td")
    return tmp_path / "td", td


def _target():
    """What a user loads into: a nested tensordict to keep, a leaf to replace, a stale key."""
    nested = TensorDict(b=torch.zeros(4, 2), old=torch.zeros(4), batch_size=[4])
    out = TensorDict(a=torch.full((4,), -1.0), nested=nested, stale=torch.zeros(4), batch_size=[4])
    return out, nested, out["a"]


def test_out_is_filled_as_tensordict_fills_it(saved):
    path, td = saved
    out, nested, old_leaf = _target()
    result = tensorplay.load_memmap(path, out=out)
    theirs_out, theirs_nested, _ = _target()
    theirs = TensorDict.load_memmap(path, out=theirs_out)
    assert result is out and theirs is theirs_out
    for got, nested_kept in ((out, nested), (theirs_out, theirs_nested)):
        assert got["nested"] is nested_kept  # nested tensordicts are reused
        assert set(got.keys(include_nested=True, leaves_only=True)) == {"a", ("nested", "b")}
        assert torch.equal(got["a"], td["a"]) and torch.equal(got["nested", "b"], td["nested", "b"])
    assert out["a"] is not old_leaf and torch.equal(old_leaf, torch.full((4,), -1.0))  # replaced, not written into


def test_out_with_the_numpy_backend_is_a_nested_dict_filled_the_same_way(saved):
    path, td = saved
    nested = {"b": None, "old": 1}
    out = {"a": None, "nested": nested, "stale": 2}
    result = tensorplay.load_memmap(path, out=out, backend="numpy")
    assert result is out and out["nested"] is nested
    assert set(out) == {"a", "nested"} and set(nested) == {"b"}
    assert (out["a"] == td["a"].numpy()).all() and (nested["b"] == td["nested", "b"].numpy()).all()


def test_a_device_other_than_outs_is_a_value_error_and_outs_device_is_used(saved):
    path, _ = saved
    out = TensorDict(batch_size=[4], device="cpu")
    with pytest.raises(ValueError, match="cannot load a tensordict on device meta into a tensordict on device cpu"):
        tensorplay.load_memmap(path, "meta", out=out)
    with pytest.raises(ValueError):  # tensordict says the same
        TensorDict.load_memmap(path, "meta", out=TensorDict(batch_size=[4], device="cpu"))
    loaded = tensorplay.load_memmap(path, out=out)
    assert loaded["a"].device == torch.device("cpu")


def test_an_int_device_is_a_cuda_index_and_non_blocking_reaches_the_copies(saved, monkeypatch):
    path, _ = saved
    assert resolve_device(0, "torch") == (False, torch.device("cuda", 0))
    with pytest.raises(ValueError, match="numpy backend loads onto the CPU only"):
        tensorplay.load_memmap(path, 0, backend="numpy")
    calls = []
    original = torch.Tensor.to

    def recording_to(self, *args, **kwargs):
        calls.append(kwargs.get("non_blocking"))
        return original(self, *args, **kwargs)

    monkeypatch.setattr(torch.Tensor, "to", recording_to)
    # "cpu:0" is a device of its own to the loader, so the leaves are copied to it.
    tensorplay.load_memmap(path, torch.device("cpu", 0), True)
    assert calls == [True, True]
    calls.clear()
    tensorplay.load_memmap(path, torch.device("cpu", 0))
    assert calls == [False, False]


def test_a_tensorclass_comes_back_as_itself_when_allowlisted_and_subpath_reaches_its_entries(tmp_path):
    sample = Sample(x=torch.arange(3.0), inner=TensorDict(y=torch.ones(3), batch_size=[3]), batch_size=[3])
    sample.memmap(tmp_path / "tc")
    with safe_globals([Sample]):
        loaded = tensorplay.load_memmap(tmp_path / "tc", as_tensordict=True)
    theirs = Sample.load_memmap(tmp_path / "tc")
    assert type(loaded) is Sample is type(theirs)
    assert torch.equal(loaded.x, theirs.x) and torch.equal(loaded.inner["y"], theirs.inner["y"])
    # Not allowlisted: a TensorDict of its fields, never an import.
    plain = tensorplay.load_memmap(tmp_path / "tc", as_tensordict=True)
    assert type(plain) is TensorDict and torch.equal(plain["x"], sample.x)
    # subpath reaches a tensorclass's entry, as sample.get("inner") does.
    inner = tensorplay.load_memmap(tmp_path / "tc", subpath="inner")
    assert set(inner) == {"y"} and torch.equal(inner["y"], sample.get("inner")["y"])
    assert torch.equal(TensorDict.load_memmap(tmp_path / "tc", subpath="inner")["y"], inner["y"])


def test_the_documented_value_errors(saved, tmp_path):
    path, _ = saved
    with pytest.raises(ValueError, match="mode must be None, 'r' or 'r\\+'"):
        tensorplay.load_memmap(path, mode="w")
    with pytest.raises(ValueError, match="names no saved tensordict"):
        tensorplay.load_memmap(path, subpath="missing")
    not_an_archive = tmp_path / "weights.bin"
    not_an_archive.write_bytes(b"\x00" * 64)
    with pytest.raises(ValueError, match="not a zip archive"):
        tensorplay.load_memmap(not_an_archive)
    for call in (lambda: TensorDict.load_memmap(path, mode="w"), lambda: TensorDict.load_memmap(not_an_archive)):
        with pytest.raises(ValueError):  # tensordict's own, for the same arguments
            call()


def test_mode_none_shares_a_folder_and_copies_an_archive_as_tensordict_documents(saved, tmp_path):
    path, td = saved
    shared = tensorplay.load_memmap(path)
    shared["a"][0] = 42.0
    assert TensorDict.load_memmap(path, mode="r")["a"][0] == 42.0  # the write reached the file
    td.save(tmp_path / "td.tdz")
    archive = tmp_path / "td.tdz"
    before = archive.read_bytes()
    copy = tensorplay.load_memmap(archive)
    copy["a"][0] = 7.0
    assert archive.read_bytes() == before


def test_what_tensordict_cannot_hold_and_a_wrong_out_are_clear_errors(saved, tmp_path):
    import json

    path, _ = saved
    meta = json.loads((path / "meta.json").read_text())
    meta["shape"] = [5]  # the leaves have 4 rows
    (path / "meta.json").write_text(json.dumps(meta))
    cannot_hold = r"cannot hold what meta.json describes.*batch"
    with pytest.raises(tensorplay.MalformedCheckpointError, match=cannot_hold) as info:
        tensorplay.load_memmap(path, as_tensordict=True)
    assert info.value.entry.endswith("meta.json")
    with pytest.raises(TypeError, match="out must be a TensorDict or a tensorclass"):
        tensorplay.load_memmap(path, out=[])
    from tensordict import LazyStackedTensorDict

    stack = LazyStackedTensorDict(TensorDict(a=torch.zeros(2), batch_size=[2]),
                                  TensorDict(a=torch.ones(2), batch_size=[2]), stack_dim=0)
    stack.memmap(tmp_path / "stack")
    with pytest.raises(ValueError, match="out is a dict, but the saved data is a list"):
        tensorplay.load_memmap(tmp_path / "stack", out={}, backend="numpy")
