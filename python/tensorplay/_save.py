"""``tensorplay.save``: the checkpoint ``torch.save`` writes, record for record.

The object is pickled with Python's pickler and torch's persistent-id rules (so
torch tensors pickle exactly as ``torch.save`` pickles them). numpy arrays become
tensors, each view sharing its base's storage, so ``torch.load(weights_only=True)``
opens the file as the equivalent tensors, with or without torch installed here.
The archive layout and CRCs come from the Rust core; payloads go from the
tensors' memory to the file, and a path is written to a temporary file in the same
folder, fsynced and renamed, so a failed save never destroys the old file.
"""
from __future__ import annotations

import io
import os
import pickle
import sys
from collections import OrderedDict
from typing import Any

import numpy as np

from . import _core
from ._atomic import replacing
from .utils.serialization import config

DEFAULT_PROTOCOL = 2
_DTYPE_CONFLICT = "Cannot save multiple tensors or storages that view the same data as different types"
LEGACY_MAGIC = 0x1950A86A20F9469CFC6C
LEGACY_PROTOCOL_VERSION = 1001


class _Global:
    """``module.name`` pickled as a GLOBAL without importing the module: how torch's
    names are written when torch is not installed."""

    __slots__ = ("module", "name")

    def __init__(self, module: str, name: str):
        self.module = module
        self.name = name

    def __call__(self, *args: Any) -> Any:
        # Only ever written by name; the pickler requires a callable in a reduce tuple.
        raise TypeError(f"{self.module}.{self.name} is a stand-in for torch, which is not installed")


def _torch():
    return sys.modules.get("torch") or _import_torch()


def _import_torch():
    try:
        import torch
    except ImportError:
        return None
    return torch


def _ref(module: str, name: str) -> Any:
    """The real object when torch is importable, else a stand-in pickled by name."""
    torch = _torch()
    if torch is not None:
        obj = torch
        for part in f"{module}.{name}".split(".")[1:]:
            obj = getattr(obj, part)
        return obj
    return _STAND_INS.setdefault((module, name), _Global(module, name))


# One stand-in per name, so the pickler's memo shares it exactly as it shares torch's objects.
_STAND_INS: dict[tuple[str, str], _Global] = {}


# The dtypes numpy arrays are saved as, by name: those with a legacy storage class
# (`FloatStorage`) are written as torch writes them, the others as untyped storages.
_NUMPY_DTYPES = {name: legacy for name, (_, spec, _, legacy) in _core.dtypes().items() if spec is not None}
_LEGACY = {name: legacy for name, legacy in _NUMPY_DTYPES.items() if legacy is not None}


def _torch_dtype_name(a: np.ndarray) -> str | None:
    name = a.dtype.name
    return name if name in _NUMPY_DTYPES else None


class _StorageRef:
    """A storage the persistent-id hook writes as ``('storage', type, key, location, numel)``."""

    __slots__ = ("storage_type", "key", "location", "numel")

    def __init__(self, storage_type: Any, key: str, location: str, numel: int):
        self.storage_type = storage_type
        self.key = key
        self.location = location
        self.numel = numel


class _Storages:
    """Storages in order of first encounter, keyed by the memory they own."""

    def __init__(self, legacy: bool):
        self.legacy = legacy
        self.keys: dict[Any, str] = {}
        self.buffers: list[Any] = []
        self.dtypes: dict[Any, Any] = {}
        self.legacy_items: list[tuple[str, Any, int]] = []

    def add(self, identity: Any, buffer_fn, dtype: Any, element_size: int) -> str:
        known = self.keys.get(identity)
        if known is not None:
            if self.dtypes.get(identity) != dtype:
                raise RuntimeError(_DTYPE_CONFLICT)
            return known
        key = str(identity[1]) if self.legacy else str(len(self.keys))
        self.keys[identity] = key
        self.dtypes[identity] = dtype
        buffer = buffer_fn()
        self.buffers.append(buffer)
        self.legacy_items.append((key, buffer, element_size))
        return key


def _memory_owner(a: np.ndarray) -> tuple[Any, int, int] | None:
    """The array whose memory ``a`` views, where that memory starts, and its size:
    the last ndarray in ``a``'s chain of bases, which is what a storage was when
    tensorplay loaded it. Over a foreign buffer (``np.memmap``, ``np.frombuffer``)
    that is the array made over it, not the whole buffer, which may hold much else.
    None when that memory is not one block (the array is then written as a copy)."""
    owner = a
    while True:
        base = owner.base
        if isinstance(base, np.ndarray):
            owner = base
        elif isinstance(getattr(base, "base", None), np.ndarray) and hasattr(base, "__array_interface__"):
            owner = base.base  # numpy's stride tricks wrap the array they view in a DummyArray
        else:
            break
    if not (owner.flags.c_contiguous or owner.flags.f_contiguous):
        return None
    return owner, owner.__array_interface__["data"][0], owner.nbytes


def _views_memory(a: np.ndarray, start: int, nbytes: int) -> bool:
    """Whether every element of ``a`` lies in the memory at ``start``, whole and
    aligned: what a tensor over that memory as its storage can express.
    (``as_strided`` can point anywhere.)"""
    item = a.itemsize
    ptr = a.__array_interface__["data"][0]
    if not (a.dtype.isnative and all(s >= 0 and s % item == 0 for s in a.strides)
            and (ptr - start) % item == 0 and nbytes % item == 0):
        return False
    if a.size == 0:
        return start <= ptr <= start + nbytes
    end = ptr + sum((n - 1) * s for n, s in zip(a.shape, a.strides)) + item
    return start <= ptr and end <= start + nbytes


class _PicklerMixin:
    """torch's persistent-id rules, plus numpy arrays written as tensors."""

    def _init_storages(self, legacy: bool) -> None:
        self.storages = _Storages(legacy)
        self.legacy = legacy

    def persistent_id(self, obj: Any):
        if isinstance(obj, _StorageRef):
            base = ("storage", obj.storage_type, obj.key, obj.location, obj.numel)
            return base + (None,) if self.legacy else base
        torch = sys.modules.get("torch")
        if torch is not None and (isinstance(obj, torch.storage.TypedStorage) or torch.is_storage(obj)):
            return self._torch_storage(torch, obj)
        return None

    def _torch_storage(self, torch: Any, obj: Any):
        if isinstance(obj, torch.storage.TypedStorage):
            storage = obj._untyped_storage
            dtype = obj.dtype
            storage_type = getattr(torch, obj._pickle_storage_type())
            numel = obj._size()
        else:
            storage = obj
            dtype = torch.uint8
            storage_type = torch.serialization.normalize_storage_type(type(obj))
            numel = storage.nbytes()
        location = str(obj._fake_device) if getattr(obj, "_fake_device", None) is not None else \
            torch.serialization.location_tag(storage)
        allocated = str(storage.device) != "meta" and storage.data_ptr() != 0
        identity = ("torch", storage._cdata)
        if allocated:
            known = self.storages.dtypes.get(("ptr", storage.data_ptr()))
            if known is not None and known != dtype:
                raise RuntimeError(_DTYPE_CONFLICT)
            self.storages.dtypes.setdefault(("ptr", storage.data_ptr()), dtype)
        key = self.storages.add(identity, lambda: _torch_storage_bytes(torch, storage), dtype,
                                torch._utils._element_size(dtype))
        if self.legacy:
            return ("storage", storage_type, key, location, numel, None)
        return ("storage", storage_type, key, location, numel)

    def reducer_override(self, obj: Any):
        if type(obj) in (np.ndarray, np.memmap):
            name = _torch_dtype_name(obj)
            if name is not None:
                return self._array_as_tensor(obj, name)
        return NotImplemented

    def _array_as_tensor(self, a: np.ndarray, name: str):
        item = a.itemsize
        # A copy of an empty array loses its strides; they address nothing, so keep them.
        empty_strides = a.strides if a.size == 0 and all(s >= 0 and s % item == 0 for s in a.strides) else None
        memory = _memory_owner(a)
        shares = memory is not None and _views_memory(a, memory[1], memory[2])
        if shares and self.storages.dtypes.get(("np", id(memory[0])), name) != name:
            shares = False  # another dtype's view of the same memory: write this one on its own
        if not shares:
            a = np.array(a, dtype=a.dtype.newbyteorder("="), order="C", copy=True)
            memory = a, a.__array_interface__["data"][0], a.nbytes
        owner, start, nbytes = memory
        ptr = a.__array_interface__["data"][0]
        identity = ("np", id(owner))
        # The buffer (a view of `owner`) keeps it alive, so `id(owner)` stays unique.
        typed = name in _LEGACY
        # An untyped storage (the dtypes without a legacy class) counts bytes.
        key = self.storages.add(identity, lambda: _memory_bytes(owner), name, item if typed else 1)
        storage_type = _ref("torch", _LEGACY[name]) if typed else _ref("torch.storage", "UntypedStorage")
        ref = _StorageRef(storage_type, key, "cpu", nbytes // item if typed else nbytes)
        offset = (ptr - start) // item
        stride = tuple(s // item for s in (empty_strides or a.strides))
        if typed:
            return _ref("torch._utils", "_rebuild_tensor_v2"), (ref, offset, a.shape, stride, False, OrderedDict())
        dtype = _ref("torch", name)
        return _ref("torch._utils", "_rebuild_tensor_v3"), (ref, offset, a.shape, stride, False, OrderedDict(), dtype)


def _memory_bytes(owner: np.ndarray) -> np.ndarray:
    # `_memory_owner` checked it is one contiguous block: ravel in memory order is a view.
    return owner.ravel(order="K").view(np.uint8)


def _torch_storage_bytes(torch: Any, storage: Any) -> Any:
    """A uint8 numpy view of a storage's bytes, copied to the CPU first if needed."""
    if storage.device.type == "meta":
        return np.zeros(0, dtype=np.uint8)
    if storage.device.type != "cpu":
        pinned = bool(config.save.use_pinned_memory_for_d2h)
        cpu = torch.empty(storage.nbytes(), dtype=torch.uint8, pin_memory=pinned)
        cpu.untyped_storage().copy_(storage)
        storage = cpu.untyped_storage()
    if storage.nbytes() == 0:
        return np.zeros(0, dtype=np.uint8)
    view = torch.empty((0,), dtype=torch.uint8).set_(storage, 0, (storage.nbytes(),), (1,))
    return view.numpy()


class _FastPickler(_PicklerMixin, pickle.Pickler):
    """The C pickler, used when torch's own objects can be referenced by name."""

    def __init__(self, file: Any, protocol: int, legacy: bool):
        super().__init__(file, protocol=protocol)
        self._init_storages(legacy)


class _NamePickler(_PicklerMixin, pickle._Pickler):  # type: ignore[name-defined]
    """The pure-Python pickler, which can write torch's names without torch."""

    def __init__(self, file: Any, protocol: int, legacy: bool):
        super().__init__(file, protocol=protocol)
        self._init_storages(legacy)

    def save_named_global(self, obj: _Global) -> None:
        self.write(pickle.GLOBAL + f"{obj.module}\n{obj.name}\n".encode())
        self.memoize(obj)

    dispatch = dict(pickle._Pickler.dispatch)  # type: ignore[attr-defined]
    dispatch[_Global] = save_named_global


def _pickle(obj: Any, protocol: int, legacy: bool, pickle_module: Any = None):
    buf = io.BytesIO()
    if pickle_module is not None and pickle_module is not pickle:
        base = pickle_module.Pickler
        cls = type("_ModulePickler", (_PicklerMixin, base), {})
        pickler = cls(buf, protocol=protocol)
        pickler._init_storages(legacy)
    elif _torch() is not None:
        pickler = _FastPickler(buf, protocol, legacy)
    else:
        pickler = _NamePickler(buf, protocol, legacy)
    pickler.dump(obj)
    return buf.getvalue(), pickler.storages


def _root_name(f: Any) -> str:
    """torch's archive folder: the file name without its last extension, or
    ``archive`` for a stream or a non-ASCII path."""
    if not isinstance(f, (str, os.PathLike)):
        return "archive"
    path = os.fspath(f)
    if not path.isascii():
        return "archive"
    base = os.path.basename(path.replace("\\", "/"))
    stem = base.rsplit(".", 1)[0] if "." in base else base
    return stem or "archive"


def write_segments(f: Any, segments: list, buffers: list) -> None:
    """Stream a planned archive: header bytes, payloads from their own memory, holes."""
    seekable = getattr(f, "seekable", lambda: False)()
    for segment in segments:
        if isinstance(segment, bytes):
            f.write(segment)
        elif isinstance(segment, int):
            f.write(memoryview(buffers[segment]).cast("B"))
        else:
            _, n = segment
            if seekable:
                f.seek(n, os.SEEK_CUR)
            else:
                zeros = bytes(min(n, 1 << 20))
                while n > 0:
                    f.write(zeros[: min(n, len(zeros))])
                    n -= min(n, len(zeros))


def _write_legacy(f: Any, pickled: bytes, storages: _Storages, protocol: int) -> None:
    def dump(value: Any) -> None:
        f.write(pickle.dumps(value, protocol=protocol))

    dump(LEGACY_MAGIC)
    dump(LEGACY_PROTOCOL_VERSION)
    dump({"protocol_version": LEGACY_PROTOCOL_VERSION, "little_endian": sys.byteorder == "little",
          "type_sizes": {"short": 2, "int": 4, "long": 4}})
    f.write(pickled)
    items = sorted(storages.legacy_items, key=lambda item: item[0])
    dump([key for key, _, _ in items])
    for _, buffer, element_size in items:
        nbytes = memoryview(buffer).nbytes
        f.write((nbytes // element_size).to_bytes(8, "little"))
        f.write(memoryview(buffer).cast("B"))


def save(obj: Any, f: Any, pickle_module: Any = None, pickle_protocol: int = DEFAULT_PROTOCOL,
         _use_new_zipfile_serialization: bool = True, _disable_byteorder_record: bool = False) -> None:
    """Save ``obj`` as ``torch.save`` does. See ``tensorplay.serialization.save``."""
    from . import _settings

    skipping = _settings.skipping()
    if not isinstance(f, (str, os.PathLike)) and not callable(getattr(f, "write", None)):
        raise AttributeError("expected 'f' to be string, path, or a file-like object with a 'write' attribute")
    if skipping is not None and not _use_new_zipfile_serialization:
        raise RuntimeError("Cannot use skip_data=True with _use_new_zipfile_serialization=False")
    torch = sys.modules.get("torch")
    if skipping is not None and torch is not None:
        with torch.serialization.skip_data(materialize_fake_tensors=skipping.materialize_fake_tensors):
            pickled, storages = _pickle(obj, pickle_protocol, not _use_new_zipfile_serialization, pickle_module)
    else:
        pickled, storages = _pickle(obj, pickle_protocol, not _use_new_zipfile_serialization, pickle_module)

    if _use_new_zipfile_serialization:
        segments = _core.plan_archive(
            _root_name(f), pickled, storages.buffers,
            alignment=int(config.save.storage_alignment),
            compute_crc32=bool(config.save.compute_crc32),
            byteorder_last=_disable_byteorder_record,
            reserved=skipping is not None,
        )

        def write(out: Any) -> None:
            write_segments(out, segments, storages.buffers)
    else:
        def write(out: Any) -> None:
            _write_legacy(out, pickled, storages, pickle_protocol)

    if isinstance(f, (str, os.PathLike)):
        with replacing(f) as tmp, open(tmp, "wb", buffering=0) as out:
            write(out)
    else:
        write(f)
        flush = getattr(f, "flush", None)
        if callable(flush):
            flush()
