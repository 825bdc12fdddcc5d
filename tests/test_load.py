"""tensorplay.load's API: sources, mmap semantics, sharing, errors and options."""
from __future__ import annotations

import hashlib
import io
import os
import pickle
import shutil

import numpy as np
import pytest
import tensorplay
from conftest import EXTRA_FIXTURES, TORCH_FIXTURES, has_torch, views_the_mapped_file

needs_torch = pytest.mark.skipif(not has_torch(), reason="torch not installed")
BACKENDS = ["numpy", pytest.param("torch", marks=needs_torch)]
SEED_VIEWS = TORCH_FIXTURES / "seed_views.pt"


def _sha(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _as_numpy(x):
    return x.numpy() if hasattr(x, "numpy") else x


@pytest.mark.parametrize("backend", BACKENDS)
def test_file_objects_load_like_paths(backend):
    expected = [_as_numpy(t).tolist() for t in tensorplay.load(SEED_VIEWS, backend=backend)]
    data = SEED_VIEWS.read_bytes()
    assert [_as_numpy(t).tolist() for t in tensorplay.load(io.BytesIO(data), backend=backend)] == expected
    with open(SEED_VIEWS, "rb") as f:
        assert [_as_numpy(t).tolist() for t in tensorplay.load(f, backend=backend)] == expected


def test_file_objects_that_transform_their_file_are_read_not_mapped(tmp_path):
    """A GzipFile's fileno() is the compressed file's: its bytes are what it reads."""
    import gzip

    with gzip.open(tmp_path / "views.pt.gz", "wb") as z:
        z.write(SEED_VIEWS.read_bytes())
    with gzip.open(tmp_path / "views.pt.gz", "rb") as z:
        numbers, evens = tensorplay.load(z, backend="numpy")
    assert numbers.tolist() == list(range(1, 10)) and evens.tolist() == [2, 4, 6, 8]
    with open(SEED_VIEWS, "rb") as f:
        f.read(1)
        with pytest.raises(tensorplay.MalformedCheckpointError):  # read from where it stands, as torch does
            tensorplay.load(f, backend="numpy")


@pytest.mark.skipif(not has_torch(), reason="torch reads the reference")
def test_a_safetensors_path_loads_as_torch_load_reads_it(tmp_path):
    import safetensors.torch
    import torch

    path = tmp_path / "model.safetensors"
    safetensors.torch.save_file({"w": torch.arange(6.0).reshape(2, 3), "b": torch.ones(2, dtype=torch.bfloat16)}, path)
    theirs = torch.load(path)
    ours = tensorplay.load(path)
    assert theirs.keys() == ours.keys() and all(torch.equal(ours[k], theirs[k]) for k in theirs)
    with pytest.raises(RuntimeError, match="dict map_location is not supported"):
        tensorplay.load(path, map_location={"cpu": "cpu"})
    safetensors.torch.save_file({"w": torch.arange(6.0)}, tmp_path / "plain.safetensors")
    assert tensorplay.load(tmp_path / "plain.safetensors", backend="numpy")["w"].tolist() == list(range(6))
    assert tensorplay.load(path, backend="numpy")["b"].dtype.name == "bfloat16"
    safetensors.torch.save_file({"f8": torch.ones(2, dtype=torch.float8_e4m3fn)}, tmp_path / "f8.safetensors")
    with pytest.raises(tensorplay.UnsupportedCheckpointError, match="numpy reader cannot hold.*backend='torch'"):
        tensorplay.load(tmp_path / "f8.safetensors", backend="numpy")
    broken = tmp_path / "broken.safetensors"
    broken.write_bytes(path.read_bytes()[:40])
    with pytest.raises(tensorplay.MalformedCheckpointError, match="malformed safetensors file"):
        tensorplay.load(broken)
    # A torch checkpoint under that name is read as what it is (torch hands it to
    # safetensors, which fails on it); tests/malicious holds a hostile one.
    with pytest.raises(FileNotFoundError):
        tensorplay.load(tmp_path / "missing.safetensors")
    misnamed = tmp_path / "misnamed.safetensors"
    misnamed.write_bytes(SEED_VIEWS.read_bytes())
    assert tensorplay.load(misnamed, backend="numpy")[0].tolist() == list(range(1, 10))


def test_a_stream_is_read_from_its_current_position():
    stream = io.BytesIO(b"PREFIX" + SEED_VIEWS.read_bytes())
    stream.seek(6)
    numbers, evens = tensorplay.load(stream, backend="numpy")
    assert numbers.tolist() == list(range(1, 10))
    assert evens.tolist() == [2, 4, 6, 8]


def test_mmap_needs_a_path():
    with pytest.raises(ValueError, match="file path"):
        tensorplay.load(io.BytesIO(SEED_VIEWS.read_bytes()), mmap=True, backend="numpy")


def test_missing_and_directory_paths_raise_oserrors_as_open_raises_them(tmp_path):
    """errno, strerror and filename set, as torch's open() sets them."""
    import errno

    from tensorplay.serialization import get_unsafe_globals_in_checkpoint

    for call in (lambda p: tensorplay.load(p, backend="numpy"), get_unsafe_globals_in_checkpoint):
        with pytest.raises(FileNotFoundError) as missing:
            call(tmp_path / "missing.pt")
        assert (missing.value.errno, missing.value.filename) == (errno.ENOENT, str(tmp_path / "missing.pt"))
        assert missing.value.strerror == os.strerror(errno.ENOENT)
        with pytest.raises(IsADirectoryError) as folder:
            call(tmp_path)
        assert (folder.value.errno, folder.value.filename) == (errno.EISDIR, str(tmp_path))


@pytest.mark.parametrize("mmap", [False, True])
@pytest.mark.parametrize("backend", BACKENDS)
def test_views_share_their_storage_as_the_serialization_document_shows(backend, mmap):
    numbers, evens = tensorplay.load(SEED_VIEWS, backend=backend, mmap=mmap)
    evens *= 2
    assert _as_numpy(numbers).tolist() == [1, 4, 3, 8, 5, 12, 7, 16, 9]


@needs_torch
@pytest.mark.parametrize("mmap", [False, True])
def test_a_small_view_keeps_its_whole_saved_storage(mmap):
    small = tensorplay.load(TORCH_FIXTURES / "seed_small_view.pt", mmap=mmap, backend="torch")
    assert small.tolist() == [1, 2, 3, 4, 5]
    assert small.storage().size() == 999
    clone = tensorplay.load(TORCH_FIXTURES / "seed_small_clone.pt", mmap=mmap, backend="torch")
    assert clone.storage().size() == 5


@needs_torch
# A storage stays where it is made, with the tensor that covers it exactly, unless
# a map_location function may move it.
@pytest.mark.parametrize("mmap", [False, True])
@pytest.mark.parametrize("map_location", [None, "cpu", lambda storage, location: storage])
def test_storages_keep_their_sharing_and_size_as_torch_loads_them(tmp_path, map_location, mmap):
    import torch

    base = torch.arange(24.0).reshape(4, 6)
    wide = torch.arange(10, dtype=torch.int16)
    stored = torch.arange(3.0)
    state = {"base": base, "tied": base, "row": base[1], "transposed": base.t(),
             "stored": stored, "bare": torch.storage.TypedStorage(wrap_storage=stored.untyped_storage(),
                                                                  dtype=torch.float32, _internal=True),
             "exact_transposed": torch.arange(6.0).reshape(2, 3).t(), "prefix": wide[:4], "whole": wide,
             "broadcast": torch.tensor([1.0, 2.0]).expand(3, 2), "empty": torch.empty(0, 5),
             "scalar": torch.tensor(7, dtype=torch.int64), "param": torch.nn.Parameter(torch.ones(2, 2))}
    path = tmp_path / "shared.pt"
    torch.save(state, path)
    ours = tensorplay.load(path, backend="torch", map_location=map_location, mmap=mmap)
    ref = torch.load(path, weights_only=True, map_location=map_location, mmap=mmap)

    def storage_of(value):
        return value._untyped_storage if isinstance(value, torch.storage.TypedStorage) else value.untyped_storage()

    for key, expected in ref.items():
        got, storage = ours[key], storage_of(ours[key])
        assert type(got) is type(expected), key
        assert (storage.nbytes(), bytes(storage)) == (storage_of(expected).nbytes(), bytes(storage_of(expected))), key
        if isinstance(expected, torch.Tensor):
            assert (got.dtype, got.shape, got.stride(), got.storage_offset(), got.requires_grad) == \
                (expected.dtype, expected.shape, expected.stride(), expected.storage_offset(),
                 expected.requires_grad), key
            assert torch.equal(got, expected), key
    for a in ref:
        for b in ref:
            same_storage = storage_of(ref[a]).data_ptr() == storage_of(ref[b]).data_ptr()
            assert (storage_of(ours[a]).data_ptr() == storage_of(ours[b]).data_ptr()) == same_storage, (a, b)
            assert (ours[a] is ours[b]) == (ref[a] is ref[b]), (a, b)


@pytest.mark.parametrize("backend", BACKENDS)
def test_mmap_is_copy_on_write_the_file_never_changes(tmp_path, backend):
    path = tmp_path / "views.pt"
    shutil.copy(SEED_VIEWS, path)
    before = _sha(path)
    numbers, _ = tensorplay.load(path, backend=backend, mmap=True)
    numbers[:] = 0
    assert _as_numpy(numbers).tolist() == [0] * 9
    del numbers
    assert _sha(path) == before
    again, _ = tensorplay.load(path, backend=backend, mmap=True)
    assert _as_numpy(again).tolist() == list(range(1, 10))


@pytest.mark.parametrize("backend", BACKENDS)
def test_eager_loads_own_their_memory(tmp_path, backend):
    path = tmp_path / "views.pt"
    shutil.copy(SEED_VIEWS, path)
    first, _ = tensorplay.load(path, backend=backend)
    second, _ = tensorplay.load(path, backend=backend)
    first[0] = 100
    assert int(second[0]) == 1


def test_numpy_mmap_views_point_into_the_mapping():
    numbers, evens = tensorplay.load(SEED_VIEWS, backend="numpy", mmap=True)
    assert numbers.base is evens.base
    assert views_the_mapped_file(numbers)
    assert numbers.flags.writeable


@pytest.mark.parametrize("backend", BACKENDS)
def test_backend_copies_are_parallel_and_identical(monkeypatch, backend):
    expected = [_as_numpy(t).tolist() for t in tensorplay.load(SEED_VIEWS, backend=backend)]
    monkeypatch.setenv("TENSORPLAY_THREADS", "1")
    assert [_as_numpy(t).tolist() for t in tensorplay.load(SEED_VIEWS, backend=backend)] == expected


def test_default_backend_is_torch_when_installed():
    obj = tensorplay.load(TORCH_FIXTURES / "seed_tensor.pt")
    assert type(obj).__module__ == ("torch" if has_torch() else "numpy")


def test_numpy_backend_names_dtypes_and_devices():
    values = tensorplay.load(TORCH_FIXTURES / "python_values.pt", backend="numpy")
    assert values["dtype"] == "bfloat16"
    assert values["device"] == "cpu"
    assert values["size"] == (2, 3)


def test_numpy_backend_holds_bfloat16_and_float8_with_ml_dtypes():
    import ml_dtypes

    arrays = tensorplay.load(TORCH_FIXTURES / "big_endian.pt", backend="numpy")
    assert arrays["bfloat16"].dtype == np.dtype(ml_dtypes.bfloat16)
    assert arrays["bfloat16"].astype(np.float32).tolist() == [[0.5, -1.25, 3.0], [100.0, -0.0, 7.5]]


def test_numpy_backend_reads_bare_storages_as_flat_arrays():
    storages = tensorplay.load(EXTRA_FIXTURES / "bare_storages.pt", backend="numpy")
    assert storages["typed"].dtype == np.int16 and storages["typed"].tolist() == [0, 1, 2, 3]
    assert storages["untyped"].dtype == np.uint8 and storages["untyped"].tolist() == [0, 1, 2]


@needs_torch
def test_numpy_backend_copies_lazy_conjugates_keeping_shape_and_strides(tmp_path):
    import torch

    base = torch.tensor([1 + 2j, 3 - 4j], dtype=torch.complex64)
    state = {"scalar": base[1].conj(), "broadcast": base.as_strided((3, 2), (0, 1)).conj(),
             "negated": torch._neg_view(torch.tensor([1.5, -2.0])),
             "float8": torch._neg_view(torch.tensor([[1.5, -2.0]]).to(torch.float8_e5m2)).t()}
    torch.save(state, tmp_path / "lazy.pt")
    for mmap in (False, True):
        arrays = tensorplay.load(tmp_path / "lazy.pt", backend="numpy", mmap=mmap)
        assert type(arrays["scalar"]) is np.ndarray and arrays["scalar"].shape == ()
        assert arrays["scalar"].item() == 3 + 4j
        assert arrays["broadcast"].strides == (0, 8)
        assert arrays["broadcast"].tolist() == [[1 - 2j, 3 + 4j]] * 3
        assert arrays["negated"].tolist() == [-1.5, 2.0]
        assert arrays["float8"].astype(np.float32).tolist() == [[-1.5], [2.0]]  # ml_dtypes


@needs_torch
def test_torch_backend_returns_typed_storages_and_tensor_attributes():
    import torch

    storages = tensorplay.load(EXTRA_FIXTURES / "bare_storages.pt", backend="torch")
    assert isinstance(storages["typed"], torch.storage.TypedStorage)
    assert storages["typed"].dtype == torch.int16 and storages["typed"].tolist() == [0, 1, 2, 3]
    assert storages["t"].untyped_storage().data_ptr() == storages["typed"]._untyped_storage.data_ptr()
    t = tensorplay.load(EXTRA_FIXTURES / "tensor_attributes.pt", backend="torch")["t"]
    assert t.note == "hello"


def test_unsafe_globals_are_refused_with_torchs_message_and_a_location():
    with pytest.raises(tensorplay.UnsafeCheckpointError) as info:
        tensorplay.load(TORCH_FIXTURES / "whole_module.pt", backend="numpy")
    message = str(info.value)
    assert "Weights only load failed" in message
    assert "Unsupported global: GLOBAL torch.nn.modules.container.Sequential" in message
    assert "tensorplay.serialization.add_safe_globals" in message
    assert "entry 'whole_module/data.pkl'" in message and "opcode GLOBAL" in message
    assert isinstance(info.value, pickle.UnpicklingError)


def test_exceptions_pickle_round_trip():
    try:
        tensorplay.load(TORCH_FIXTURES / "whole_module.pt", backend="numpy")
    except tensorplay.CheckpointError as e:
        again = pickle.loads(pickle.dumps(e))
        assert type(again) is type(e) and str(again) == str(e)
    assert issubclass(tensorplay.MalformedCheckpointError, tensorplay.CheckpointError)
    assert issubclass(tensorplay.CheckpointError, pickle.UnpicklingError)


@needs_torch
def test_a_broken_archive_is_a_runtime_error_as_in_torch(tmp_path):
    """Code that catches torch's RuntimeError for a corrupt checkpoint keeps working."""
    import torch

    path = tmp_path / "cut.pt"
    path.write_bytes(SEED_VIEWS.read_bytes()[:-30])
    with pytest.raises(RuntimeError) as theirs:
        torch.load(path)
    with pytest.raises(RuntimeError) as ours:
        tensorplay.load(path)
    assert not isinstance(theirs.value, pickle.UnpicklingError)
    assert isinstance(ours.value, tensorplay.MalformedCheckpointError)
    assert issubclass(tensorplay.UnsupportedCheckpointError, RuntimeError)
    assert not issubclass(tensorplay.UnsafeCheckpointError, RuntimeError)  # torch's is an UnpicklingError only


@pytest.mark.parametrize("data", [b"", b"PK\x03\x04garbage", SEED_VIEWS.read_bytes()[:-30]])
def test_corrupt_files_raise_malformed_checkpoint_errors(tmp_path, data):
    path = tmp_path / "bad.pt"
    path.write_bytes(data)
    with pytest.raises(tensorplay.MalformedCheckpointError):
        tensorplay.load(path, backend="numpy")


def test_weights_only_false_is_an_explicit_delegation_to_torch(monkeypatch):
    if has_torch():
        model = tensorplay.load(TORCH_FIXTURES / "whole_module.pt", weights_only=False)
        assert type(model).__name__ == "Sequential"
    from tensorplay import _settings

    monkeypatch.setattr(_settings, "torch_available", lambda: False)
    with pytest.raises(RuntimeError, match="arbitrary code"):
        tensorplay.load(TORCH_FIXTURES / "whole_module.pt", weights_only=False)


@needs_torch
def test_skip_data_reaches_the_unsafe_load_torch_makes(tmp_path):
    import torch

    path = tmp_path / "t.pt"
    # Kept alive, so the unread storage cannot be the freed memory that held it.
    saved = torch.arange(1000.0)
    torch.save(saved, path)
    with tensorplay.serialization.skip_data():
        skipped = tensorplay.load(path, weights_only=False)
    assert skipped.shape == (1000,) and not torch.equal(skipped, saved)


def test_pickle_module_and_unknown_arguments_are_refused():
    with pytest.raises(RuntimeError, match="pickle_module"):
        tensorplay.load(SEED_VIEWS, pickle_module=pickle, weights_only=True)
    with pytest.raises(TypeError, match="errors"):
        tensorplay.load(SEED_VIEWS, errors="strict")


def test_the_cores_load_options_are_typed_and_refuse_what_a_load_cannot_do():
    """``_core.load`` takes its options as frozen, typed objects, checked where they
    are made: a combination the load cannot do (a restore that calls nothing, a
    call that nothing asks for) is never built, and a name where an enum is
    wanted is a TypeError at the boundary."""
    from tensorplay import _core
    from tensorplay._core import DataMode, LoadOptions, MapMode, Placement, Restore

    def restore(storage, location):
        return storage

    for contradictory in (dict(restore=Restore.SAVED), dict(restore=Restore.MAPPED),
                          dict(restore=Restore.STAY, restore_location=restore),
                          dict(data=DataMode.META, restore=Restore.MAPPED, restore_location=restore),
                          dict(data=DataMode.SKIP, fake=print)):
        with pytest.raises(ValueError):
            Placement(**contradictory)
    with pytest.raises(TypeError):
        Placement("read")
    with pytest.raises(TypeError):
        LoadOptions(backend="numpy", map=True)
    with pytest.raises(ValueError, match="unknown backend"):
        LoadOptions(backend="jax")
    with pytest.raises(ValueError, match="differ in length"):
        LoadOptions(backend="numpy", user_names=["collections.OrderedDict"])
    with pytest.raises(ValueError, match="torch backend"):
        LoadOptions(backend="numpy", placement=Placement(DataMode.READ, Restore.MAPPED, restore))

    options = LoadOptions(backend="numpy", map=MapMode.PRIVATE)
    assert (options.map, options.placement.data, options.placement.restore) == (MapMode.PRIVATE, DataMode.READ,
                                                                                Restore.STAY)
    assert {MapMode.PRIVATE: "private"}[options.map] == "private"
    with pytest.raises(AttributeError):
        options.map = MapMode.SHARED
    with pytest.raises(AttributeError):
        options.placement.data = DataMode.SKIP
    numbers, evens = _core.load(str(SEED_VIEWS), options)
    assert views_the_mapped_file(numbers) and numbers.flags.writeable
    expected = tensorplay.load(SEED_VIEWS, backend="numpy")
    assert [numbers.tolist(), evens.tolist()] == [a.tolist() for a in expected]
    copied, _ = _core.load(str(SEED_VIEWS), LoadOptions(backend="numpy"))
    assert not views_the_mapped_file(copied) and copied.tolist() == numbers.tolist()


def test_limits_can_be_raised_or_lowered_per_call():
    assert set(tensorplay.default_limits()) >= {"max_nodes", "max_pickle_bytes", "max_storages", "max_ndim"}
    with pytest.raises(tensorplay.LimitExceededError, match="max_nodes"):
        tensorplay.load(TORCH_FIXTURES / "many_tensors.pt", backend="numpy", limits={"max_nodes": 1000})
    with pytest.raises(ValueError, match="unknown limit"):
        tensorplay.load(SEED_VIEWS, backend="numpy", limits={"max_bogus": 1})


def test_python2_strings_follow_the_encoding_argument(tmp_path):
    import zipfile

    # SHORT_BINSTRING 'h\xc3\xa9' under protocol 2, in an otherwise valid checkpoint.
    path = tmp_path / "py2.pt"
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("archive/data.pkl", b"\x80\x02U\x03h\xc3\xa9q\x00.")
        z.writestr("archive/version", b"3\n")
    assert tensorplay.load(path, backend="numpy") == "hé"
    assert tensorplay.load(path, backend="numpy", encoding="latin1") == "hÃ©"
    assert tensorplay.load(path, backend="numpy", encoding="bytes") == b"h\xc3\xa9"
    with pytest.raises(tensorplay.MalformedCheckpointError):
        tensorplay.load(path, backend="numpy", encoding="ascii")


@needs_torch
@pytest.mark.parametrize("mmap", [False, True])
def test_sparse_indices_are_always_validated(mmap):
    """torch 2.13 loads this file unchecked, and to_dense() then writes out of bounds."""
    with pytest.raises(tensorplay.MalformedCheckpointError, match="sparse"):
        tensorplay.load(EXTRA_FIXTURES / "sparse_coo_out_of_range.pt", backend="torch", mmap=mmap)


@needs_torch
def test_parameters_keep_their_attributes():
    import torch

    p = tensorplay.load(EXTRA_FIXTURES / "parameter_with_state.pt", backend="torch")["p"]
    assert isinstance(p, torch.nn.Parameter) and p.requires_grad and p.tag == "embedding"


def _checkpoint_of(tmp_path, obj, protocol=2):
    """A zip checkpoint whose data.pkl is Python's own pickle of ``obj`` (no tensors)."""
    import zipfile

    path = tmp_path / "obj.pt"
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("archive/data.pkl", pickle.dumps(obj, protocol=protocol))
        z.writestr("archive/version", b"3\n")
    return path


@pytest.mark.parametrize("protocol", [0, 1, 2, 3, 4, 5])
@pytest.mark.parametrize("backend", BACKENDS)
def test_numpy_arrays_and_scalars_load_by_default(tmp_path, backend, protocol):
    value = {"a": np.arange(6, dtype=np.float32).reshape(2, 3), "f": np.asfortranarray(np.eye(2)),
             "be": np.arange(3, dtype=">i4"), "b": np.array([True, False]), "s": np.float64(2.5),
             "e": np.zeros((0, 3), dtype=np.int16)}
    loaded = tensorplay.load(_checkpoint_of(tmp_path, value, protocol), backend=backend)
    for key in ("a", "f", "be", "b", "e"):
        assert loaded[key].dtype == value[key].dtype and np.array_equal(loaded[key], value[key])
        assert loaded[key].flags.writeable
    assert loaded["f"].flags.f_contiguous
    assert type(loaded["s"]) is np.float64 and loaded["s"] == 2.5


@pytest.mark.parametrize("array", [np.array([1, "x"], dtype=object), np.zeros(2, dtype=[("a", "i4"), ("b", "f4")]),
                                   np.array(["ab"])])
def test_object_structured_and_string_arrays_are_refused(tmp_path, array):
    with pytest.raises(tensorplay.UnsafeCheckpointError, match="numpy"):
        tensorplay.load(_checkpoint_of(tmp_path, {"x": array}), backend="numpy")


def test_a_shared_tuple_bomb_as_a_dict_key_is_refused_quickly(tmp_path):
    # t0 = (1, 1); t(i+1) = (t(i), t(i)): 2**40 values to hash for a 100-byte file.
    bomb = b"K\x01K\x01\x86" + b"2\x86" * 40
    path = _checkpoint_of(tmp_path, None)
    import zipfile

    with zipfile.ZipFile(path, "w") as z:
        z.writestr("archive/data.pkl", b"\x80\x02}" + bomb + b"K\x00s.")
        z.writestr("archive/version", b"3\n")
    with pytest.raises(tensorplay.LimitExceededError, match="max_key_values"):
        tensorplay.load(path, backend="numpy")
