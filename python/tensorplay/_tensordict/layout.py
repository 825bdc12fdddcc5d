"""The TensorDict memmap format as tensordict 0.15 writes it (``_format_version``
1): the ``meta.json`` vocabulary, the tree it describes (levels, leaves,
stacks, tensorclasses, non-tensor data), how keys become file names, and the
errors the readers raise."""
from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from typing import Any

from .. import _core, _limits

FORMAT_VERSION = 1


#: Levels of nesting accepted below the prefix by default (the ``max_depth`` limit);
#: deeper trees are refused.
MAX_DEPTH = _limits.default_limits()["max_depth"]


# torch dtype name -> (element size, numpy dtype spec or None, from ml_dtypes): the
# dtypes tensordict memmaps, i.e. what numpy holds, and complex32, which only torch does.
_DTYPES: dict[str, tuple[int, str | None, bool]] = {
    name: (size, spec, ml) for name, (size, spec, ml, _) in _core.dtypes().items()
    if spec is not None or name == "complex32"
}


# Container classes json_types.json may name (tensordict's from_pytree types).
JSON_TYPES: dict[str, type] = {
    t.__name__: t for t in (dict, list, tuple, set, frozenset, str, int, float, bool, bytes, complex)
}


# Characters tensordict's robust key encoding writes as %XX.
_ESCAPED = frozenset('/<>:"|?*\\ \0%') | {chr(i) for i in range(32)} | {chr(127)}


TYPE_TENSORDICT = "<class 'tensordict._td.TensorDict'>"


TYPE_LAZY_STACK = "<class 'tensordict._lazy.LazyStackedTensorDict'>"


TYPE_NON_TENSOR = "<class 'tensordict.tensorclass.NonTensorData'>"


TYPE_NON_TENSOR_STACK = "<class 'tensordict.tensorclass.NonTensorStack'>"


# A class's module and qualname; a class defined in a function has `<locals>` in it.
CLASS_RE = re.compile(r"<class '([A-Za-z_]\w*(?:\.(?:[A-Za-z_]\w*|<locals>))*)'>")


def malformed(where: str, message: str) -> BaseException:
    return _core.error("malformed_archive", f"TensorDict: {message}", entry=where)


def unsafe(where: str, message: str) -> BaseException:
    return _core.error("unsafe_file", f"TensorDict: {message}", entry=where)


def unsupported(where: str, message: str) -> BaseException:
    return _core.error("unsupported", f"TensorDict: {message}", entry=where)


def limit_error(where: str, limit: str, maximum: int) -> BaseException:
    return _core.error("limit", limit, entry=where, limit=limit, maximum=maximum)


class NotAnArchiveError(_core.MalformedCheckpointError, ValueError):
    """A prefix that is a file but not an archive: a ``ValueError``, as tensordict
    documents it, and a malformed checkpoint, as every bad input is."""


class PickleRefusedError(_core.UnsafeCheckpointError, RuntimeError):
    """Pickled data with ``allow_pickle=False``: a ``RuntimeError``, as tensordict
    documents it, and an unsafe checkpoint."""


def as_kind(cls: type, error: BaseException) -> BaseException:
    """``error`` (made by ``_core.error``, with its fields) as the subclass ``cls``."""
    subclassed = cls(*error.args)
    subclassed.__dict__.update(error.__dict__)
    return subclassed


def not_an_archive(path: str) -> BaseException:
    return as_kind(NotAnArchiveError,
               malformed(path, "a file, but not a zip archive (tensordict's archives and .tdz files are zips)"))


def robust_name(key: str) -> str:
    """tensordict's percent-encoding of a key into one file name."""
    if key == "":
        return "%"
    name = "".join(f"%{ord(c):02X}" if c in _ESCAPED else c for c in key)
    if set(name) == {"."}:
        name = "%2E" * len(name)
    return name


def is_component(name: str) -> bool:
    """Whether ``name`` is one path component that stays in its folder."""
    return name not in ("", ".", "..") and "/" not in name and "\0" not in name


def names_for(key: Any, robust: bool, where: str) -> list[str]:
    """The file names (without suffix) a key may be saved under, in the order tried:
    the percent-encoded name, then the key itself when that is a safe name."""
    if not isinstance(key, str):
        raise malformed(where, f"key {key!r} is not a string")
    names = [robust_name(key)] if robust else []
    if is_component(key) and key not in names:
        names.append(key)
    if not names:
        raise unsafe(where, f"key {key!r} is not a safe file name, and robust_key=False reads keys as file "
                             "names: it would reach outside the folder")
    return names


def subpath_keys(subpath: Any) -> tuple[str, ...]:
    """tensordict's forms of a nested key: a "/"-separated str (empty parts dropped,
    so "" is the whole tree) or a tuple of str, nested tuples flattened."""
    if subpath is None:
        return ()
    if isinstance(subpath, str):
        return tuple(part for part in subpath.split("/") if part)
    keys: list[Any] = []
    todo = [subpath] if isinstance(subpath, (tuple, list)) else []
    while todo:
        item = todo.pop()
        if isinstance(item, (tuple, list)):
            todo.extend(reversed(item))
        else:
            keys.append(item)
    if not keys or not all(isinstance(k, str) for k in keys):
        raise ValueError(f"subpath must be a '/'-separated str or a (nested) tuple of str, not {subpath!r}")
    return tuple(keys)


@dataclass
class DType:
    name: str
    itemsize: int
    numpy: str | None
    ml_dtypes: bool


@dataclass
class Leaf:
    where: str
    dtype: DType
    shape: tuple[int, ...]
    #: An object with the buffer protocol holding the bytes at ``offset``; None when
    #: nothing is read (meta, or no element).
    buffer: Any = None
    offset: int = 0
    #: The components' shapes of a jagged nested tensor.
    nested: list[tuple[int, ...]] | None = None


@dataclass
class Level:
    entries: dict[str, Any]
    batch_size: tuple[int, ...]
    #: Its meta.json, for errors.
    where: str = ""
    names: list[Any] | None = None
    #: The device meta.json records, when it is the CPU the leaves are mapped on.
    device: str | None = None


@dataclass
class Stack:
    members: list[Any]
    stack_dim: int = 0


@dataclass
class TensorClass:
    class_name: str
    level: Level


@dataclass
class NonTensor:
    value: Any
    stack: bool = False


def dtype_named(name: Any, where: str) -> DType:
    if not isinstance(name, str) or not name.startswith("torch."):
        raise malformed(where, f"dtype {name!r} is not a torch dtype name")
    spec = _DTYPES.get(name[len("torch."):])
    if spec is None:
        raise unsupported(where, f"unknown dtype {name}")
    return DType(name[len("torch."):], *spec)


def dims(value: Any, where: str, what: str, max_ndim: int) -> tuple[int, ...]:
    if not isinstance(value, list):
        raise malformed(where, f"{what} {value!r} is not a list")
    if len(value) > max_ndim:
        raise limit_error(where, "max_ndim", max_ndim)
    if not all(type(d) is int and d >= 0 for d in value):
        raise malformed(where, f"{what} {value!r} is not a list of non-negative ints")
    return tuple(value)


def check_extent(shape: tuple[int, ...], itemsize: int, where: str, what: str) -> None:
    """Even without elements, every dimension must be addressable: numpy and torch
    refuse (or overflow on) extents past 2**63 bytes."""
    if math.prod(max(d, 1) for d in shape) * itemsize >= 1 << 63:
        raise malformed(where, f"{what} {list(shape)} is too large to address")


def parse_json(data: bytes, where: str) -> Any:
    try:
        return json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as e:
        raise malformed(where, f"not valid JSON: {e}") from None


def format_version(meta: dict, where: str) -> None:
    version = meta.get("_format_version", FORMAT_VERSION)
    if type(version) is not int or version < 1:
        raise malformed(where, f"_format_version {version!r} is not a positive int")
    if version > FORMAT_VERSION:
        raise unsupported(where, f"_format_version {version}: this reader knows version {FORMAT_VERSION}")
