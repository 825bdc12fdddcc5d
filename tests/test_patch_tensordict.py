"""tensorplay.patch_tensordict: tensordict's own loader (TensorDict.load_memmap,
TensorDict.load and the same methods of every tensorclass) routed through
tensorplay.load_memmap, with the real tensordict 0.15.3: the patched loader
returns what the unpatched one returns, and refuses what it would run."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
import warnings
import zipfile

import pytest
import tensordict
import tensorplay
import torch
from conftest import FIXTURES
from tensordict import LazyStackedTensorDict, TensorClass, TensorDict, tensorclass
from tensorplay import _patch_tensordict
from tensorplay import _tensordict as td_module

TD = FIXTURES / "tensordict"
EXPECTED = json.loads((TD / "expected.json").read_text())["fixtures"]
Unsafe = tensorplay.UnsafeCheckpointError


# --- classes the data is saved from ------------------------------------------------------

@tensorclass
class Point:
    xy: torch.Tensor
    label: str = "none"


class Particle(TensorClass):
    pos: torch.Tensor
    mass: torch.Tensor


@tensorclass
class Sample:
    """The tensorclass the fixtures `tensorclass` and `archive_tensorclass` were saved
    from, in a script: tensordict finds it by the name `__main__.Sample`."""
    obs: torch.Tensor
    reward: torch.Tensor
    label: str
    step: int


Sample.__module__ = "__main__"


class Config:
    """A non-tensor value that only pickle can save."""

    def __init__(self, lr):
        self.lr = lr


@pytest.fixture(autouse=True)
def _never_left_patched():
    yield
    tensorplay.unpatch_tensordict()
    assert not _patch_tensordict.is_patched()


@pytest.fixture
def calls(monkeypatch):
    """Every call of tensorplay's loader, with its arguments."""
    seen = []
    real = td_module.load_memmap

    def spy(*args, **kwargs):
        seen.append((args, kwargs))
        return real(*args, **kwargs)

    monkeypatch.setattr(td_module, "load_memmap", spy)
    return seen


def _unpatched(load):
    assert not _patch_tensordict.is_patched()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        return load()


def _patched(load):
    with tensorplay.patched_tensordict():
        return load()


# --- comparing two loads ---------------------------------------------------------------

def _is_fake(t) -> bool:
    return type(t).__name__ == "FakeTensor"


def _bytes(t) -> list[int]:
    return t.detach().contiguous().reshape(-1).view(torch.uint8).tolist()


def assert_same(got, want, where="root"):
    """`got` holds what `want` holds: the same classes (a tensorclass as itself, lazy
    stacks with their stack_dim, NonTensorData and NonTensorStack), batch sizes,
    names, devices, keys, and for each leaf its dtype, shape, layout and bytes (a
    memory-mapped tensor and a tensor viewing a mapping are both tensors)."""
    if isinstance(want, torch.Tensor):
        assert isinstance(got, torch.Tensor), f"{where}: {type(got).__name__}, not a tensor"
        assert got.dtype == want.dtype, f"{where}: {got.dtype} != {want.dtype}"
        assert got.is_nested == want.is_nested, where
        assert got.device == want.device, f"{where}: {got.device} != {want.device}"
        if want.is_nested:
            got_parts, want_parts = got.unbind(0), want.unbind(0)
            assert len(got_parts) == len(want_parts), where
            for i, (g, w) in enumerate(zip(got_parts, want_parts)):
                assert_same(g, w, f"{where}[{i}]")
            return
        assert got.shape == want.shape, f"{where}: {tuple(got.shape)} != {tuple(want.shape)}"
        if want.device.type != "meta" and not _is_fake(want):
            assert _bytes(got) == _bytes(want), f"{where}: values differ"
        return
    assert type(got) is type(want), f"{where}: {type(got).__name__} != {type(want).__name__}"
    if tensordict.is_non_tensor(want):
        if isinstance(want, LazyStackedTensorDict):  # NonTensorStack
            assert got.tolist() == want.tolist(), where
            assert got.batch_size == want.batch_size, where
        else:
            # repr: a NaN equals no NaN
            assert type(got.data) is type(want.data) and repr(got.data) == repr(want.data), f"{where}: {got.data!r}"
        return
    assert got.batch_size == want.batch_size, f"{where}: {got.batch_size} != {want.batch_size}"
    if isinstance(want, LazyStackedTensorDict):
        assert got.stack_dim == want.stack_dim, where
        assert len(got.tensordicts) == len(want.tensordicts), where
        for i, (g, w) in enumerate(zip(got.tensordicts, want.tensordicts)):
            assert_same(g, w, f"{where}/{i}")
        return
    if tensordict.is_tensorclass(want):
        assert got._non_tensordict == want._non_tensordict, where
        assert_same(got._tensordict, want._tensordict, f"{where}._tensordict")
        return
    assert got.device == want.device, f"{where}: device {got.device} != {want.device}"
    assert (got.names if got._has_names() else None) == (want.names if want._has_names() else None), where
    got_items, want_items = dict(got.items()), dict(want.items())
    assert sorted(got_items) == sorted(want_items), f"{where}: keys {sorted(got_items)} != {sorted(want_items)}"
    for key, value in want_items.items():
        assert_same(got_items[key], value, f"{where}/{key}")


def _leaves(x):
    """Every tensor in a loaded tensordict, lazy stack or tensorclass."""
    if isinstance(x, torch.Tensor):
        yield x
    elif tensordict.is_non_tensor(x):
        return
    elif isinstance(x, LazyStackedTensorDict):
        for member in x.tensordicts:
            yield from _leaves(member)
    elif tensordict.is_tensorclass(x):
        yield from _leaves(x._tensordict)
    else:
        for value in dict(x.items()).values():
            yield from _leaves(value)


def test_assert_same_sees_differences():
    """The comparison is not vacuous: each kind of difference fails it."""
    base = TensorDict(a=torch.arange(3), b=TensorDict(c=torch.ones(3, 2), batch_size=[3]), batch_size=[3])
    assert_same(base, base.clone())
    changes = [
        lambda td: td.set("a", torch.tensor([0, 1, 3])),
        lambda td: td.set("a", torch.arange(3, dtype=torch.int32)),
        lambda td: td.set(("b", "c"), torch.ones(3, 1)),
        lambda td: td.set("extra", torch.zeros(3)),
        lambda td: td.set_non_tensor("s", "x"),
        lambda td: setattr(td, "batch_size", torch.Size([])),
        lambda td: td.refine_names("t"),
    ]
    for change in changes:
        other = base.clone()
        change(other)
        with pytest.raises(AssertionError):
            assert_same(other, base)
    with pytest.raises(AssertionError):
        assert_same(Point(xy=torch.zeros(2, 2), batch_size=[2]), Point(xy=torch.zeros(2, 2), label="x",
                                                                        batch_size=[2]))
    with pytest.raises(AssertionError):
        assert_same(base, LazyStackedTensorDict(*base.unbind(0), stack_dim=0))


# --- data written by tensordict ----------------------------------------------------------------

def _plain() -> TensorDict:
    td = TensorDict(
        a=torch.arange(6, dtype=torch.float32).reshape(3, 2),
        i=torch.tensor([1, -(2**40), 3]),
        flags=torch.tensor([True, False, True]),
        bf=torch.tensor([0.5, 1.5, -2.0], dtype=torch.bfloat16),
        nested=TensorDict({"deep": {"x": torch.ones(3, 4, dtype=torch.float64)}, "w/ slash": torch.zeros(3)},
                          batch_size=[3]),
        batch_size=[3],
    )
    td.set_non_tensor("name", "run-7")
    td.set_non_tensor(("nested", "cfg"), {"lr": 0.1, "layers": [1, 2]})
    return td


def _lazy() -> LazyStackedTensorDict:
    return LazyStackedTensorDict(
        TensorDict(obs=torch.zeros(2), extra=torch.ones(1)),
        TensorDict(obs=torch.ones(2), extra=torch.ones(3)),
        stack_dim=0,
    )


def _written(tmp_path) -> dict:
    """What tensordict writes, holding no pickle: folders by memmap() and save(),
    archives by save(archive=True) and by a .tdz prefix, of plain tensordicts,
    tensorclasses, lazy stacks and non-tensor data."""
    paths = {}
    _plain().memmap(tmp_path / "plain")
    paths["memmap folder"] = tmp_path / "plain"
    _plain().save(tmp_path / "saved")
    paths["save folder"] = tmp_path / "saved"
    _plain().save(tmp_path / "plain.zip", archive=True)
    paths["save archive"] = tmp_path / "plain.zip"
    _plain().memmap(tmp_path / "plain.tdz")
    paths["tdz"] = tmp_path / "plain.tdz"
    _plain().save(tmp_path / "deflated.tdz", compression="deflate")
    paths["deflated tdz"] = tmp_path / "deflated.tdz"
    Point(xy=torch.arange(4.0).reshape(2, 2), label="corner", batch_size=[2]).memmap(tmp_path / "point")
    paths["tensorclass folder"] = tmp_path / "point"
    Point(xy=torch.arange(4.0).reshape(2, 2), label="corner", batch_size=[2]).save(tmp_path / "point.tdz")
    paths["tensorclass tdz"] = tmp_path / "point.tdz"
    Particle(pos=torch.zeros(3, 2), mass=torch.ones(3), batch_size=[3]).memmap(tmp_path / "particle")
    paths["TensorClass subclass folder"] = tmp_path / "particle"
    TensorDict(p=Point(xy=torch.ones(2, 2), label="in", batch_size=[2]), x=torch.zeros(2),
               batch_size=[2]).memmap(tmp_path / "holds_point")
    paths["tensordict holding a tensorclass"] = tmp_path / "holds_point"
    _lazy().memmap(tmp_path / "lazy")
    paths["lazy stack folder"] = tmp_path / "lazy"
    _lazy().save(tmp_path / "lazy.tdz")
    paths["lazy stack tdz"] = tmp_path / "lazy.tdz"
    TensorDict(stack=LazyStackedTensorDict(TensorDict(v=torch.zeros(2, 3), batch_size=[2]),
                                           TensorDict(v=torch.ones(2, 3), batch_size=[2]), stack_dim=1),
               batch_size=[]).memmap(tmp_path / "nested_lazy")
    paths["lazy stack inside, stack_dim=1"] = tmp_path / "nested_lazy"
    strings = TensorDict(x=torch.zeros(2, 1), batch_size=[2])
    strings.set_non_tensor("tag", "same")
    strings.set_non_tensor("cfg", {"lr": 0.1, "sizes": [1, 2], "nan": float("nan")})
    strings.memmap(tmp_path / "strings")
    paths["non-tensor data"] = tmp_path / "strings"
    return paths


def _write_non_tensor_stacks(tmp_path) -> dict:
    paths = {}
    stacks = TensorDict(batch_size=[2])
    stacks["per_item"] = tensordict.NonTensorStack("x", "y")
    stacks.memmap(tmp_path / "stacks")
    paths["non-tensor stack folder"] = tmp_path / "stacks"
    stacks.save(tmp_path / "stacks.tdz")
    paths["non-tensor stack tdz"] = tmp_path / "stacks.tdz"
    return paths


def _fixture_params(kind=None) -> list:
    return [name for name in sorted(_fixture_paths()) if kind is None or EXPECTED[name]["kind"] == kind]


def _fixture_paths() -> dict:
    """The files of tests/fixtures/tensordict (tensordict's own, which test_tensordict
    reads) that hold no pickle."""
    return {name: TD / fixture["path"] for name, fixture in sorted(EXPECTED.items())
            if not fixture["requires_pickle"]}


def _zip_folder(folder, path, method, unaligned=False):
    with zipfile.ZipFile(path, "w", method) as archive:
        if unaligned:  # a one-byte name first puts the payloads at odd offsets, as test_tensordict does
            archive.writestr("x", b"")
        for file in sorted(folder.rglob("*")):
            if file.is_file():
                archive.write(file, file.relative_to(folder).as_posix())
    return path


def _load_both(path, **kwargs):
    """The unpatched and the patched TensorDict.load_memmap of one file."""
    with tensorplay.safe_globals([(Sample, "__main__.Sample"), Point, Particle]):
        want = _unpatched(lambda: TensorDict.load_memmap(path, **kwargs))
        got = _patched(lambda: TensorDict.load_memmap(path, **kwargs))
    return got, want


# --- the differential ----------------------------------------------------------------------------

@pytest.mark.parametrize("name", _fixture_params())
def test_differential_over_the_fixtures(name, calls):
    got, want = _load_both(_fixture_paths()[name], mode="r")
    assert len(calls) == 1
    assert_same(got, want)


@pytest.mark.parametrize("method", ["stored", "unaligned", "deflate", "bzip2", "lzma"])
@pytest.mark.parametrize("name", _fixture_params("directory"))
def test_differential_over_zips_of_the_fixture_folders(name, method, tmp_path, calls):
    methods = {"stored": zipfile.ZIP_STORED, "unaligned": zipfile.ZIP_STORED, "deflate": zipfile.ZIP_DEFLATED,
               "bzip2": zipfile.ZIP_BZIP2, "lzma": zipfile.ZIP_LZMA}
    archive = _zip_folder(_fixture_paths()[name], tmp_path / f"{name}.zip", methods[method],
                          unaligned=method == "unaligned")
    got, want = _load_both(archive)
    assert len(calls) == 1
    assert_same(got, want)


def test_differential_over_what_tensordict_writes(tmp_path, calls):
    paths = _written(tmp_path)
    for name, path in paths.items():
        got, want = _load_both(path, mode="r")
        assert_same(got, want, name)
    assert len(calls) == len(paths)


def test_differential_over_non_tensor_stacks(tmp_path):
    for name, path in _write_non_tensor_stacks(tmp_path).items():
        got, want = _load_both(path)
        assert_same(got, want, name)


def test_differential_for_subpaths_meta_and_fake_tensors(tmp_path):
    paths = _written(tmp_path)
    for subpath in ("nested", ("nested",), "nested/deep", ("nested", ("deep",)), "nested/deep/", "/nested"):
        for name in ("memmap folder", "tdz", "deflated tdz"):
            got, want = _load_both(paths[name], subpath=subpath)
            assert_same(got, want, f"{name} {subpath!r}")
    for name, path in paths.items():
        got, want = _load_both(path, device="meta")
        assert_same(got, want, f"{name} on meta")
        leaves = list(_leaves(got))
        assert leaves and all(t.device.type == "meta" for t in leaves), name
    from torch._subclasses.fake_tensor import FakeTensorMode

    for name, path in paths.items():
        with FakeTensorMode():
            got, want = _load_both(path)
        assert_same(got, want, f"{name} under FakeTensorMode")
        leaves = list(_leaves(got))
        assert leaves and all(_is_fake(t) for t in leaves), name


def test_the_device_of_each_tensordict_is_tensordicts(tmp_path):
    paths = _written(tmp_path)
    got, want = _load_both(paths["memmap folder"])
    assert_same(got, want)


def test_subpath_reaches_into_a_tensordict_holding_a_tensorclass(tmp_path):
    paths = _written(tmp_path)
    got, want = _load_both(paths["tensordict holding a tensorclass"], subpath="p")
    assert type(got) is Point
    assert_same(got, want)
    with tensorplay.patched_tensordict(), pytest.raises(ValueError, match="subpath"):
        TensorDict.load_memmap(paths["memmap folder"], subpath="no/such")


# --- every path of tensordict's loader goes through tensorplay -------------------------------

def test_every_load_path_is_routed_and_unpatching_restores_everything(tmp_path, calls):
    paths = _written(tmp_path)
    before = _class_attributes()
    function = _patch_tensordict._tensordict_function()
    codes = [(copy, copy.__code__) for copy in _patch_tensordict._copies_of(function, function.__code__)]
    assert len(codes) >= 2  # tensordict's function, and the copy every @tensorclass holds
    assert all(code.co_filename.endswith(os.path.join("tensordict", "_base", "serialization.py"))
               for _, code in codes)

    taken_before = TensorDict.load_memmap
    tensorplay.patch_tensordict()
    assert _patch_tensordict.is_patched()

    # (Named as if defined in the module: tensorplay reads no class name with <locals>.)
    @tensorclass
    class Late:  # decorated while patched
        __qualname__ = "Late"
        v: torch.Tensor

    class LateParticle(TensorClass):  # a TensorClass subclass defined while patched
        __qualname__ = "LateParticle"
        v: torch.Tensor

    Late(v=torch.arange(2), batch_size=[2]).memmap(tmp_path / "late")
    LateParticle(v=torch.arange(2), batch_size=[2]).memmap(tmp_path / "late_particle")

    loads = {
        "TensorDict.load_memmap": lambda: TensorDict.load_memmap(paths["memmap folder"]),
        "TensorDict.load": lambda: TensorDict.load(paths["tdz"]),
        "TensorDict.load_memmap taken before patching": lambda: taken_before(paths["memmap folder"]),
        "tensordict.load_memmap": lambda: tensordict.load_memmap(paths["memmap folder"]),
        "tensordict.load": lambda: tensordict.load(paths["save archive"]),
        "TensorDictBase.load_memmap": lambda: tensordict.TensorDictBase.load_memmap(paths["memmap folder"]),
        "LazyStackedTensorDict.load_memmap": lambda: LazyStackedTensorDict.load_memmap(paths["lazy stack folder"]),
        "Point.load_memmap": lambda: Point.load_memmap(paths["tensorclass folder"]),
        "Point.load": lambda: Point.load(paths["tensorclass tdz"]),
        "Particle.load_memmap": lambda: Particle.load_memmap(paths["TensorClass subclass folder"]),
        "Particle.load": lambda: Particle.load(paths["TensorClass subclass folder"]),
        "TensorClass.load_memmap": lambda: TensorClass.load_memmap(paths["memmap folder"]),
        "Late.load_memmap": lambda: Late.load_memmap(tmp_path / "late"),
        "LateParticle.load": lambda: LateParticle.load(tmp_path / "late_particle"),
    }
    results = {}
    for name, load in loads.items():
        count = len(calls)
        results[name] = load()
        assert len(calls) == count + 1, f"{name} did not go through tensorplay.load_memmap"
        assert calls[-1][1]["as_tensordict"] is True, name
    assert type(results["Point.load_memmap"]) is Point and results["Point.load_memmap"].label == "corner"
    assert type(results["Point.load"]) is Point
    assert type(results["Particle.load_memmap"]) is Particle and type(results["Particle.load"]) is Particle
    assert type(results["Late.load_memmap"]) is Late
    assert type(results["LateParticle.load"]) is LateParticle
    assert type(results["LazyStackedTensorDict.load_memmap"]) is LazyStackedTensorDict
    assert type(results["TensorDict.load_memmap"]) is TensorDict

    tensorplay.unpatch_tensordict()
    assert not _patch_tensordict.is_patched()
    after = _class_attributes()
    assert all(after[key] is value for key, value in before.items()), "an attribute changed"
    assert all(copy.__code__ is code for copy, code in codes), "a function kept the patched code"
    assert Point.__dict__["load_memmap"].__func__.__code__ is function.__code__
    # Every path is tensordict's again, and returns what it returned through tensorplay.
    count = len(calls)
    for name, load in loads.items():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)
            assert_same(results[name], load(), name)
    assert len(calls) == count, "a load went through tensorplay after unpatching"
    # Classes decorated while patched load with tensordict's code again.
    assert type(Late.load_memmap(tmp_path / "late").v).__name__ == "MemoryMappedTensor"


def _class_attributes() -> dict:
    """The load methods of every tensordict class and tensorclass, by identity."""
    found = {}
    for klass in _patch_tensordict._registered_classes():
        for name in ("load_memmap", "load", "_load_memmap", "load_memmap_"):
            if name in klass.__dict__:
                found[(klass, name)] = klass.__dict__[name]
    return found


def test_patch_is_idempotent_and_the_context_manager_restores_the_state():
    function = _patch_tensordict._tensordict_function()
    original = function.__code__
    with tensorplay.patched_tensordict():
        assert function.__code__ is _patch_tensordict._TRAMPOLINE_CODE
        with tensorplay.patched_tensordict():
            pass
        assert _patch_tensordict.is_patched(), "the inner block removed the outer patch"
    assert function.__code__ is original and not _patch_tensordict.is_patched()
    tensorplay.patch_tensordict()
    tensorplay.patch_tensordict()
    with tensorplay.patched_tensordict():
        pass
    assert _patch_tensordict.is_patched(), "the block removed a patch it did not make"
    tensorplay.unpatch_tensordict()
    tensorplay.unpatch_tensordict()
    assert function.__code__ is original
    with pytest.raises(ValueError, match="unknown_globals"):
        tensorplay.patch_tensordict(unknown_globals="yes")


def test_the_signature_and_documentation_stay_tensordicts():
    import inspect

    before = inspect.signature(TensorDict.load_memmap)
    doc = TensorDict.load_memmap.__doc__
    with tensorplay.patched_tensordict():
        assert inspect.signature(TensorDict.load_memmap) == before
        assert inspect.signature(Point.load_memmap) == before
        assert TensorDict.load_memmap.__doc__ == doc
        assert str(before) == ("(prefix: 'str | Path', device: 'torch.device | None' = None, non_blocking: 'bool' = "
                               "False, *, out: 'TensorDictBase | None' = None, robust_key: 'bool | None' = True, "
                               "subpath: 'NestedKey | None' = None, mode: 'str | None' = None, num_threads: 'int' = "
                               "0, allow_pickle: 'bool | None' = None) -> 'Self'")
        with pytest.raises(ValueError, match="mode"):
            TensorDict.load_memmap(TD / "basic", mode="w")
        with pytest.raises(TypeError, match="allow_pickle"):
            TensorDict.load_memmap(TD / "basic", allow_pickle="yes")


def test_tensordicts_own_reload_after_save_stays_tensordicts(tmp_path, calls):
    """save(archive=True) returns the archive it wrote loaded back by tensordict, with
    allow_pickle=True: data this process has just written from memory. That stays
    tensordict's, so saving a value only pickle can hold still works."""
    td = TensorDict(a=torch.zeros(2), batch_size=[2])
    td.set_non_tensor("cfg", Config(0.5))
    with tensorplay.patched_tensordict():
        saved = td.save(tmp_path / "cfg.tdz")
        assert saved["cfg"].lr == 0.5
        assert not calls
        with pytest.raises(Unsafe, match="Config"):
            TensorDict.load_memmap(tmp_path / "cfg.tdz", allow_pickle=True)
        assert len(calls) == 1


# --- the class load_memmap is called on is trusted, nothing else ----------------------------------

def test_a_tensorclass_comes_back_as_the_class_it_is_called_on_and_only_that(tmp_path):
    paths = _written(tmp_path)
    with tensorplay.patched_tensordict():
        point = Point.load_memmap(paths["tensorclass folder"])
        assert type(point) is Point and point.label == "corner" and point.xy.tolist() == [[0, 1], [2, 3]]
        assert tensorplay.get_safe_globals() == [], "the class was allowlisted for the process"
        # Called on another class, the saved tensorclass is not built unless allowlisted.
        fields = TensorDict.load_memmap(paths["tensorclass folder"])
        assert type(fields) is TensorDict and sorted(fields.keys()) == ["label", "xy"]
        holder = TensorDict.load_memmap(paths["tensordict holding a tensorclass"])
        assert type(holder["p"]) is TensorDict
        with tensorplay.safe_globals([Point]):
            assert type(TensorDict.load_memmap(paths["tensordict holding a tensorclass"])["p"]) is Point
        # A tensorclass loading data saved as a plain tensordict gets a plain tensordict, as in tensordict.
        assert type(Point.load_memmap(paths["memmap folder"])) is TensorDict
    # The unpatched loader builds any tensorclass defined in the process.
    assert type(_unpatched(lambda: TensorDict.load_memmap(paths["tensorclass folder"]))) is Point


@tensorclass
class Reading:
    value: torch.Tensor
    unit: str


def test_a_tensorclass_saved_from_a_script_loads_as_the_class_it_is_called_on(tmp_path):
    """Saved from a script, the class is named `__main__.Reading`; tensordict falls
    back on the class load_memmap is called on when the names match."""
    _python(f"""
        import torch
        from tensordict import tensorclass

        @tensorclass
        class Reading:
            value: torch.Tensor
            unit: str

        Reading(value=torch.arange(3.0), unit="K", batch_size=[3]).memmap({str(tmp_path / "reading")!r})
    """)
    assert "'__main__.Reading'" in (tmp_path / "reading" / "meta.json").read_text()
    with tensorplay.patched_tensordict():
        reading = Reading.load_memmap(tmp_path / "reading")
        assert type(TensorDict.load_memmap(tmp_path / "reading")) is TensorDict
    assert type(reading) is Reading and reading.unit == "K" and reading.value.tolist() == [0, 1, 2]
    assert_same(reading, _unpatched(lambda: Reading.load_memmap(tmp_path / "reading")))
    # The fixture, saved from a script too, with a class this module renamed `__main__.Sample`.
    with tensorplay.patched_tensordict():
        sample = Sample.load_memmap(TD / "tensorclass" / "sample")
    assert type(sample) is Sample and sample.label == "episode-1" and sample.step == 42
    assert_same(sample, _unpatched(lambda: Sample.load_memmap(TD / "tensorclass" / "sample")))


def test_a_tensorclass_defined_in_a_function(tmp_path):
    @tensorclass
    class Local:
        v: torch.Tensor

    Local(v=torch.arange(2), batch_size=[2]).memmap(tmp_path / "local")
    assert type(_unpatched(lambda: Local.load_memmap(tmp_path / "local"))) is Local
    with tensorplay.patched_tensordict():
        assert type(Local.load_memmap(tmp_path / "local")) is Local


# --- modes ---------------------------------------------------------------------------------------

def test_in_place_writes_reach_the_files_with_r_plus_and_not_with_r(tmp_path):
    paths = _written(tmp_path)
    with tensorplay.patched_tensordict():
        for name in ("memmap folder", "tdz"):
            path = paths[name]
            loaded = TensorDict.load_memmap(path, mode="r")
            loaded["i"][0] = 11
            assert loaded["i"][0] == 11
            assert TensorDict.load_memmap(path, mode="r")["i"][0] == 1, name
            shared = TensorDict.load_memmap(path, mode="r+")
            shared["i"][0] = 12
            del shared
            assert TensorDict.load_memmap(path, mode="r")["i"][0] == 12, name
    # tensordict reads what the patched r+ wrote.
    assert _unpatched(lambda: TensorDict.load_memmap(paths["memmap folder"]))["i"][0] == 12
    assert _unpatched(lambda: TensorDict.load_memmap(paths["tdz"]))["i"][0] == 12


def test_mode_none_shares_a_writable_folder_and_copies_an_archive(tmp_path):
    """mode=None as tensordict documents it: each file of a folder shared when the
    process can write it, an archive copy-on-write."""
    paths = _written(tmp_path)
    with tensorplay.patched_tensordict():
        folder = TensorDict.load_memmap(paths["memmap folder"])
        folder["i"][1] = 5
        assert TensorDict.load_memmap(paths["memmap folder"], mode="r")["i"][1] == 5
        archive = TensorDict.load_memmap(paths["tdz"])
        archive["i"][1] = 5
        assert TensorDict.load_memmap(paths["tdz"], mode="r")["i"][1] == -(2**40)


# --- out= and non_blocking= (the documented signature) -------------------------------------------

def test_out_is_filled_as_tensordict_fills_it(tmp_path, calls):
    paths = _written(tmp_path)
    results = []
    for load in (_unpatched, _patched):
        out = TensorDict(a=torch.zeros(1), stale=torch.zeros(1), nested=TensorDict(old=torch.zeros(1)))
        nested = out["nested"]
        loaded = load(lambda out=out: TensorDict.load_memmap(paths["memmap folder"], out=out))
        assert loaded is out
        assert out["nested"] is nested, "the nested tensordict of out was not reused"
        assert "stale" not in out.keys() and "old" not in out["nested"].keys()
        results.append(out)
    assert len(calls) == 1 and calls[0][1]["out"] is results[1]
    assert_same(results[1], results[0])


def test_load_memmap_in_place_and_memmap_refresh_go_through_tensorplay(tmp_path, calls):
    paths = _written(tmp_path)
    target = TensorDict(a=torch.zeros(1), stale=torch.zeros(1))
    with tensorplay.patched_tensordict():
        assert target.load_memmap_(paths["memmap folder"]) is target
    assert len(calls) == 1
    assert "stale" not in target.keys() and target["a"].shape == (3, 2)

    # memmap_refresh_: another process rewrote the folder of a memory-mapped tensordict.
    mapped = TensorDict(a=torch.zeros(3), batch_size=[3]).memmap(tmp_path / "shared")
    shutil.rmtree(tmp_path / "shared")
    TensorDict(a=torch.ones(3), b=torch.arange(3), batch_size=[3]).memmap(tmp_path / "shared")
    with tensorplay.patched_tensordict():
        assert mapped.memmap_refresh_() is mapped
    assert len(calls) == 2 and calls[1][1]["out"] is mapped
    assert sorted(mapped.keys()) == ["a", "b"] and mapped["a"].tolist() == [1, 1, 1] and mapped.is_memmap()


def test_out_with_a_tensorclass(tmp_path):
    paths = _written(tmp_path)
    out = Point(xy=torch.zeros(2, 2), batch_size=[2])
    with tensorplay.patched_tensordict():
        loaded = Point.load_memmap(paths["tensorclass folder"], out=out)
    assert loaded is out and out.label == "corner" and out.xy.tolist() == [[0, 1], [2, 3]]


def test_non_blocking_and_device_reach_tensorplay(tmp_path, calls):
    paths = _written(tmp_path)
    got, want = (load(lambda: TensorDict.load_memmap(paths["memmap folder"], "cpu", True))
                 for load in (_patched, _unpatched))
    args, _ = calls[0]
    assert args[1:] == ("cpu", True)  # device and non_blocking, positional as tensordict passes them
    assert_same(got, want)


# --- pickles ---------------------------------------------------------------------------------------

def _hostile_folder(tmp_path, marker, sidecar):
    """A folder tensordict wrote, whose pickle sidecar (a NonTensorData's
    other.pickle, or a NonTensorStack's pickle.pkl) now holds a pickle that runs a
    shell command creating `marker`."""
    td = TensorDict(a=torch.zeros(2), batch_size=[2])
    if sidecar == "other.pickle":
        td.set_non_tensor("cfg", Config(0.5))
    else:
        td["cfg"] = tensordict.NonTensorStack(Config(0.1), Config(0.2))
    folder = tmp_path / "hostile"
    td.memmap(folder)
    path = folder / "cfg" / sidecar
    assert path.exists()
    path.write_bytes(b"cposix\nsystem\n(V" + f"touch {marker}".encode() + b"\ntR.")
    return folder


_LOAD_IN_A_SUBPROCESS = """
import sys, tensorplay
from tensordict import TensorDict
try:
    TensorDict.load_memmap(sys.argv[1], allow_pickle=True)
except tensorplay.UnsafeCheckpointError as e:
    print("refused:", e)
except Exception as e:  # tensordict ran the pickle, then found no dict in it
    print("failed after unpickling:", type(e).__name__)
"""


@pytest.mark.parametrize("sidecar", ["other.pickle", "pickle.pkl"])
def test_a_hostile_pickle_runs_with_tensordicts_loader_and_not_through_the_patch(tmp_path, sidecar):
    marker = tmp_path / "marker"
    folder = _hostile_folder(tmp_path, marker, sidecar)
    archive = _zip_folder(folder, tmp_path / "hostile.zip", zipfile.ZIP_STORED)
    env = {k: v for k, v in os.environ.items() if not k.startswith("TENSORPLAY_PATCH")}

    for path in (folder, archive):
        # tensordict's own loader runs it.
        subprocess.run([sys.executable, "-c", _LOAD_IN_A_SUBPROCESS, str(path)], check=True, env=env,
                       capture_output=True)
        assert marker.exists(), f"the unpatched loader did not run the pickle in {path.name}"
        marker.unlink()
        # The same call, patched by the environment variable, refuses it.
        run = subprocess.run([sys.executable, "-c", _LOAD_IN_A_SUBPROCESS, str(path)], check=True,
                             env={**env, "TENSORPLAY_PATCH_TENSORDICT": "1"}, capture_output=True, text=True)
        assert "refused:" in run.stdout and "posix.system" in run.stdout, run.stdout + run.stderr
        assert not marker.exists()

    with tensorplay.patched_tensordict():
        with pytest.raises(Unsafe, match="posix.system"):
            TensorDict.load_memmap(folder, allow_pickle=True)
        with pytest.raises(Unsafe, match="posix.system"):
            TensorDict.load_memmap(archive, allow_pickle=True)
        with pytest.raises(Unsafe, match="posix.system"):
            TensorDict.load_memmap(folder, subpath="cfg", allow_pickle=True)
    assert not marker.exists()


@pytest.mark.parametrize("sidecar", ["other.pickle", "pickle.pkl"])
def test_a_hostile_pickle_with_allow_pickle_none_and_false(tmp_path, sidecar):
    """tensordict's default (None) decodes pickles with a FutureWarning: through the
    patch, by the restricted VM, which refuses the global; False raises RuntimeError
    before reading it, as tensordict does."""
    marker = tmp_path / "marker"
    folder = _hostile_folder(tmp_path, marker, sidecar)
    with tensorplay.patched_tensordict():
        with pytest.raises(Unsafe, match="posix.system"), warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)
            TensorDict.load_memmap(folder)
        with pytest.raises(RuntimeError, match=sidecar) as refused:
            TensorDict.load_memmap(folder, allow_pickle=False)
        assert isinstance(refused.value, Unsafe)
    assert not marker.exists()


def test_a_pickled_value_loads_when_allowlisted_or_as_a_stub(tmp_path):
    td = TensorDict(a=torch.zeros(2), batch_size=[2])
    td.set_non_tensor("cfg", Config(0.5))
    td.memmap(tmp_path / "cfg")
    with tensorplay.patched_tensordict():
        with pytest.raises(Unsafe, match="Config"):
            TensorDict.load_memmap(tmp_path / "cfg", allow_pickle=True)
        with tensorplay.safe_globals([Config]):
            loaded = TensorDict.load_memmap(tmp_path / "cfg", allow_pickle=True)
        assert isinstance(loaded["cfg"], Config) and loaded["cfg"].lr == 0.5
    with tensorplay.patched_tensordict(unknown_globals="stub"), pytest.warns(tensorplay.StubWarning):
        stubbed = TensorDict.load_memmap(tmp_path / "cfg", allow_pickle=True)
    assert isinstance(stubbed["cfg"], tensorplay.Stub)


# --- at import ---------------------------------------------------------------------------------------

def _python(code, **env_vars):
    env = {k: v for k, v in os.environ.items() if not k.startswith("TENSORPLAY_PATCH")}
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env={**env, **env_vars},
                          capture_output=True, text=True, check=True).stdout


def test_the_environment_variable_patches_at_import_and_tensordict_stays_lazy_without_it(tmp_path):
    TensorDict(a=torch.arange(3)).memmap(tmp_path / "td")
    check = f"""
        import sys, tensorplay
        patched = 'tensordict' in sys.modules
        from tensordict import TensorDict
        print(patched, type(TensorDict.load_memmap({str(tmp_path / 'td')!r})["a"]).__name__,
              'tensorplay._patch_tensordict' in sys.modules)
    """
    assert _python(check).split() == ["False", "MemoryMappedTensor", "False"]
    assert _python(check, TENSORPLAY_PATCH_TENSORDICT="1").split() == ["True", "Tensor", "True"]
    assert _python(check, TENSORPLAY_PATCH_TENSORDICT="0").split()[1] == "MemoryMappedTensor"
    assert _python("""
        import sys, tensorplay
        assert 'tensordict' not in sys.modules and 'tensorplay._patch_tensordict' not in sys.modules
        assert {'patch_tensordict', 'patched_tensordict', 'unpatch_tensordict'} <= set(dir(tensorplay))
        tensorplay.patch_tensordict
        assert 'tensordict' not in sys.modules
        print('ok')
    """).strip() == "ok"
