"""Random object trees, written by real torch.save in each format it has, load in
tensorplay as torch.load reads them back, scan clean, and save back through
tensorplay.save byte for byte as torch.save writes them.

The fixtures pin each case once; this walks the space between them: any nesting of
the containers the weights-only loader allows, strided views (overlapping,
broadcast, empty, conjugated) of storages shared across the tree, Parameters, and
the scalar kinds, through pickle protocols 1 to 5 and both file formats. What the
numpy backend loads saves back without torch and loads the same again. Then the
same with allowlisted objects in the trees, and with numpy arrays saved by
tensorplay alone."""
from __future__ import annotations

import pathlib
import tempfile
from collections import Counter, OrderedDict
from dataclasses import dataclass

import fixture_classes
import numpy as np
import pytest
import tensorplay
from describe import describe
from expectations import check_numpy_result, check_torch_result, numpy_cannot_hold
from hypothesis import given, settings
from hypothesis import strategies as st
from tensorplay import scanner
from tensorplay.serialization import get_unsafe_globals_in_checkpoint, safe_globals, skip_data

torch = pytest.importorskip("torch")

DTYPES = ["float64", "float32", "float16", "bfloat16", "int64", "int32", "int16", "int8", "uint8", "bool",
          "complex128", "complex64", "uint16", "uint32", "uint64", "float8_e4m3fn", "float8_e5m2"]

# What torch can resolve a negative view of (it has no neg for unsigned or float8).
NEGATABLE = {getattr(torch, name) for name in ("float64", "float32", "float16", "bfloat16", "int64", "int32", "int16",
                                               "int8", "complex128", "complex64")}


@dataclass(frozen=True)
class StorageSpec:
    dtype: str
    numel: int
    seed: int


@dataclass(frozen=True)
class TensorSpec:
    """A view of one of the example's storages; `storage` picks it modulo their count."""
    storage: int
    size: tuple[int, ...]
    stride: tuple[int, ...]
    offset: int
    parameter: bool
    requires_grad: bool
    conj: bool
    neg: bool


_tensor_specs = st.builds(
    TensorSpec,
    storage=st.integers(0, 7),
    size=st.lists(st.integers(0, 4), max_size=3).map(tuple),
    stride=st.lists(st.integers(0, 5), min_size=3, max_size=3).map(tuple),
    offset=st.integers(0, 30),
    parameter=st.booleans(),
    requires_grad=st.booleans(),
    conj=st.booleans(),
    neg=st.booleans(),
)

_keys = st.one_of(st.text(max_size=6), st.integers(-(2**70), 2**70), st.tuples(st.integers(0, 9), st.text(max_size=3)))

_plain = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.integers(-(2**200), 2**200),
    st.floats(),
    st.complex_numbers(),
    st.text(max_size=12),
    st.binary(max_size=12),
    st.binary(max_size=6).map(bytearray),
    st.lists(st.integers(0, 1000), max_size=4).map(lambda dims: ("size", tuple(dims))),
    st.sampled_from(DTYPES).map(lambda name: ("dtype", name)),
    st.sampled_from(["cpu", "cuda:1", "meta"]).map(lambda name: ("device", name)),
)
# Half the leaves are tensors (a nested one_of would be flattened into 13 equal branches).
_leaves = st.booleans().flatmap(lambda tensor: _tensor_specs if tensor else _plain)


def _containers(children):
    return st.one_of(
        st.lists(children, max_size=5),
        st.lists(children, max_size=5).map(tuple),
        st.dictionaries(_keys, children, max_size=5),
        st.dictionaries(_keys, children, max_size=5).map(OrderedDict),
        st.dictionaries(st.text(max_size=4), st.integers(-5, 5), max_size=4).map(Counter),
        st.sets(st.one_of(st.integers(), st.text(max_size=4)), max_size=4),
    )


_trees = st.recursive(_leaves, _containers, max_leaves=30)
_storages = st.lists(st.builds(StorageSpec, st.sampled_from(DTYPES), st.integers(0, 24), st.integers(0, 2**32 - 1)),
                     min_size=1, max_size=4)


@dataclass(frozen=True)
class ObjectSpec:
    """One of fixture_classes' kinds of allowlistable object, around subtrees."""
    kind: str
    parts: tuple


def _objects(children):
    """Every way the weights-only unpickler builds a class: NEWOBJ with a BUILD of
    __dict__ (Point, a dataclass), through __setstate__, a namedtuple's NEWOBJ
    arguments, and an enum's REDUCE."""
    pair = st.tuples(children, children)
    return st.one_of(
        pair.map(lambda p: ObjectSpec("Point", p)),
        pair.map(lambda p: ObjectSpec("Pair", p)),
        pair.map(lambda p: ObjectSpec("TrainConfig", p)),
        children.map(lambda c: ObjectSpec("WithSetState", (c,))),
        st.sampled_from(["RED", "GREEN"]).map(lambda name: ObjectSpec("Color", (name,))),
    )


_object_trees = st.recursive(_leaves, lambda children: st.one_of(_containers(children), _objects(children)),
                             max_leaves=30)


def _classes(tree, out):
    """The fixture classes a spec tree uses, by their global names."""
    if isinstance(tree, ObjectSpec):
        out.add(f"fixture_classes.{tree.kind}")
        for part in tree.parts:
            _classes(part, out)
    elif isinstance(tree, (Counter, set)):
        pass
    elif isinstance(tree, dict):
        for value in tree.values():
            _classes(value, out)
    elif isinstance(tree, (list, tuple)):
        for value in tree:
            _classes(value, out)
    return out


def _storage(spec: StorageSpec):
    dtype = getattr(torch, spec.dtype)
    generator = torch.Generator().manual_seed(spec.seed)
    if dtype == torch.bool:
        return torch.randint(0, 2, (spec.numel,), generator=generator, dtype=torch.bool)
    itemsize = torch.empty((), dtype=dtype).element_size()
    raw = torch.randint(0, 256, (spec.numel * itemsize,), generator=generator, dtype=torch.uint8)
    return raw.view(dtype)  # every bit pattern: NaN payloads, subnormals, negative zeros


def _view(spec: TensorSpec, bases: list):
    base = bases[spec.storage % len(bases)]
    size, stride = spec.size, spec.stride[:len(spec.size)]
    offset = min(spec.offset, base.numel())
    last = offset + sum((n - 1) * s for n, s in zip(size, stride)) if all(size) else offset
    if all(size) and last >= base.numel():
        size, stride = (base.numel() - offset,), (1,)
    view = base.as_strided(size, stride, offset)
    if spec.conj and view.is_complex():
        view = view.conj()
    if spec.neg and view.dtype in NEGATABLE:
        view = torch._neg_view(view)
    if view.is_conj() or view.is_neg():
        return view
    grad = spec.requires_grad and (view.is_floating_point() or view.is_complex())
    if spec.parameter:
        return torch.nn.Parameter(view, requires_grad=grad)
    return view.detach().requires_grad_() if grad else view


def _build(tree, bases):
    if isinstance(tree, TensorSpec):
        return _view(tree, bases)
    if isinstance(tree, ArraySpec):
        return _array(tree, bases)
    if isinstance(tree, ObjectSpec):
        if tree.kind == "Color":
            return fixture_classes.Color[tree.parts[0]]
        parts = [_build(part, bases) for part in tree.parts]
        if tree.kind == "TrainConfig":
            return fixture_classes.TrainConfig(lr=parts[0], name=parts[1])
        return getattr(fixture_classes, tree.kind)(*parts)
    if isinstance(tree, tuple) and len(tree) == 2 and tree[0] in ("size", "dtype", "device"):
        kind, value = tree
        return {"size": torch.Size, "dtype": lambda name: getattr(torch, name), "device": torch.device}[kind](value)
    if isinstance(tree, (Counter, set)):
        return tree
    if isinstance(tree, OrderedDict):
        return OrderedDict((k, _build(v, bases)) for k, v in tree.items())
    if isinstance(tree, dict):
        return {k: _build(v, bases) for k, v in tree.items()}
    if isinstance(tree, (list, tuple)):
        return type(tree)(_build(v, bases) for v in tree)
    return tree


def _leaves_of(obj, kind, out=None):
    """The tree's leaves of one type (tensors, arrays) depth first, in the order
    describe() walks them."""
    out = [] if out is None else out
    if isinstance(obj, kind):
        out.append(obj)
    elif isinstance(obj, dict):
        for value in obj.values():
            _leaves_of(value, kind, out)
    elif isinstance(obj, (list, tuple)):
        for value in obj:
            _leaves_of(value, kind, out)
    return out


def _check_inspection(path, obj):
    """inspect() reports every tensor as saved, and where its storage's bytes are."""
    data = path.read_bytes()
    infos = [info for _, info in tensorplay.inspect(path).tensors()]
    tensors = _leaves_of(obj, torch.Tensor)
    assert len(infos) == len(tensors)
    keys = {}
    for info, t in zip(infos, tensors):
        assert (info.dtype, info.shape, info.stride, info.storage_offset) == \
            (str(t.dtype).removeprefix("torch."), tuple(t.shape), t.stride(), t.storage_offset())
        assert (info.requires_grad, info.parameter) == (t.requires_grad, isinstance(t, torch.nn.Parameter))
        storage = t.untyped_storage()
        assert info.nbytes == storage.nbytes()
        assert data[info.offset:info.offset + info.nbytes] == bytes(storage)
        if info.nbytes:  # the same key exactly for the same storage
            assert keys.setdefault(info.storage, storage.data_ptr()) == storage.data_ptr()
    assert len(set(keys.values())) == len(keys)


def _without_data(description):
    if isinstance(description, dict):
        return {k: _without_data(v) for k, v in description.items() if k not in ("sha256", "values")}
    if isinstance(description, list):
        return [_without_data(v) for v in description]
    return description


def _torch_reads(path, expected) -> bool:
    """Whether torch.load gives back what torch.save wrote. It does not for two
    kinds of tensor it writes through `_rebuild_tensor_v3` (dtypes newer than the
    legacy storage classes): in the legacy format it finds no dtype on the
    UntypedStorage, and one that requires grad fails in `set_`."""
    try:
        loaded = torch.load(path, weights_only=False)
    except (AttributeError, RuntimeError):
        return False
    check_torch_result(loaded, expected)
    return True


@settings(max_examples=200, deadline=None)
@given(tree=_trees, storages=_storages, protocol=st.integers(1, 5), zipped=st.booleans())
def test_torch_saved_trees_load_scan_and_save_as_torch_does(tree, storages, protocol, zipped):
    obj = _build(tree, [_storage(s) for s in storages])
    options = {"pickle_protocol": protocol, "_use_new_zipfile_serialization": zipped}
    with tempfile.TemporaryDirectory() as folder:
        theirs, ours = pathlib.Path(folder, "a", "ckpt.pt"), pathlib.Path(folder, "b", "ckpt.pt")
        theirs.parent.mkdir()
        ours.parent.mkdir()
        torch.save(obj, theirs, **options)
        expected = describe(obj)
        torch_reads_it = _torch_reads(theirs, expected)

        for mmap in (False, True):
            check_torch_result(tensorplay.load(theirs, backend="torch", mmap=mmap), expected)
            if not numpy_cannot_hold(expected):
                arrays = tensorplay.load(theirs, backend="numpy", mmap=mmap)
                check_numpy_result(arrays, expected)
                tensorplay.save(arrays, pathlib.Path(folder, "arrays.pt"), **options)
                check_numpy_result(tensorplay.load(pathlib.Path(folder, "arrays.pt"), backend="numpy"), expected)
        _check_inspection(theirs, obj)
        with skip_data():  # everything but the bytes
            assert _without_data(describe(tensorplay.load(theirs, backend="torch"))) == _without_data(expected)
        assert scanner.scan(theirs).verdict == "clean"
        if zipped:
            assert get_unsafe_globals_in_checkpoint(theirs) == []

        tensorplay.save(obj, ours, **options)
        if zipped:
            assert ours.read_bytes() == theirs.read_bytes()
        else:  # legacy files name storages by address: compare what they load as
            check_torch_result(tensorplay.load(ours, backend="torch"), expected)
            if torch_reads_it:
                check_torch_result(torch.load(ours, weights_only=False), expected)


@settings(max_examples=100, deadline=None)
@given(tree=_object_trees, storages=_storages, protocol=st.integers(2, 5), zipped=st.booleans())
def test_allowlisted_objects_are_refused_reported_and_then_built_as_torch_builds_them(tree, storages, protocol, zipped):
    """Protocols 2 and up: 0 and 1 build objects through copyreg._reconstructor,
    which torch does not allowlist."""
    obj = _build(tree, [_storage(s) for s in storages])
    classes = _classes(tree, set())
    allowlist = [getattr(fixture_classes, name.rsplit(".", 1)[1]) for name in sorted(classes)]
    with tempfile.TemporaryDirectory() as folder:
        path = pathlib.Path(folder, "ckpt.pt")
        torch.save(obj, path, pickle_protocol=protocol, _use_new_zipfile_serialization=zipped)
        expected = describe(obj)

        assert set(get_unsafe_globals_in_checkpoint(path)) == classes
        if zipped and protocol == 2:  # torch's own scanner reads only these
            # It also names builtins.bytes (how protocol 2 writes b''), which its
            # loader refuses and tensorplay allows.
            assert set(torch.serialization.get_unsafe_globals_in_checkpoint(path)) - {"builtins.bytes"} == classes
        if classes:
            with pytest.raises(tensorplay.UnsafeCheckpointError):
                tensorplay.load(path, backend="torch")
            assert scanner.scan(path).verdict == "unsafe"

        with safe_globals(allowlist):
            for mmap in (False, True):
                check_torch_result(tensorplay.load(path, backend="torch", mmap=mmap), expected)
                if not numpy_cannot_hold(expected):
                    check_numpy_result(tensorplay.load(path, backend="numpy", mmap=mmap), expected)
        weights_only_reads = protocol == 2 and b"\nbytes\n" not in path.read_bytes()
        if weights_only_reads and _torch_reads(path, expected):
            with torch.serialization.safe_globals(allowlist):
                check_torch_result(torch.load(path, weights_only=True), expected)


# --- numpy arrays saved without torch ----------------------------------------------------

NO_LEGACY_CLASS = {"uint16", "uint32", "uint64", "float8_e4m3fn", "float8_e5m2"}
NUMPY_DTYPES = ["float64", "float32", "float16", "int64", "int32", "int16", "int8", "uint8", "uint16", "uint32",
                "uint64", "bool", "complex128", "complex64", "bfloat16", "float8_e4m3fn", "float8_e5m2"]


@dataclass(frozen=True)
class ArraySpec:
    """An array made from one of the example's bases by a few numpy view operations."""
    base: int
    ops: tuple


@dataclass(frozen=True)
class BaseSpec:
    dtype: str
    big_endian: bool
    shape: tuple
    fortran: bool
    seed: int


_ops = st.lists(st.one_of(
    st.just(("T",)),
    st.tuples(st.just("step"), st.integers(-3, 3).filter(bool), st.integers(0, 4)),
    st.tuples(st.just("broadcast"), st.integers(0, 3)),
    st.just(("real",)),
    st.just(("flat",)),
), max_size=3).map(tuple)
_array_specs = st.builds(ArraySpec, st.integers(0, 7), _ops)
_array_trees = st.recursive(st.booleans().flatmap(lambda array: _array_specs if array else _plain),
                            _containers, max_leaves=20)
_bases = st.lists(st.builds(BaseSpec, st.sampled_from(NUMPY_DTYPES), st.booleans(),
                            st.lists(st.integers(0, 4), min_size=1, max_size=3).map(tuple), st.booleans(),
                            st.integers(0, 2**32 - 1)), min_size=1, max_size=3)


def _numpy_dtype(name: str, big_endian: bool):
    import ml_dtypes

    dtype = np.dtype(getattr(ml_dtypes, name)) if hasattr(ml_dtypes, name) and name not in np.sctypeDict \
        else np.dtype(name)
    return dtype.newbyteorder(">") if big_endian and dtype.itemsize > 1 and dtype.kind != "V" else dtype


def _base(spec: BaseSpec) -> np.ndarray:
    dtype = _numpy_dtype(spec.dtype, spec.big_endian)
    count = int(np.prod(spec.shape))
    rng = np.random.default_rng(spec.seed)
    if dtype.kind == "b":
        flat = rng.integers(0, 2, count).astype(bool)
    else:
        flat = np.frombuffer(rng.bytes(count * dtype.itemsize), dtype=dtype).copy()
    return flat.reshape(spec.shape, order="F" if spec.fortran else "C")


def _array(spec: ArraySpec, bases: list) -> np.ndarray:
    a = bases[spec.base % len(bases)]
    for op in spec.ops:
        if op[0] == "T":
            a = a.T
        elif op[0] == "step" and a.ndim:
            a = a[op[2]::op[1]] if op[1] > 0 else a[::op[1]]
        elif op[0] == "broadcast":
            a = np.broadcast_to(a, (op[1],) + a.shape)
        elif op[0] == "real" and a.dtype.kind == "c":
            a = a.real
        elif op[0] == "flat" and a.flags.c_contiguous:
            a = a.reshape(-1)
    return a


def _native_bytes(a: np.ndarray) -> bytes:
    c = np.ascontiguousarray(a)
    return (c.byteswap().view(c.dtype.newbyteorder("=")) if not c.dtype.isnative else c).tobytes()


@settings(max_examples=100, deadline=None)
@given(tree=_array_trees, bases=_bases, protocol=st.integers(2, 5), zipped=st.booleans())
def test_numpy_trees_save_without_torch_and_load_the_same_in_tensorplay_and_torch(tree, bases, protocol, zipped):
    """What tool authors write with numpy alone: any view (reversed, strided,
    transposed, broadcast, a complex array's real part), any byte order or memory
    order, saved by tensorplay.save, loads with the same values and no sharing
    the arrays did not have, in tensorplay and in torch."""
    obj = _build(tree, [_base(b) for b in bases])
    saved = _leaves_of(obj, np.ndarray)
    with tempfile.TemporaryDirectory() as folder:
        path = pathlib.Path(folder, "arrays.pt")
        tensorplay.save(obj, path, pickle_protocol=protocol, _use_new_zipfile_serialization=zipped)
        loaded = _leaves_of(tensorplay.load(path, backend="numpy"), np.ndarray)
        assert len(loaded) == len(saved)
        for before, after in zip(saved, loaded):
            assert after.shape == before.shape and after.dtype == before.dtype.newbyteorder("=")
            assert _native_bytes(after) == _native_bytes(before)
        for i, a in enumerate(loaded):
            for j in range(i):
                if a.size and loaded[j].size and np.shares_memory(a, loaded[j]):
                    assert np.shares_memory(saved[i], saved[j])
        legacy_untyped = not zipped and any(a.dtype.name in NO_LEGACY_CLASS for a in saved)
        if not legacy_untyped:  # torch cannot read those back (fixtures/README.md)
            tensors = _leaves_of(torch.load(path, weights_only=False), torch.Tensor)
            assert len(tensors) == len(saved)
            for t, before in zip(tensors, saved):
                assert tuple(t.shape) == before.shape
                dense = torch.empty(t.shape, dtype=t.dtype).copy_(t)  # contiguous() may keep a stride
                raw = dense.view(torch.uint8).numpy().tobytes() if t.numel() else b""
                assert raw == _native_bytes(before)
