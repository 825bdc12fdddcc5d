"""A TensorDict tree read from its ``meta.json`` files into :mod:`.layout`'s
nodes, every field checked, pickle sidecars decoded by the restricted VM."""
from __future__ import annotations

import hashlib
import math
import struct
from dataclasses import dataclass, field
from typing import Any

from .. import _core, _limits, _refusal
from .layout import (
    CLASS_RE,
    JSON_TYPES,
    TYPE_LAZY_STACK,
    TYPE_NON_TENSOR,
    TYPE_NON_TENSOR_STACK,
    TYPE_TENSORDICT,
    Leaf,
    Level,
    NonTensor,
    PickleRefusedError,
    Stack,
    TensorClass,
    as_kind,
    check_extent,
    dims,
    dtype_named,
    format_version,
    limit_error,
    malformed,
    names_for,
    parse_json,
    robust_name,
    unsafe,
    unsupported,
)


@dataclass
class Reader:
    """Walks the saved tree from one folder, reading each level's meta.json and
    checking (and, unless meta_only, mapping) every leaf."""

    meta_only: bool
    robust: bool
    #: True or None decode pickle sidecars (None: tensordict warns, and so do we); False refuses them.
    allow_pickle: bool | None
    limits: dict[str, int]
    user: tuple[list[str], list[Any]] = field(default_factory=lambda: ([], []))
    #: Pickle sidecars stand a tensorplay.Stub in for globals outside the allowlist.
    stub: bool = False
    #: The pickle sidecars decoded.
    decoded: list[str] = field(default_factory=list)

    @property
    def max_bytes(self) -> int:
        return self.limits["max_pickle_bytes"]

    def level(self, folder: Any, depth: int) -> Any:
        """What the folder holds, by the ``_type`` its meta.json names. The folder is
        closed when this returns."""
        try:
            return self.read_level(folder, depth)
        finally:
            folder.close()

    def read_level(self, folder: Any, depth: int) -> Any:
        if depth > self.limits["max_depth"]:
            raise limit_error(folder.where, "max_depth", self.limits["max_depth"])
        data = folder.read("meta.json", self.max_bytes)
        if data is None:
            raise malformed(folder.path("meta.json"), "missing meta.json: not a TensorDict folder")
        meta = parse_json(data, folder.path("meta.json"))
        where = folder.path("meta.json")
        if not isinstance(meta, dict):
            raise malformed(where, "meta.json is not a JSON object")
        format_version(meta, where)
        kind = meta.get("_type")
        klass = meta.get("_class")
        if meta.get("_is_non_tensor") is True or kind == TYPE_NON_TENSOR:
            return self.non_tensor(folder, meta)
        if kind == TYPE_NON_TENSOR_STACK or klass == "tensordict:NonTensorStack":
            return self.non_tensor_stack(folder, meta)
        if kind == TYPE_LAZY_STACK or klass == "tensordict:LazyStackedTensorDict":
            return self.lazy_stack(folder, meta, depth)
        if kind == TYPE_TENSORDICT or klass == "tensordict:TensorDict":
            return self.tensordict(folder, meta, depth)
        match = CLASS_RE.fullmatch(kind) if isinstance(kind, str) else None
        if match is not None and folder.has("_tensordict"):
            return self.tensorclass(folder, match.group(1), depth)
        raise unsupported(where, f"a level of type {kind!r}")

    def tensordict(self, folder: Any, meta: dict, depth: int) -> Level:
        where = folder.path("meta.json")
        batch = dims(meta.get("shape", []), where, "shape", self.limits["max_ndim"])
        names = meta.get("_names")
        if names is not None and not (isinstance(names, list) and len(names) == len(batch)):
            raise malformed(where, f"_names {names!r} does not match the batch size")
        entries: dict[str, Any] = {}
        for key, entry in meta.items():
            if not isinstance(entry, dict):
                continue  # the level's own metadata (shape, device, _type...)
            if "dtype" in entry:
                entries[key] = self.tensor(folder, key, entry)
            elif "type" in entry:
                entries[key] = self.level(self.open_child(folder, key), depth + 1)
            else:
                raise malformed(where, f"entry {key!r} is neither a tensor nor a nested collection")
        return Level(entries, batch, where, names, "cpu" if meta.get("device") == "cpu" else None)

    def open_child(self, folder: Any, key: str) -> Any:
        names = names_for(key, self.robust, folder.path("meta.json"))
        for name in names:
            if folder.has(name):
                return folder.child(name)
        raise malformed(folder.path(names[0]), f"missing folder of key {key!r}")

    def leaf_name(self, folder: Any, key: str, suffix: str) -> str | None:
        names = [n + suffix for n in names_for(key, self.robust, folder.path("meta.json"))]
        return next((n for n in names if folder.has(n)), None)

    def tensor(self, folder: Any, key: str, entry: dict) -> Leaf:
        where = folder.path("meta.json")
        dtype = dtype_named(entry.get("dtype"), where)
        shape = dims(entry.get("shape"), where, f"the shape of {key!r}", self.limits["max_ndim"])
        nested = entry.get("is_nested", False)
        if not isinstance(nested, bool):
            raise malformed(where, f"is_nested of {key!r} is not a bool")
        check_extent(shape, dtype.itemsize, where, f"the shape of {key!r}")
        name = self.leaf_name(folder, key, ".memmap")
        leaf = Leaf(folder.path(name or names_for(key, self.robust, where)[0] + ".memmap"), dtype, shape)
        if nested:
            leaf.nested = self.nested_shapes(folder, key, shape, dtype.itemsize)
            numel = sum(math.prod(s) for s in leaf.nested)
        else:
            numel = math.prod(shape)
        nbytes = numel * dtype.itemsize
        if name is None:
            if nbytes:
                raise malformed(leaf.where, f"missing data file of key {key!r}")
            return leaf  # tensordict writes no file for a tensor without elements
        folder.leaf(leaf, name, nbytes, self.meta_only)
        return leaf

    def nested_shapes(self, folder: Any, key: str, shape: tuple[int, ...], itemsize: int) -> list[tuple[int, ...]]:
        """The component shapes of a jagged tensor: ``<key>.shape.memmap`` holds an
        int64 ``[components, ndim]`` array (the shape meta.json declares)."""
        name = self.leaf_name(folder, key, ".shape.memmap")
        if len(shape) != 2 or shape[1] == 0:
            raise malformed(folder.path("meta.json"), f"nested tensor {key!r} has size shape {list(shape)}")
        if name is None:
            raise malformed(folder.path(f"{robust_name(key)}.shape.memmap"), "missing nested sizes file")
        data = folder.read(name, self.max_bytes)
        count, ndim = shape
        if data is None or len(data) != count * ndim * 8:
            raise malformed(folder.path(name), f"the sizes file does not hold {count}x{ndim} int64")
        flat = struct.unpack(f"<{count * ndim}q", data)
        if any(d < 0 for d in flat):
            raise malformed(folder.path(name), "negative nested tensor size")
        shapes = [tuple(flat[i:i + ndim]) for i in range(0, len(flat), ndim)]
        for component in shapes:
            check_extent(component, itemsize, folder.path(name), "a component shape")
        return shapes

    def lazy_stack(self, folder: Any, meta: dict, depth: int) -> Stack:
        stack_dim = meta.get("stack_dim", 0)
        if type(stack_dim) is not int:
            raise malformed(folder.path("meta.json"), f"stack_dim {stack_dim!r} is not an int")
        members = []
        while folder.has(str(len(members))):
            members.append(self.level(folder.child(str(len(members))), depth + 1))
        return Stack(members, stack_dim)

    def tensorclass(self, folder: Any, class_name: str, depth: int) -> TensorClass:
        inner = self.level(folder.child("_tensordict"), depth + 1)
        if not isinstance(inner, Level):
            raise malformed(folder.path("_tensordict"), "the data of a tensorclass is not a TensorDict")
        return TensorClass(class_name, inner)

    def non_tensor(self, folder: Any, meta: dict) -> NonTensor:
        if "data" in meta:
            return NonTensor(meta["data"])
        typed = self.json_type(folder)
        if typed is not None:
            return NonTensor(typed)
        value = self.sidecar(folder, "other.pickle")
        if not isinstance(value, dict) or "data" not in value:
            raise malformed(folder.path("other.pickle"), "the pickled fields hold no 'data'")
        return NonTensor(value["data"])

    def json_type(self, folder: Any) -> type | None:
        """A container class recorded by name in json_types.json, used only when the
        sha256 recorded there is that of the other.pickle it stands for."""
        data = folder.read("json_types.json", self.max_bytes)
        if data is None:
            return None
        info = parse_json(data, folder.path("json_types.json"))
        if not isinstance(info, dict) or not isinstance(info.get("types"), dict):
            raise malformed(folder.path("json_types.json"), "no 'types' object")
        typed = JSON_TYPES.get(info["types"].get("data"))
        pickled = folder.read("other.pickle", self.max_bytes)
        if typed is None or pickled is None or hashlib.sha256(pickled).hexdigest() != info.get("pickle_sha256"):
            return None
        return typed

    def non_tensor_stack(self, folder: Any, meta: dict) -> NonTensor:
        data = meta.get("data")
        if isinstance(data, list):
            return NonTensor(data, stack=True)
        if data == "pickle.pkl":
            return NonTensor(self.sidecar(folder, "pickle.pkl"), stack=True)
        raise malformed(folder.path("meta.json"), f"a NonTensorStack whose data is {type(data).__name__}")

    def sidecar(self, folder: Any, name: str) -> Any:
        """A pickle sidecar: refused unless allowed, then run by the restricted VM."""
        where = folder.path(name)
        if not folder.has(name):
            raise malformed(where, "missing pickle sidecar")
        if self.allow_pickle is False:
            raise as_kind(PickleRefusedError, unsafe(
                where, "pickled data, and allow_pickle=False. Pass allow_pickle=True to decode it with tensorplay's "
                       "restricted pickle VM (no code runs; only allowlisted globals are built)"))
        data = folder.read(name, self.max_bytes)
        self.decoded.append(where)
        names, objects = self.user
        limits = _limits.merged(None)
        try:
            value = _core.loads(data, name=where, user_names=names, user_objects=objects, limits=limits,
                                stub=self.stub)
        except _core.UnsafeCheckpointError as refused:
            raise _refusal.complete(refused, data, names, limits) from None
        _refusal.refuse_hostile(data, names, limits)
        return value
