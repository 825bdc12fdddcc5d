"""tensorplay.load_memmap: TensorDict memmap folders and .tdz archives written by
tensordict 0.15.3 (tests/fixtures/tensordict, described by its expected.json), in
both backends, lazily, and safely: links, lying sizes, pickles, traversal and
bombs are refused without side effects."""
from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import math
import mmap
import os
import shutil
import struct
import subprocess
import sys
import zipfile
import zlib

import numpy as np
import pytest
import tensorplay
from conftest import FIXTURES, has_torch
from tensorplay import _tensordict as td_module
from tensorplay import scanner

TD = FIXTURES / "tensordict"
EXPECTED = json.loads((TD / "expected.json").read_text())["fixtures"]
BACKENDS = ["numpy", pytest.param("torch", marks=pytest.mark.skipif(not has_torch(), reason="needs torch"))]

Malformed = tensorplay.MalformedCheckpointError
Unsafe = tensorplay.UnsafeCheckpointError
Unsupported = tensorplay.UnsupportedCheckpointError


# --- helpers ----------------------------------------------------------------------------

def _get(tree, key):
    """A nested key in the result: dicts by key, lazy-stack lists by index."""
    for k in key:
        tree = tree[int(k)] if isinstance(tree, list) else tree[k]
    return tree


def test_load_memmap_is_imported_on_first_use():
    """TensorDict support is half of `import tensorplay`; scans and plain loads skip it."""
    code = (
        "import sys, tensorplay\n"
        "assert 'tensorplay._tensordict' not in sys.modules\n"
        "assert 'load_memmap' in dir(tensorplay)\n"
        "from tensorplay import load_memmap\n"
        "assert load_memmap is tensorplay.load_memmap is sys.modules['tensorplay._tensordict'].load_memmap\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def _is_torch(x) -> bool:
    return type(x).__module__.startswith("torch")


def _dtype_name(x) -> str:
    return str(x.dtype).removeprefix("torch.") if _is_torch(x) else x.dtype.name


def _values(x):
    """tolist() with bf16/f16 widened and complex as [re, im], as expected.json has them."""
    if _is_torch(x):
        import torch

        if x.is_complex():
            x = torch.view_as_real(x)
        elif x.dtype in (torch.bfloat16, torch.float16):
            x = x.float()
        return x.tolist()
    if np.iscomplexobj(x):
        return np.stack([x.real, x.imag], axis=-1).tolist()
    if x.dtype.kind == "V" or x.dtype.name in ("bfloat16", "float16"):
        return x.astype(np.float64).tolist()
    return x.tolist()


def _raw(x) -> bytes:
    if _is_torch(x):
        import torch

        return x.contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()
    return np.ascontiguousarray(x).tobytes()


def _components(x) -> list:
    return list(x.unbind(0)) if _is_torch(x) else list(x)


def _check_leaf(fixture, got, leaf):
    where = f"{fixture}:{leaf['key']}"
    if leaf["is_nested"]:
        parts = _components(got)
        assert [list(p.shape) for p in parts] == leaf["nested_shapes"], where
        assert [_values(p) for p in parts] == leaf["values"], where
        raw = b"".join(_raw(p) for p in parts)
        assert all(_dtype_name(p) == leaf["dtype"].removeprefix("torch.") for p in parts), where
    else:
        assert _dtype_name(got) == leaf["dtype"].removeprefix("torch."), where
        assert list(got.shape) == leaf["shape"], where
        assert _values(got) == leaf["values"], where
        raw = _raw(got)
    assert len(raw) == leaf["nbytes"], where
    assert hashlib.sha256(raw).hexdigest() == leaf["sha256"], where


def _check_non_tensor(fixture, got, entry):
    where = f"{fixture}:{entry['key']}"
    if entry["storage"] == "json_types":
        assert got.__name__ == entry["value"], where
    elif entry["nonfinite"]:
        assert isinstance(got, float) and math.isnan(got), where
    elif entry["storage"] == "pickle":
        assert repr(got) == entry["value_repr"], where
    else:
        assert got == entry["value"], where


def _top_keys(desc) -> set:
    keys = [e["key"] for e in desc["leaves"] + desc["non_tensor"] + desc["collections"]]
    return {k[0] for k in keys}


def _copy(name, tmp_path):
    src = TD / EXPECTED[name]["path"]
    dst = tmp_path / EXPECTED[name]["path"]
    if src.is_dir():
        shutil.copytree(src, dst)
    else:
        shutil.copyfile(src, dst)
    return dst


def _tree_bytes(root) -> dict:
    """Every file under root (or the file itself) and its bytes."""
    if root.is_file():
        return {root.name: root.read_bytes()}
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def _zip(path, files: dict[str, bytes], method=zipfile.ZIP_STORED):
    with zipfile.ZipFile(path, "w", compression=method) as z:
        for name, data in files.items():
            z.writestr(name, data)
    return path


def _raw_zip(path, entries):
    """A zip written byte by byte: (name, method, payload, declared size, crc) per
    entry, so an entry can lie about its size."""
    out, central = bytearray(), bytearray()
    for name, method, payload, size, crc in entries:
        n = name.encode()
        header = len(out)
        out += struct.pack("<IHHHHHIIIHH", 0x04034B50, 20, 0, method, 0, 0, crc, len(payload), size, len(n), 0)
        out += n + payload
        central += struct.pack("<IHHHHHHIIIHHHHHII", 0x02014B50, 20, 20, 0, method, 0, 0, crc, len(payload), size,
                               len(n), 0, 0, 0, 0, 0, header) + n
    directory = len(out)
    out += central + struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, len(entries), len(entries), len(central),
                                 directory, 0)
    path.write_bytes(bytes(out))
    return path


def _payload_offsets(path) -> dict[str, int]:
    data = path.read_bytes()
    with zipfile.ZipFile(path) as z:
        out = {}
        for info in z.infolist():
            name_len, extra_len = struct.unpack_from("<2H", data, info.header_offset + 26)
            out[info.filename] = info.header_offset + 30 + name_len + extra_len
        return out


def _meta(entries: dict, **extra) -> bytes:
    meta = {**entries, "shape": [], "device": "cpu", "_type": "<class 'tensordict._td.TensorDict'>",
            "_format_version": 1, "_class": "tensordict:TensorDict", **extra}
    return json.dumps(meta).encode()


def _leaf_meta(shape, dtype="torch.float32") -> dict:
    return {"device": "cpu", "shape": shape, "dtype": dtype, "is_nested": False}


def _td_folder(path, files: dict[str, bytes]):
    for name, data in files.items():
        (path / name).parent.mkdir(parents=True, exist_ok=True)
        (path / name).write_bytes(data)
    return path


# --- every fixture, as expected.json describes it ----------------------------------------

@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_fixture_loads_to_the_expected_keys_dtypes_shapes_and_values(name, backend):
    desc = EXPECTED[name]
    loaded = tensorplay.load_memmap(TD / desc["path"], backend=backend, allow_pickle=desc["requires_pickle"])
    assert isinstance(loaded, dict)
    assert set(loaded) == _top_keys(desc)
    for leaf in desc["leaves"]:
        _check_leaf(name, _get(loaded, leaf["key"]), leaf)
    for entry in desc["non_tensor"]:
        _check_non_tensor(name, _get(loaded, entry["key"]), entry)
    for collection in desc["collections"]:
        kind = list if collection["type"] == "LazyStackedTensorDict" else dict
        assert isinstance(_get(loaded, collection["key"]), kind)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_fixture_loads_the_same_in_mode_r_plus(name, backend, tmp_path):
    desc = EXPECTED[name]
    path = _copy(name, tmp_path)
    before = _tree_bytes(path)
    if desc["compression"] is not None:
        with pytest.raises(Unsupported, match="r\\+"):
            tensorplay.load_memmap(path, mode="r+", backend=backend)
        return
    loaded = tensorplay.load_memmap(path, mode="r+", backend=backend, allow_pickle=desc["requires_pickle"])
    for leaf in desc["leaves"]:
        _check_leaf(name, _get(loaded, leaf["key"]), leaf)
    for entry in desc["non_tensor"]:
        _check_non_tensor(name, _get(loaded, entry["key"]), entry)
    del loaded
    assert _tree_bytes(path) == before


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_meta_device_reads_no_payload_byte(name, backend, monkeypatch):
    def no_mapping(*args, **kwargs):
        raise AssertionError("a payload was mapped")

    def no_inflating(*args, **kwargs):
        raise AssertionError("a payload was decompressed")

    monkeypatch.setattr(mmap, "mmap", no_mapping)
    monkeypatch.setattr(tensorplay._core, "inflate_entries", no_inflating)
    desc = EXPECTED[name]
    if desc["kind"] == "archive":
        monkeypatch.undo()  # an archive maps its index once; its leaves are neither viewed nor inflated
        monkeypatch.setattr(tensorplay._core, "inflate_entries", no_inflating)
    loaded = tensorplay.load_memmap(TD / desc["path"], "meta", backend=backend,
                                    allow_pickle=desc["requires_pickle"])
    for leaf in desc["leaves"]:
        got = _get(loaded, leaf["key"])
        dtype = leaf["dtype"].removeprefix("torch.")
        shapes = leaf["nested_shapes"] if leaf["is_nested"] else [leaf["shape"]]
        parts = got if leaf["is_nested"] else [got]
        for part, shape in zip(parts, shapes, strict=True):
            if backend == "numpy":
                assert isinstance(part, tensorplay.TensorSpec)
                assert (part.dtype, list(part.shape)) == (dtype, shape)
                assert len(part.stride) == len(shape)
            else:
                assert part.device.type == "meta"
                assert (_dtype_name(part), list(part.shape)) == (dtype, shape)
    for entry in desc["non_tensor"]:
        _check_non_tensor(name, _get(loaded, entry["key"]), entry)


@pytest.mark.skipif(not has_torch(), reason="needs torch")
def test_fake_tensor_mode_gives_fake_tensors_and_reads_nothing(monkeypatch):
    from torch._subclasses import FakeTensor, FakeTensorMode

    def no_mapping(*args, **kwargs):
        raise AssertionError("a payload was mapped")

    monkeypatch.setattr(mmap, "mmap", no_mapping)
    with FakeTensorMode():
        loaded = tensorplay.load_memmap(TD / "basic", backend="torch")
    assert type(loaded["f32"]) is FakeTensor
    assert list(loaded["f32"].shape) == [3, 2]


def test_meta_numpy_records_have_contiguous_strides():
    loaded = tensorplay.load_memmap(TD / "basic", device="meta", backend="numpy")
    assert loaded["f32"] == tensorplay.TensorSpec("float32", (3, 2), (2, 1))
    assert loaded["bf16"] == tensorplay.TensorSpec("bfloat16", (3,), (1,))


# --- subpath ----------------------------------------------------------------------------

@pytest.mark.parametrize("backend", BACKENDS)
def test_subpath_opens_only_that_subtree(tmp_path, backend):
    folder = _copy("nested_keys", tmp_path)
    # Everything outside outer/in%2Fner is broken: a load of the whole tree fails.
    (folder / "meta.json").write_bytes(b"{ not json")
    (folder / "plain.memmap").unlink()
    (folder / "outer" / "bf16.memmap").write_bytes(b"short")
    with pytest.raises(Malformed):
        tensorplay.load_memmap(folder, backend=backend)
    leaf = next(e for e in EXPECTED["nested_keys"]["leaves"] if e["key"] == ["outer", "in/ner", "leaf"])
    got = tensorplay.load_memmap(folder, subpath=("outer", "in/ner"), backend=backend)
    assert set(got) == {"leaf"}
    _check_leaf("nested_keys", got["leaf"], leaf)
    archive = tensorplay.load_memmap(TD / "archive_stored.tdz", subpath=("outer", "in/ner"), backend=backend)
    _check_leaf("archive_stored", archive["leaf"], leaf)


@pytest.mark.parametrize("source", ["tensorclass", "archive_tensorclass"])
def test_subpath_reaches_tensorclass_fields_lazy_stack_members_and_strings(source):
    path = TD / EXPECTED[source]["path"]
    sample = tensorplay.load_memmap(path, subpath="sample", backend="numpy")
    assert set(sample) == {"obs", "reward", "label", "step"}
    assert sample["label"] == "episode-1"
    member = tensorplay.load_memmap(TD / "lazy_stack", subpath="stack/1", backend="numpy")
    assert member["only1"].tolist() == [True]
    with pytest.raises(ValueError, match="names no saved tensordict"):
        tensorplay.load_memmap(path, subpath=("sample", "obs"), backend="numpy")
    with pytest.raises(ValueError, match="names no saved tensordict"):
        tensorplay.load_memmap(path, subpath="nothing/here", backend="numpy")


# --- modes ----------------------------------------------------------------------------

def _first_element(x):
    return x.reshape(-1)[0] if not _is_torch(x) else x.view(-1)[0]


@pytest.mark.parametrize("backend", BACKENDS)
def test_mode_r_is_copy_on_write_and_r_plus_writes_through(tmp_path, backend):
    folder = _copy("basic", tmp_path)
    before = (folder / "i64.memmap").read_bytes()
    loaded = tensorplay.load_memmap(folder, backend=backend, mode="r")
    loaded["i64"][0] = 7
    assert int(loaded["i64"][0]) == 7
    assert (folder / "i64.memmap").read_bytes() == before
    assert int(tensorplay.load_memmap(folder, backend=backend, mode="r")["i64"][0]) == -(2**40)

    shared = tensorplay.load_memmap(folder, backend=backend, mode="r+")
    shared["i64"][0] = 7
    assert (folder / "i64.memmap").read_bytes() == struct.pack("<q", 7) + before[8:]
    assert len((folder / "i64.memmap").read_bytes()) == len(before)
    assert int(tensorplay.load_memmap(folder, backend=backend, mode="r")["i64"][0]) == 7
    # The default, as tensordict documents it: a file the process can write is shared.
    default = tensorplay.load_memmap(folder, backend=backend)
    default["i64"][0] = 9
    assert (folder / "i64.memmap").read_bytes()[:8] == struct.pack("<q", 9)


@contextlib.contextmanager
def _unwritable(paths):
    """The files cannot be opened for writing by this process: made immutable when
    it is root (root writes read-only files), else made read-only."""
    root = os.geteuid() == 0
    for path in paths:
        if root:
            subprocess.run(["chattr", "+i", str(path)], check=True)
        else:
            os.chmod(path, 0o444)
    try:
        yield
    finally:
        for path in paths:
            if root:
                subprocess.run(["chattr", "-i", str(path)], check=True)


@pytest.mark.parametrize("backend", ["numpy", "torch"])
def test_mode_none_maps_a_file_it_cannot_write_copy_on_write_and_r_plus_refuses_it(tmp_path, backend):
    folder = _copy("basic", tmp_path)
    before = (folder / "i64.memmap").read_bytes()
    with _unwritable(sorted(folder.rglob("*.memmap"))):
        loaded = tensorplay.load_memmap(folder, backend=backend)
        loaded["i64"][0] = 5
        assert int(loaded["i64"][0]) == 5
        with pytest.raises(PermissionError, match=r"cannot open for writing.*\.memmap"):
            tensorplay.load_memmap(folder, backend=backend, mode="r+")
    assert (folder / "i64.memmap").read_bytes() == before


@pytest.mark.parametrize("backend", BACKENDS)
def test_archive_modes(tmp_path, backend):
    archive = _copy("archive_stored", tmp_path)
    before = archive.read_bytes()
    loaded = tensorplay.load_memmap(archive, backend=backend)
    loaded["a/b"][0] = 100
    assert archive.read_bytes() == before
    shared = tensorplay.load_memmap(archive, backend=backend, mode="r+")
    shared["a/b"][0] = 100
    offset = next(e for e in EXPECTED["archive_stored"]["leaves"] if e["key"] == ["a/b"])["archive_payload_offset"]
    after = archive.read_bytes()
    assert after[offset:offset + 8] == struct.pack("<q", 100)
    assert after[:offset] == before[:offset] and after[offset + 8:] == before[offset + 8:]
    with pytest.raises(Unsupported, match="r\\+.*compressed"):
        tensorplay.load_memmap(TD / "archive_deflate.tdz", backend=backend, mode="r+")


def test_unaligned_stored_archive_is_copied_for_r_and_refused_for_r_plus(tmp_path):
    files = _tree_bytes(TD / "basic")
    # A one-byte name puts most payloads at odd offsets.
    archive = _zip(tmp_path / "odd.zip", {"meta.json": files["meta.json"], "x": b"",
                                          **{k: v for k, v in files.items() if k != "meta.json"}})
    misaligned = [name for name, offset in _payload_offsets(archive).items()
                  if name.endswith(".memmap") and offset % 2]
    assert misaligned
    loaded = tensorplay.load_memmap(archive, backend="numpy")
    for leaf in EXPECTED["basic"]["leaves"]:
        _check_leaf("odd.zip", _get(loaded, leaf["key"]), leaf)
    with pytest.raises(Unsupported, match="aligned"):
        tensorplay.load_memmap(archive, backend="numpy", mode="r+")


def test_mode_and_arguments_are_checked():
    with pytest.raises(ValueError, match="mode"):
        tensorplay.load_memmap(TD / "basic", mode="w")
    with pytest.raises(ValueError, match="num_threads"):
        tensorplay.load_memmap(TD / "basic", num_threads=-1)
    with pytest.raises(ValueError, match="CPU"):
        tensorplay.load_memmap(TD / "basic", device="cuda", backend="numpy")
    with pytest.raises(FileNotFoundError):
        tensorplay.load_memmap(TD / "no_such_folder")


# --- compression and threads ----------------------------------------------------------

@pytest.mark.parametrize("method", [zipfile.ZIP_DEFLATED, zipfile.ZIP_BZIP2, zipfile.ZIP_LZMA],
                         ids=["deflate", "bzip2", "lzma"])
@pytest.mark.parametrize("backend", BACKENDS)
def test_compressed_archives_load_with_any_thread_count(tmp_path, method, backend):
    archive = _zip(tmp_path / "basic.tdz", _tree_bytes(TD / "basic"), method)
    results = [tensorplay.load_memmap(archive, backend=backend, num_threads=n) for n in (0, 1, 2, 8)]
    for loaded in results:
        for leaf in EXPECTED["basic"]["leaves"]:
            _check_leaf(archive.name, _get(loaded, leaf["key"]), leaf)
    assert all(_raw(r["transposed"]) == _raw(results[0]["transposed"]) for r in results)


def test_many_compressed_entries_decompress_identically_in_parallel(tmp_path):
    rng = np.random.default_rng(0)
    arrays = {f"t{i}": rng.integers(0, 4, size=(1000 + i,), dtype=np.int32) for i in range(40)}
    files = {"meta.json": _meta({k: _leaf_meta([len(a)], "torch.int32") for k, a in arrays.items()})}
    files.update({f"{k}.memmap": a.tobytes() for k, a in arrays.items()})
    archive = _zip(tmp_path / "many.tdz", files, zipfile.ZIP_DEFLATED)
    serial = tensorplay.load_memmap(archive, backend="numpy", num_threads=0)
    parallel = tensorplay.load_memmap(archive, backend="numpy", num_threads=4)
    for key, array in arrays.items():
        assert np.array_equal(serial[key], array) and np.array_equal(parallel[key], array)
        assert parallel[key].flags.writeable


def test_unknown_compression_is_refused_by_name(tmp_path):
    archive = _raw_zip(tmp_path / "zstd.tdz", [
        ("meta.json", 0, _meta({"x": _leaf_meta([3])}), len(_meta({"x": _leaf_meta([3])})), 0),
        ("x.memmap", 93, b"\x00" * 12, 12, 0),
    ])
    with pytest.raises(Unsupported, match="zstd"):
        tensorplay.load_memmap(archive, backend="numpy")


# --- pickles --------------------------------------------------------------------------

def test_pickled_data_is_refused_with_allow_pickle_false():
    with pytest.raises(RuntimeError, match=r"allow_pickle=False.*tags/other\.pickle") as info:
        tensorplay.load_memmap(TD / "pickled", allow_pickle=False, backend="numpy")
    assert isinstance(info.value, Unsafe)


def test_pickled_data_loads_with_a_future_warning_by_default():
    """tensordict's default (None) loads pickled data with a FutureWarning; here
    the restricted VM decodes it, so the warning says no code ran."""
    with pytest.warns(FutureWarning, match=r"tags/other\.pickle.*no code ran") as record:
        loaded = tensorplay.load_memmap(TD / "pickled", backend="numpy")
    assert loaded["tags"] == {1, 2, 3}
    assert record[0].filename == __file__  # it points at the caller
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert tensorplay.load_memmap(TD / "pickled", backend="numpy", allow_pickle=True)["tags"] == {1, 2, 3}


@pytest.mark.parametrize("backend", BACKENDS)
def test_pickled_fixture_loads_through_the_restricted_vm(backend, monkeypatch):
    import pickle

    def no_pickle(*args, **kwargs):
        raise AssertionError("Python's pickle was used")

    monkeypatch.setattr(pickle, "loads", no_pickle)
    monkeypatch.setattr(pickle, "load", no_pickle)
    loaded = tensorplay.load_memmap(TD / "pickled", allow_pickle=True, backend=backend)
    assert loaded["tags"] == {1, 2, 3}
    assert loaded["mixed"] == [{1}, "s"]


def test_json_types_sidecar_needs_no_pickle_but_must_match_its_hash(tmp_path):
    loaded = tensorplay.load_memmap(TD / "non_tensor", backend="numpy", allow_pickle=False)
    assert loaded["container_type"] is dict
    folder = _copy("non_tensor", tmp_path)
    (folder / "container_type" / "other.pickle").write_bytes(b"\x80\x04\x95\x00\x00\x00\x00\x00\x00\x00\x00N.")
    with pytest.raises(Unsafe, match="container_type/other.pickle"):
        tensorplay.load_memmap(folder, backend="numpy", allow_pickle=False)


def _malicious_pickle(marker) -> bytes:
    return b"cposix\nsystem\n(V" + f"touch {marker}".encode() + b"\ntR."


@pytest.mark.parametrize("allow", [None, False, True])
def test_malicious_pickle_sidecar_runs_nothing(tmp_path, allow):
    folder = _copy("pickled", tmp_path)
    marker = tmp_path / "marker"
    (folder / "tags" / "other.pickle").write_bytes(_malicious_pickle(marker))
    with pytest.raises(Unsafe) as info:
        tensorplay.load_memmap(folder, allow_pickle=allow, backend="numpy")
    assert "tags/other.pickle" in str(info.value)
    if allow is not False:  # decoded by the restricted VM, which refuses the global
        assert "posix.system" in str(info.value)
    assert not marker.exists()
    archive = _zip(tmp_path / "evil.tdz", _tree_bytes(folder), zipfile.ZIP_DEFLATED)
    with pytest.raises(Unsafe):
        tensorplay.load_memmap(archive, allow_pickle=allow, backend="numpy")
    assert not marker.exists()


def test_a_sidecar_with_a_class_outside_the_allowlist_loads_in_stub_mode(tmp_path):
    """A NonTensorData holding a user's object (pickled by tensordict): refused, or
    with unknown_globals="stub" an inert stub; a payload in a sidecar stays refused."""
    folder = _copy("pickled", tmp_path)
    # What pickle.dumps({"data": obj}, protocol=2) writes for a my_project.configs.RunConfig with lr=0.1.
    (folder / "tags" / "other.pickle").write_bytes(
        b"\x80\x02}q\x00X\x04\x00\x00\x00dataq\x01cmy_project.configs\nRunConfig\nq\x02)\x81q\x03}q\x04X\x02"
        b"\x00\x00\x00lrq\x05G?\xb9\x99\x99\x99\x99\x99\x9asbs.")
    with pytest.raises(Unsafe, match="my_project.configs.RunConfig"):
        tensorplay.load_memmap(folder, allow_pickle=True, backend="numpy")
    with pytest.warns(tensorplay.StubWarning, match="my_project.configs.RunConfig"):
        loaded = tensorplay.load_memmap(folder, allow_pickle=True, backend="numpy", unknown_globals="stub")
    assert isinstance(loaded["tags"], tensorplay.Stub) and loaded["tags"].to_dict() == {"lr": 0.1}
    marker = tmp_path / "marker"
    (folder / "tags" / "other.pickle").write_bytes(_malicious_pickle(marker))
    with pytest.raises(Unsafe, match="posix.system"):
        tensorplay.load_memmap(folder, allow_pickle=True, backend="numpy", unknown_globals="stub")
    assert not marker.exists()


def test_sidecar_pickles_may_not_name_storages(tmp_path):
    folder = _copy("pickled", tmp_path)
    pid = (b"\x80\x02}X\x04\x00\x00\x00data(X\x07\x00\x00\x00storagectorch\nFloatStorage\nX\x01\x00\x00\x000"
           b"X\x03\x00\x00\x00cpuK\x01tQs.")
    (folder / "tags" / "other.pickle").write_bytes(pid)
    with pytest.raises(Unsafe, match="persistent id"):
        tensorplay.load_memmap(folder, allow_pickle=True, backend="numpy")


@dataclasses.dataclass
class Sample:
    obs: object
    reward: object
    label: str
    step: int


def test_tensorclass_is_built_only_when_allowlisted():
    plain = tensorplay.load_memmap(TD / "tensorclass", backend="numpy")
    assert isinstance(plain["sample"], dict)
    with tensorplay.safe_globals([(Sample, "__main__.Sample")]):
        built = tensorplay.load_memmap(TD / "tensorclass", backend="numpy")
    assert isinstance(built["sample"], Sample)
    assert built["sample"].label == "episode-1" and built["sample"].obs.shape == (2, 4)


def test_as_tensordict_needs_tensordict():
    try:
        from tensordict import TensorDict  # noqa: F401
    except ImportError:  # (tests/fixtures/tensordict is on sys.path as a namespace package)
        with pytest.raises(ImportError, match="tensordict"):
            tensorplay.load_memmap(TD / "basic", as_tensordict=True)
    else:  # pragma: no cover - tensordict is not a test dependency
        assert type(tensorplay.load_memmap(TD / "basic", as_tensordict=True)).__name__ == "TensorDict"


# --- attacks: each refused, with nothing changed ------------------------------------------

@pytest.mark.parametrize("mode", ["r", "r+"])
def test_symlinked_leaf_is_refused(tmp_path, mode):
    folder = _copy("basic", tmp_path)
    secret = tmp_path / "secret"
    secret.write_bytes(b"S" * 24)
    (folder / "f32.memmap").unlink()
    (folder / "f32.memmap").symlink_to(secret)
    with pytest.raises(Unsafe, match="f32.memmap.*|symbolic link"):
        tensorplay.load_memmap(folder, mode=mode, backend="numpy")
    assert secret.read_bytes() == b"S" * 24


@pytest.mark.parametrize("what", ["folder", "meta.json", "prefix/meta.json"])
def test_symlinked_folders_and_metadata_are_refused(tmp_path, what):
    folder = _copy("nested_keys", tmp_path)
    elsewhere = tmp_path / "elsewhere"
    if what == "folder":
        shutil.move(folder / "outer", elsewhere)
        (folder / "outer").symlink_to(elsewhere, target_is_directory=True)
    else:
        target = folder / "outer" / "meta.json" if what == "meta.json" else folder / "meta.json"
        shutil.move(target, elsewhere)
        target.symlink_to(elsewhere)
    with pytest.raises(Unsafe, match="symbolic link"):
        tensorplay.load_memmap(folder, backend="numpy")


def test_special_files_are_refused_without_blocking(tmp_path):
    folder = _copy("basic", tmp_path)
    (folder / "f32.memmap").unlink()
    os.mkfifo(folder / "f32.memmap")
    with pytest.raises(Unsafe, match="not a regular file"):
        tensorplay.load_memmap(folder, backend="numpy")


@pytest.mark.parametrize("mode", ["r", "r+"])
@pytest.mark.parametrize("extra", [1, 2, 8])
def test_a_leaf_longer_than_meta_json_declares_is_read_as_its_declared_prefix(tmp_path, mode, extra):
    """tensordict's own compatibility fixtures have leaves a byte or two longer than
    meta.json declares; tensordict reads the declared prefix, and so does this."""
    folder = _copy("basic", tmp_path)
    expected = tensorplay.load_memmap(_copy("basic", tmp_path / "reference"), backend="numpy")["f32"]
    with open(folder / "f32.memmap", "ab") as f:
        f.write(b"\xff" * extra)
    before = _tree_bytes(folder)
    loaded = tensorplay.load_memmap(folder, mode=mode, backend="numpy")["f32"]
    assert loaded.dtype == expected.dtype and loaded.shape == expected.shape
    assert np.array_equal(loaded, expected, equal_nan=True)
    del loaded
    assert _tree_bytes(folder) == before


@pytest.mark.parametrize("mode", ["r", "r+"])
def test_a_leaf_shorter_than_meta_json_declares_is_an_error_and_the_file_is_unchanged(tmp_path, mode):
    folder = _copy("basic", tmp_path)
    meta = json.loads((folder / "meta.json").read_text())
    meta["f32"]["shape"] = [1000, 2]
    (folder / "meta.json").write_text(json.dumps(meta))
    before = _tree_bytes(folder)
    stat_before = os.stat(folder / "f32.memmap")
    with pytest.raises(Malformed, match="24 bytes.*f32.memmap"):
        tensorplay.load_memmap(folder, mode=mode, backend="numpy")
    assert _tree_bytes(folder) == before
    after = os.stat(folder / "f32.memmap")
    assert (after.st_size, after.st_mtime_ns) == (stat_before.st_size, stat_before.st_mtime_ns)


@pytest.mark.parametrize("robust", [True, False])
def test_traversal_in_keys_never_leaves_the_folder(tmp_path, robust):
    outside = tmp_path / "escape.memmap"
    outside.write_bytes(struct.pack("<3f", 6, 6, 6))
    folder = _td_folder(tmp_path / "td", {"meta.json": _meta({"../escape": _leaf_meta([3])})})
    error = Malformed if robust else Unsafe
    with pytest.raises(error):
        tensorplay.load_memmap(folder, robust_key=robust, backend="numpy")
    # The percent-encoded name of the key is a file inside the folder, and only it is read.
    (folder / "..%2Fescape.memmap").write_bytes(struct.pack("<3f", 1, 2, 3))
    if robust:
        loaded = tensorplay.load_memmap(folder, backend="numpy")
        assert loaded["../escape"].tolist() == [1, 2, 3]
    else:
        with pytest.raises(Unsafe, match="outside the folder"):
            tensorplay.load_memmap(folder, robust_key=False, backend="numpy")
    assert outside.read_bytes() == struct.pack("<3f", 6, 6, 6)


@pytest.mark.parametrize("key", ["..", ".", "", "a/../..", "nul\0"])
def test_collection_keys_that_would_traverse_are_refused_without_robust_keys(tmp_path, key):
    folder = _td_folder(tmp_path / "td", {"meta.json": _meta({key: {"type": "TensorDict"}})})
    with pytest.raises(Unsafe, match="outside the folder"):
        tensorplay.load_memmap(folder, robust_key=False, backend="numpy")
    with pytest.raises(Malformed, match="missing folder"):
        tensorplay.load_memmap(folder, robust_key=True, backend="numpy")


def test_traversal_names_inside_an_archive_are_never_looked_up(tmp_path):
    data = struct.pack("<3f", 1, 2, 3)
    meta = _meta({"../x": _leaf_meta([3])})
    archive = _zip(tmp_path / "t.tdz", {"meta.json": meta, "../x.memmap": data, "/x.memmap": data})
    with pytest.raises(Malformed, match="missing"):
        tensorplay.load_memmap(archive, backend="numpy")
    with pytest.raises(Unsafe):
        tensorplay.load_memmap(archive, robust_key=False, backend="numpy")


def test_percent_decoding_is_never_applied_to_file_names(tmp_path):
    # A file whose name decodes to "../x" stands only for the key spelled "%2E%2E%2Fx".
    folder = _td_folder(tmp_path / "td", {
        "meta.json": _meta({"%2E%2E%2Fx": _leaf_meta([1])}),
        "%252E%252E%252Fx.memmap": struct.pack("<f", 5),
    })
    assert tensorplay.load_memmap(folder, backend="numpy")["%2E%2E%2Fx"].tolist() == [5]


def test_deflate_bomb_in_an_archive_is_refused(tmp_path):
    bomb = zlib.compressobj(9, zlib.DEFLATED, -15)
    payload = bomb.compress(bytes(64 << 20)) + bomb.flush()
    assert len(payload) < (1 << 20)
    meta = _meta({"x": _leaf_meta([3])})
    archive = _raw_zip(tmp_path / "bomb.tdz", [
        ("meta.json", 0, meta, len(meta), zlib.crc32(meta)),
        ("x.memmap", 8, payload, 12, 0),  # declares the 12 bytes meta.json expects
    ])
    with pytest.raises(Malformed, match="more than the 12 bytes") as info:
        tensorplay.load_memmap(archive, backend="numpy", num_threads=2)
    assert "bomb.tdz!x.memmap" in str(info.value)
    # Declaring the true size instead: meta.json and the entry disagree.
    archive = _raw_zip(tmp_path / "bomb2.tdz", [
        ("meta.json", 0, meta, len(meta), zlib.crc32(meta)),
        ("x.memmap", 8, payload, 64 << 20, 0),
    ])
    with pytest.raises(Malformed, match="declares 12"):
        tensorplay.load_memmap(archive, backend="numpy")
    # A huge declared leaf, consistent everywhere, is refused before any allocation.
    huge = _meta({"x": _leaf_meta([1 << 29])})
    archive = _raw_zip(tmp_path / "bomb3.tdz", [
        ("meta.json", 0, huge, len(huge), zlib.crc32(huge)),
        ("x.memmap", 8, payload, 2 << 30, 0),
    ])
    with pytest.raises(Malformed, match="more than DEFLATE can produce.*x.memmap"):
        tensorplay.load_memmap(archive, backend="numpy")


@pytest.mark.parametrize("method", [zipfile.ZIP_BZIP2, zipfile.ZIP_LZMA], ids=["bzip2", "lzma"])
def test_bzip2_and_lzma_bombs_are_refused(tmp_path, method):
    meta = _meta({"x": _leaf_meta([3])})
    archive = _zip(tmp_path / "bomb.tdz", {"meta.json": meta, "x.memmap": bytes(16 << 20)}, method)
    data = bytearray(archive.read_bytes())
    with zipfile.ZipFile(archive) as z:
        info = z.getinfo("x.memmap")
    struct.pack_into("<I", data, info.header_offset + 22, 12)
    central = data.rindex(b"PK\x01\x02")
    struct.pack_into("<I", data, central + 24, 12)
    archive.write_bytes(bytes(data))
    with pytest.raises(Malformed, match="more than the 12 bytes"):
        tensorplay.load_memmap(archive, backend="numpy")


def test_format_versions_dtypes_and_json_are_checked(tmp_path):
    folder = _td_folder(tmp_path / "v2", {"meta.json": _meta({}, _format_version=2)})
    with pytest.raises(Unsupported, match="_format_version 2"):
        tensorplay.load_memmap(folder)
    folder = _td_folder(tmp_path / "dtype", {"meta.json": _meta({"x": _leaf_meta([1], "torch.float13")}),
                                             "x.memmap": b"\0\0"})
    with pytest.raises(Unsupported, match="unknown dtype torch.float13"):
        tensorplay.load_memmap(folder)
    folder = _td_folder(tmp_path / "json", {"meta.json": b"{" * 100000})
    with pytest.raises(Malformed, match="meta.json"):
        tensorplay.load_memmap(folder)
    folder = _td_folder(tmp_path / "shape", {"meta.json": _meta({"x": _leaf_meta([-1])})})
    with pytest.raises(Malformed, match="non-negative"):
        tensorplay.load_memmap(folder)
    folder = _td_folder(tmp_path / "huge", {"meta.json": _meta({"x": _leaf_meta([0, 1 << 40, 1 << 40])})})
    with pytest.raises(Malformed, match="too large"):
        tensorplay.load_memmap(folder)
    folder = _td_folder(tmp_path / "type", {"meta.json": json.dumps({"_type": "<class 'os.system'>"}).encode()})
    with pytest.raises(Unsupported, match="os.system"):
        tensorplay.load_memmap(folder)
    not_zip = tmp_path / "plain.bin"
    not_zip.write_bytes(b"hello")
    with pytest.raises(ValueError, match="a file, but not a zip archive") as info:
        tensorplay.load_memmap(not_zip)
    assert isinstance(info.value, Malformed)
    with pytest.raises(Malformed, match="not a TensorDict folder"):
        tensorplay.load_memmap(tmp_path)


@pytest.mark.parametrize("sizes, declared, message", [
    ([2, 3, -4, 3], [2, 2], "negative"),
    ([2, 3, 4, 3], [2, 3], "sizes file"),
    ([], [1 << 60, 0], "size shape"),
    ([2, 3, 4, 4], [2, 2], "72 bytes"),
])
def test_nested_tensor_sizes_are_checked(tmp_path, sizes, declared, message):
    meta = {"device": "cpu", "shape": declared, "dtype": "torch.float32", "is_nested": True}
    folder = _td_folder(tmp_path / "td", {
        "meta.json": _meta({"j": meta}),
        "j.memmap": (TD / "nested_tensor" / "jagged.memmap").read_bytes(),
        "j.shape.memmap": struct.pack(f"<{len(sizes)}q", *sizes),
    })
    with pytest.raises(Malformed, match=message):
        tensorplay.load_memmap(folder, backend="numpy")


def test_nesting_is_bounded_and_deep_json_is_malformed(tmp_path):
    level = tmp_path / "deep"
    for _ in range(td_module.MAX_DEPTH + 2):
        _td_folder(level, {"meta.json": _meta({"d": {"type": "TensorDict"}})})
        level = level / "d"
    _td_folder(level, {"meta.json": _meta({})})
    with pytest.raises(tensorplay.LimitExceededError, match="max_depth"):
        tensorplay.load_memmap(tmp_path / "deep", backend="numpy")
    folder = _td_folder(tmp_path / "json", {"meta.json": b"[" * 200000 + b"]" * 200000})
    with pytest.raises(Malformed, match="not valid JSON"):
        tensorplay.load_memmap(folder, backend="numpy")


def test_no_descriptor_is_left_open(tmp_path):
    def open_fds() -> int:
        return len(os.listdir("/proc/self/fd"))

    broken = _copy("nested_keys", tmp_path)
    (broken / "outer" / "in%2Fner" / "leaf.memmap").unlink()
    before = open_fds()
    for _ in range(3):
        tensorplay.load_memmap(TD / "nested_keys", backend="numpy")
        tensorplay.load_memmap(TD / "archive_deflate.tdz", backend="numpy", num_threads=2)
        tensorplay.load_memmap(TD / "tensorclass", subpath=("sample",), backend="numpy")
        with pytest.raises(Malformed):
            tensorplay.load_memmap(broken, backend="numpy")
        with pytest.raises(ValueError):
            tensorplay.load_memmap(TD / "lazy_stack", subpath="stack/7", backend="numpy")
    assert open_fds() == before


def test_numpy_backend_refuses_dtypes_numpy_cannot_hold(tmp_path):
    folder = _td_folder(tmp_path / "c32", {"meta.json": _meta({"x": _leaf_meta([1], "torch.complex32")}),
                                           "x.memmap": b"\0" * 4})
    with pytest.raises(Unsupported, match="complex32"):
        tensorplay.load_memmap(folder, backend="numpy")
    assert tensorplay.load_memmap(folder, "meta", backend="numpy")["x"].dtype == "complex32"


# --- the scanner --------------------------------------------------------------------------

def test_scanner_reads_sidecars_and_never_mistakes_tensor_bytes_for_pickles(tmp_path):
    for path in ("basic", "archive_deflate.tdz", "archive_stored.tdz", "nested_keys"):
        reports = scanner.scan_paths([TD / path])
        assert {r.verdict for r in reports} <= {"clean", "skipped"}, [r.to_json() for r in reports]
        assert {r.verdict for r in reports if r.path.endswith(".json")} <= {"skipped"}
    pickled = {os.path.relpath(r.path, TD): r for r in scanner.scan_paths([TD / "pickled"])}
    assert pickled["pickled/tags/other.pickle"].format == "pickle"
    assert pickled["pickled/mixed/pickle.pkl"].pickles == 1
    # Raw tensor bytes are never exempt: read as a pickle from byte 0, they name nothing.
    leaves = [r for p, r in pickled.items() if p.endswith(".memmap")]
    assert leaves and all(r.verdict == "skipped" and r.skipped_because == scanner.TENSORDICT_LEAF for r in leaves)
    folder = _copy("pickled", tmp_path)
    (folder / "tags" / "other.pickle").write_bytes(_malicious_pickle(tmp_path / "marker"))
    reports = scanner.scan_paths([folder])
    evil = next(r for r in reports if r.path.endswith("other.pickle"))
    assert evil.verdict == "unsafe"
    assert [(f.name, f.dangerous) for f in evil.findings] == [("posix.system", True)]
    archive = _zip(tmp_path / "evil.tdz", _tree_bytes(folder), zipfile.ZIP_DEFLATED)
    report = scanner.scan(archive)
    assert report.verdict == "unsafe" and report.globals == ("posix.system",)
    assert report.findings[0].location == "tags/other.pickle"
    assert not (tmp_path / "marker").exists()
