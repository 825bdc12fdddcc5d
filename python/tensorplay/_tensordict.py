"""TensorDict memmap folders and ``.tdz`` archives, loaded without tensordict and
without running code from them.

The layout (tensordict 0.15, ``_format_version`` 1): every level of the tree has a
``meta.json`` (its ``_type``, batch ``shape``, ``device`` and one entry per key);
a tensor is a ``<key>.memmap`` file of raw C-order little-endian bytes next to it
(plus ``<key>.shape.memmap`` for a jagged nested tensor); a nested tensordict, a
tensorclass (data under ``_tensordict/``), a lazy stack (members ``0/``, ``1/``…)
and non-tensor data (in its ``meta.json``, a ``json_types.json`` or a pickle
sidecar) are sub-folders. An archive is a zip of the same tree.

How this reader differs from tensordict's own ``load_memmap``, for safety:

- pickle sidecars are refused unless ``allow_pickle=True``, and then decoded by
  tensorplay's restricted VM with the safe-globals allowlist, never by pickle;
- no symbolic link inside the folder is ever followed, and only regular files
  are opened;
- a leaf file shorter than ``meta.json`` declares is an error, and one longer is
  read as its declared prefix, as tensordict does (tensordict's own compatibility
  fixtures have leaves a byte or two longer); a file is never grown, truncated or
  written, and an archive's entry must have the declared size exactly;
- a key becomes a file name only through its percent-encoding (or, for a key
  that is already a safe name, itself): no key can name a path outside the folder.
"""
from __future__ import annotations

import errno
import hashlib
import json
import math
import mmap
import os
import re
import stat
import struct
from dataclasses import dataclass, field
from typing import Any, Literal

from . import _allowlist, _core, _limits, _refusal, _strides, _stub
from ._types import TensorSpec

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
_JSON_TYPES: dict[str, type] = {
    t.__name__: t for t in (dict, list, tuple, set, frozenset, str, int, float, bool, bytes, complex)
}

# Characters tensordict's robust key encoding writes as %XX.
_ESCAPED = frozenset('/<>:"|?*\\ \0%') | {chr(i) for i in range(32)} | {chr(127)}

_TYPE_TENSORDICT = "<class 'tensordict._td.TensorDict'>"
_TYPE_LAZY_STACK = "<class 'tensordict._lazy.LazyStackedTensorDict'>"
_TYPE_NON_TENSOR = "<class 'tensordict.tensorclass.NonTensorData'>"
_TYPE_NON_TENSOR_STACK = "<class 'tensordict.tensorclass.NonTensorStack'>"
# A class's module and qualname; a class defined in a function has `<locals>` in it.
_CLASS_RE = re.compile(r"<class '([A-Za-z_]\w*(?:\.(?:[A-Za-z_]\w*|<locals>))*)'>")


# --- errors -------------------------------------------------------------------------

def _malformed(where: str, message: str) -> BaseException:
    return _core.error("malformed_archive", f"TensorDict: {message}", entry=where)


def _unsafe(where: str, message: str) -> BaseException:
    return _core.error("unsafe_file", f"TensorDict: {message}", entry=where)


def _unsupported(where: str, message: str) -> BaseException:
    return _core.error("unsupported", f"TensorDict: {message}", entry=where)


def _limit(where: str, limit: str, maximum: int) -> BaseException:
    return _core.error("limit", limit, entry=where, limit=limit, maximum=maximum)


class NotAnArchiveError(_core.MalformedCheckpointError, ValueError):
    """A prefix that is a file but not an archive: a ``ValueError``, as tensordict
    documents it, and a malformed checkpoint, as every bad input is."""


class PickleRefusedError(_core.UnsafeCheckpointError, RuntimeError):
    """Pickled data with ``allow_pickle=False``: a ``RuntimeError``, as tensordict
    documents it, and an unsafe checkpoint."""


def _as(cls: type, error: BaseException) -> BaseException:
    """``error`` (made by ``_core.error``, with its fields) as the subclass ``cls``."""
    subclassed = cls(*error.args)
    subclassed.__dict__.update(error.__dict__)
    return subclassed


def _not_an_archive(path: str) -> BaseException:
    return _as(NotAnArchiveError,
               _malformed(path, "a file, but not a zip archive (tensordict's archives and .tdz files are zips)"))


# --- keys and file names --------------------------------------------------------------

def _robust_name(key: str) -> str:
    """tensordict's percent-encoding of a key into one file name."""
    if key == "":
        return "%"
    name = "".join(f"%{ord(c):02X}" if c in _ESCAPED else c for c in key)
    if set(name) == {"."}:
        name = "%2E" * len(name)
    return name


def _is_component(name: str) -> bool:
    """Whether ``name`` is one path component that stays in its folder."""
    return name not in ("", ".", "..") and "/" not in name and "\0" not in name


def _names_for(key: Any, robust: bool, where: str) -> list[str]:
    """The file names (without suffix) a key may be saved under, in the order tried:
    the percent-encoded name, then the key itself when that is a safe name."""
    if not isinstance(key, str):
        raise _malformed(where, f"key {key!r} is not a string")
    names = [_robust_name(key)] if robust else []
    if _is_component(key) and key not in names:
        names.append(key)
    if not names:
        raise _unsafe(where, f"key {key!r} is not a safe file name, and robust_key=False reads keys as file "
                             "names: it would reach outside the folder")
    return names


def _subpath_keys(subpath: Any) -> tuple[str, ...]:
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


# --- what was found in the files --------------------------------------------------------

@dataclass
class _DType:
    name: str
    itemsize: int
    numpy: str | None
    ml_dtypes: bool


@dataclass
class _Leaf:
    where: str
    dtype: _DType
    shape: tuple[int, ...]
    #: An object with the buffer protocol holding the bytes at ``offset``; None when
    #: nothing is read (meta, or no element).
    buffer: Any = None
    offset: int = 0
    #: The components' shapes of a jagged nested tensor.
    nested: list[tuple[int, ...]] | None = None


@dataclass
class _Level:
    entries: dict[str, Any]
    batch_size: tuple[int, ...]
    #: Its meta.json, for errors.
    where: str = ""
    names: list[Any] | None = None
    #: The device meta.json records, when it is the CPU the leaves are mapped on.
    device: str | None = None


@dataclass
class _Stack:
    members: list[Any]
    stack_dim: int = 0


@dataclass
class _TensorClass:
    class_name: str
    level: _Level


@dataclass
class _NonTensor:
    value: Any
    stack: bool = False


def _dtype(name: Any, where: str) -> _DType:
    if not isinstance(name, str) or not name.startswith("torch."):
        raise _malformed(where, f"dtype {name!r} is not a torch dtype name")
    spec = _DTYPES.get(name[len("torch."):])
    if spec is None:
        raise _unsupported(where, f"unknown dtype {name}")
    return _DType(name[len("torch."):], *spec)


def _dims(value: Any, where: str, what: str, max_ndim: int) -> tuple[int, ...]:
    if not isinstance(value, list):
        raise _malformed(where, f"{what} {value!r} is not a list")
    if len(value) > max_ndim:
        raise _limit(where, "max_ndim", max_ndim)
    if not all(type(d) is int and d >= 0 for d in value):
        raise _malformed(where, f"{what} {value!r} is not a list of non-negative ints")
    return tuple(value)


def _check_extent(shape: tuple[int, ...], itemsize: int, where: str, what: str) -> None:
    """Even without elements, every dimension must be addressable: numpy and torch
    refuse (or overflow on) extents past 2**63 bytes."""
    if math.prod(max(d, 1) for d in shape) * itemsize >= 1 << 63:
        raise _malformed(where, f"{what} {list(shape)} is too large to address")


def _json(data: bytes, where: str) -> Any:
    try:
        return json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as e:
        raise _malformed(where, f"not valid JSON: {e}") from None


def _format_version(meta: dict, where: str) -> None:
    version = meta.get("_format_version", FORMAT_VERSION)
    if type(version) is not int or version < 1:
        raise _malformed(where, f"_format_version {version!r} is not a positive int")
    if version > FORMAT_VERSION:
        raise _unsupported(where, f"_format_version {version}: this reader knows version {FORMAT_VERSION}")


# --- folders ------------------------------------------------------------------------

_O_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_O_DIRECTORY = getattr(os, "O_DIRECTORY", 0)
_O_EXTRA = getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0) | getattr(os, "O_CLOEXEC", 0)


class _Folder:
    """One directory of the saved tree, opened relative to its parent's descriptor:
    no component below the prefix is ever a symbolic link, and only regular files
    are opened."""

    def __init__(self, fd: int, where: str, mode: str | None):
        self.fd = fd
        self.where = where
        #: "r", "r+", or None: each file shared when the process can write it.
        self.mode = mode

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def path(self, name: str) -> str:
        return f"{self.where}/{name}"

    def _lstat(self, name: str) -> os.stat_result | None:
        if not _is_component(name):
            raise _unsafe(self.path(name), "not a single file name")
        try:
            return os.stat(name, dir_fd=self.fd, follow_symlinks=False)
        except FileNotFoundError:
            return None
        except OSError as e:
            raise _malformed(self.path(name), f"cannot stat: {e}") from None

    def _check_kind(self, name: str, st: os.stat_result, want_dir: bool) -> None:
        if stat.S_ISLNK(st.st_mode):
            raise _unsafe(self.path(name), "a symbolic link; links are never followed")
        if want_dir and not stat.S_ISDIR(st.st_mode):
            raise _malformed(self.path(name), "not a directory")
        if not want_dir and not stat.S_ISREG(st.st_mode):
            raise _unsafe(self.path(name), "not a regular file")

    def has(self, name: str) -> bool:
        return self._lstat(name) is not None

    def child(self, name: str) -> _Folder:
        st = self._lstat(name)
        if st is None:
            raise _malformed(self.path(name), "missing folder")
        self._check_kind(name, st, want_dir=True)
        flags = os.O_RDONLY | _O_DIRECTORY | _O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
        try:
            fd = os.open(name, flags, dir_fd=self.fd)
        except OSError as e:
            raise self._open_error(name, e) from None
        return _Folder(fd, self.path(name), self.mode)

    def open_file(self, name: str, write: bool = False) -> tuple[int, int]:
        """A descriptor of the regular file ``name`` and its size."""
        st = self._lstat(name)
        if st is None:
            raise _malformed(self.path(name), "missing file")
        self._check_kind(name, st, want_dir=False)
        flags = (os.O_RDWR if write else os.O_RDONLY) | _O_NOFOLLOW | _O_EXTRA
        try:
            fd = os.open(name, flags, dir_fd=self.fd)
        except OSError as e:
            if write and e.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
                raise PermissionError(e.errno, f"cannot open for writing: {e.strerror}", self.path(name)) from None
            raise self._open_error(name, e) from None
        opened = os.fstat(fd)
        if not stat.S_ISREG(opened.st_mode) or (opened.st_dev, opened.st_ino) != (st.st_dev, st.st_ino):
            os.close(fd)
            raise _unsafe(self.path(name), "the file changed while it was being opened")
        return fd, opened.st_size

    def _open_error(self, name: str, e: OSError) -> Exception:
        if e.errno == errno.ELOOP:
            return _unsafe(self.path(name), "a symbolic link; links are never followed")
        return _malformed(self.path(name), f"cannot open: {e}")

    def read(self, name: str, limit: int) -> bytes | None:
        """The whole small file ``name`` (meta.json, a sidecar), or None if absent."""
        if not self.has(name):
            return None
        fd, size = self.open_file(name)
        try:
            if size > limit:
                raise _limit(self.path(name), "max_pickle_bytes", limit)
            chunks, got = [], 0
            while got < size:
                chunk = os.pread(fd, size - got, got)
                if not chunk:
                    break
                chunks.append(chunk)
                got += len(chunk)
            return b"".join(chunks)
        finally:
            os.close(fd)

    def leaf(self, leaf: _Leaf, name: str, nbytes: int, meta_only: bool) -> None:
        """Check the leaf file's size and map it: shared with "r+" (and, with mode
        None, when the process can write the file), else copy-on-write."""
        shared = not meta_only and self.mode != "r"
        try:
            fd, size = self.open_file(name, write=shared)
        except PermissionError:
            if self.mode == "r+":
                raise
            shared = False
            fd, size = self.open_file(name)
        try:
            if size < nbytes:
                raise _malformed(self.path(name), f"the file has {size} bytes, meta.json declares {nbytes}")
            if meta_only or nbytes == 0:
                return
            leaf.buffer = mmap.mmap(fd, nbytes, access=mmap.ACCESS_WRITE if shared else mmap.ACCESS_COPY)
        finally:
            os.close(fd)


# --- archives ---------------------------------------------------------------------------

class _Archive:
    """A zip archive of the tree: one mapping of the whole file, its strict index,
    and the entries still to be decompressed (all at once, in parallel)."""

    def __init__(self, path: str, fd: int, writable: bool, limits: dict[str, int] | None):
        self.where = path
        self.fd = fd
        self.writable = writable
        self.limits = limits
        head = os.pread(fd, 4, 0)
        if head not in (b"PK\x03\x04", b"PK\x05\x06"):
            raise _not_an_archive(path)
        self.entries: dict[str, dict] = {}
        self.dirs: set[str] = {""}
        for entry in _core.zip_entries(fd, limits=limits):
            try:
                name = entry["name"].decode("utf-8")
            except UnicodeDecodeError:
                continue  # no key encodes to it
            self.entries[name] = entry
            parts = name.split("/")
            for i in range(1, len(parts)):
                self.dirs.add("/".join(parts[:i]) + "/")
        access = mmap.ACCESS_WRITE if writable else mmap.ACCESS_COPY
        self.map = mmap.mmap(fd, 0, access=access)
        self.pending: list[tuple[_Leaf, tuple]] = []

    def request(self, entry: dict, name: str) -> tuple:
        return (entry["data_offset"], entry["compressed_size"], entry["size"], entry["method"], entry["flags"],
                f"{self.where}!{name}")

    def inflate(self, requests: list[tuple], threads: int) -> list[Any]:
        return _core.inflate_entries(self.fd, requests, max(threads, 1), limits=_limits.merged(None))

    def finish(self, threads: int) -> None:
        """Decompress (or copy) every pending leaf, in parallel with the GIL released."""
        if not self.pending:
            return
        buffers = self.inflate([request for _, request in self.pending], threads)
        for (leaf, _), buffer in zip(self.pending, buffers, strict=True):
            leaf.buffer, leaf.offset = buffer, 0
        self.pending.clear()


class _ArchiveFolder:
    """A folder inside an archive: the entries under ``prefix``."""

    def __init__(self, archive: _Archive, prefix: str):
        self.archive = archive
        self.prefix = prefix
        self.where = f"{archive.where}!{prefix.rstrip('/')}" if prefix else archive.where
        self.writable = archive.writable

    def path(self, name: str) -> str:
        return f"{self.archive.where}!{self.prefix}{name}"

    def has(self, name: str) -> bool:
        return self.prefix + name in self.archive.entries or f"{self.prefix}{name}/" in self.archive.dirs

    def child(self, name: str) -> _ArchiveFolder:
        if f"{self.prefix}{name}/" not in self.archive.dirs:
            raise _malformed(self.path(name), "missing folder")
        return _ArchiveFolder(self.archive, f"{self.prefix}{name}/")

    def close(self) -> None:
        pass

    def read(self, name: str, limit: int) -> bytes | None:
        entry = self.archive.entries.get(self.prefix + name)
        if entry is None:
            return None
        if entry["size"] > limit:
            raise _limit(self.path(name), "max_pickle_bytes", limit)
        if entry["method"] == 0:
            start = entry["data_offset"]
            return bytes(self.archive.map[start:start + entry["size"]])
        (data,) = self.archive.inflate([self.archive.request(entry, self.prefix + name)], 1)
        return data.tobytes()

    def leaf(self, leaf: _Leaf, name: str, nbytes: int, meta_only: bool) -> None:
        """Check the entry's size; view it in the mapping when it is stored and aligned,
        else queue it to be decompressed (or copied)."""
        entry = self.archive.entries.get(self.prefix + name)
        if entry is None:
            raise _malformed(self.path(name), "missing entry")
        if entry["size"] != nbytes:
            raise _malformed(self.path(name), f"the entry has {entry['size']} bytes, meta.json declares {nbytes}")
        in_place = entry["method"] == 0 and entry["data_offset"] % min(leaf.dtype.itemsize, 16) == 0
        if self.writable and not in_place:
            why = "compressed" if entry["method"] else "not aligned for its dtype"
            raise _unsupported(self.path(name), f"mode='r+' needs stored, aligned entries; this one is {why}")
        if meta_only or nbytes == 0:
            return
        if in_place:
            leaf.buffer, leaf.offset = self.archive.map, entry["data_offset"]
        else:
            self.archive.pending.append((leaf, self.archive.request(entry, self.prefix + name)))


# --- reading the tree -------------------------------------------------------------------

@dataclass
class _Reader:
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
            raise _limit(folder.where, "max_depth", self.limits["max_depth"])
        data = folder.read("meta.json", self.max_bytes)
        if data is None:
            raise _malformed(folder.path("meta.json"), "missing meta.json: not a TensorDict folder")
        meta = _json(data, folder.path("meta.json"))
        where = folder.path("meta.json")
        if not isinstance(meta, dict):
            raise _malformed(where, "meta.json is not a JSON object")
        _format_version(meta, where)
        kind = meta.get("_type")
        klass = meta.get("_class")
        if meta.get("_is_non_tensor") is True or kind == _TYPE_NON_TENSOR:
            return self.non_tensor(folder, meta)
        if kind == _TYPE_NON_TENSOR_STACK or klass == "tensordict:NonTensorStack":
            return self.non_tensor_stack(folder, meta)
        if kind == _TYPE_LAZY_STACK or klass == "tensordict:LazyStackedTensorDict":
            return self.lazy_stack(folder, meta, depth)
        if kind == _TYPE_TENSORDICT or klass == "tensordict:TensorDict":
            return self.tensordict(folder, meta, depth)
        match = _CLASS_RE.fullmatch(kind) if isinstance(kind, str) else None
        if match is not None and folder.has("_tensordict"):
            return self.tensorclass(folder, match.group(1), depth)
        raise _unsupported(where, f"a level of type {kind!r}")

    def tensordict(self, folder: Any, meta: dict, depth: int) -> _Level:
        where = folder.path("meta.json")
        batch = _dims(meta.get("shape", []), where, "shape", self.limits["max_ndim"])
        names = meta.get("_names")
        if names is not None and not (isinstance(names, list) and len(names) == len(batch)):
            raise _malformed(where, f"_names {names!r} does not match the batch size")
        entries: dict[str, Any] = {}
        for key, entry in meta.items():
            if not isinstance(entry, dict):
                continue  # the level's own metadata (shape, device, _type...)
            if "dtype" in entry:
                entries[key] = self.tensor(folder, key, entry)
            elif "type" in entry:
                entries[key] = self.level(self.open_child(folder, key), depth + 1)
            else:
                raise _malformed(where, f"entry {key!r} is neither a tensor nor a nested collection")
        return _Level(entries, batch, where, names, "cpu" if meta.get("device") == "cpu" else None)

    def open_child(self, folder: Any, key: str) -> Any:
        names = _names_for(key, self.robust, folder.path("meta.json"))
        for name in names:
            if folder.has(name):
                return folder.child(name)
        raise _malformed(folder.path(names[0]), f"missing folder of key {key!r}")

    def leaf_name(self, folder: Any, key: str, suffix: str) -> str | None:
        names = [n + suffix for n in _names_for(key, self.robust, folder.path("meta.json"))]
        return next((n for n in names if folder.has(n)), None)

    def tensor(self, folder: Any, key: str, entry: dict) -> _Leaf:
        where = folder.path("meta.json")
        dtype = _dtype(entry.get("dtype"), where)
        shape = _dims(entry.get("shape"), where, f"the shape of {key!r}", self.limits["max_ndim"])
        nested = entry.get("is_nested", False)
        if not isinstance(nested, bool):
            raise _malformed(where, f"is_nested of {key!r} is not a bool")
        _check_extent(shape, dtype.itemsize, where, f"the shape of {key!r}")
        name = self.leaf_name(folder, key, ".memmap")
        leaf = _Leaf(folder.path(name or _names_for(key, self.robust, where)[0] + ".memmap"), dtype, shape)
        if nested:
            leaf.nested = self.nested_shapes(folder, key, shape, dtype.itemsize)
            numel = sum(math.prod(s) for s in leaf.nested)
        else:
            numel = math.prod(shape)
        nbytes = numel * dtype.itemsize
        if name is None:
            if nbytes:
                raise _malformed(leaf.where, f"missing data file of key {key!r}")
            return leaf  # tensordict writes no file for a tensor without elements
        folder.leaf(leaf, name, nbytes, self.meta_only)
        return leaf

    def nested_shapes(self, folder: Any, key: str, shape: tuple[int, ...], itemsize: int) -> list[tuple[int, ...]]:
        """The component shapes of a jagged tensor: ``<key>.shape.memmap`` holds an
        int64 ``[components, ndim]`` array (the shape meta.json declares)."""
        name = self.leaf_name(folder, key, ".shape.memmap")
        if len(shape) != 2 or shape[1] == 0:
            raise _malformed(folder.path("meta.json"), f"nested tensor {key!r} has size shape {list(shape)}")
        if name is None:
            raise _malformed(folder.path(f"{_robust_name(key)}.shape.memmap"), "missing nested sizes file")
        data = folder.read(name, self.max_bytes)
        count, ndim = shape
        if data is None or len(data) != count * ndim * 8:
            raise _malformed(folder.path(name), f"the sizes file does not hold {count}x{ndim} int64")
        flat = struct.unpack(f"<{count * ndim}q", data)
        if any(d < 0 for d in flat):
            raise _malformed(folder.path(name), "negative nested tensor size")
        shapes = [tuple(flat[i:i + ndim]) for i in range(0, len(flat), ndim)]
        for component in shapes:
            _check_extent(component, itemsize, folder.path(name), "a component shape")
        return shapes

    def lazy_stack(self, folder: Any, meta: dict, depth: int) -> _Stack:
        stack_dim = meta.get("stack_dim", 0)
        if type(stack_dim) is not int:
            raise _malformed(folder.path("meta.json"), f"stack_dim {stack_dim!r} is not an int")
        members = []
        while folder.has(str(len(members))):
            members.append(self.level(folder.child(str(len(members))), depth + 1))
        return _Stack(members, stack_dim)

    def tensorclass(self, folder: Any, class_name: str, depth: int) -> _TensorClass:
        inner = self.level(folder.child("_tensordict"), depth + 1)
        if not isinstance(inner, _Level):
            raise _malformed(folder.path("_tensordict"), "the data of a tensorclass is not a TensorDict")
        return _TensorClass(class_name, inner)

    def non_tensor(self, folder: Any, meta: dict) -> _NonTensor:
        if "data" in meta:
            return _NonTensor(meta["data"])
        typed = self.json_type(folder)
        if typed is not None:
            return _NonTensor(typed)
        value = self.sidecar(folder, "other.pickle")
        if not isinstance(value, dict) or "data" not in value:
            raise _malformed(folder.path("other.pickle"), "the pickled fields hold no 'data'")
        return _NonTensor(value["data"])

    def json_type(self, folder: Any) -> type | None:
        """A container class recorded by name in json_types.json, used only when the
        sha256 recorded there is that of the other.pickle it stands for."""
        data = folder.read("json_types.json", self.max_bytes)
        if data is None:
            return None
        info = _json(data, folder.path("json_types.json"))
        if not isinstance(info, dict) or not isinstance(info.get("types"), dict):
            raise _malformed(folder.path("json_types.json"), "no 'types' object")
        typed = _JSON_TYPES.get(info["types"].get("data"))
        pickled = folder.read("other.pickle", self.max_bytes)
        if typed is None or pickled is None or hashlib.sha256(pickled).hexdigest() != info.get("pickle_sha256"):
            return None
        return typed

    def non_tensor_stack(self, folder: Any, meta: dict) -> _NonTensor:
        data = meta.get("data")
        if isinstance(data, list):
            return _NonTensor(data, stack=True)
        if data == "pickle.pkl":
            return _NonTensor(self.sidecar(folder, "pickle.pkl"), stack=True)
        raise _malformed(folder.path("meta.json"), f"a NonTensorStack whose data is {type(data).__name__}")

    def sidecar(self, folder: Any, name: str) -> Any:
        """A pickle sidecar: refused unless allowed, then run by the restricted VM."""
        where = folder.path(name)
        if not folder.has(name):
            raise _malformed(where, "missing pickle sidecar")
        if self.allow_pickle is False:
            raise _as(PickleRefusedError, _unsafe(
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


# --- building the result ------------------------------------------------------------------

def _numpy_dtype(dtype: _DType, where: str) -> Any:
    import numpy as np

    if dtype.numpy is None:
        raise _unsupported(where, f"numpy has no dtype for torch.{dtype.name}; load with backend='torch'")
    if dtype.ml_dtypes:
        import ml_dtypes

        return np.dtype(getattr(ml_dtypes, dtype.numpy))
    return np.dtype(dtype.numpy)


@dataclass
class _Builder:
    """Turns what the reader found into numpy arrays, torch tensors, meta records,
    plain containers or tensordict objects."""

    backend: str
    meta_only: bool
    device: Any
    as_tensordict: bool
    user: tuple[list[str], list[Any]]
    #: Under a torch FakeTensorMode: fake tensors, and no file read.
    fake: bool = False
    non_blocking: bool = False
    #: The device each TensorDict gets: the one asked for ("meta" included), else
    #: the one its meta.json records.
    td_device: Any = None

    def build(self, node: Any) -> Any:
        if isinstance(node, _Leaf):
            return self.leaf(node)
        if isinstance(node, _Level):
            return self.level(node)
        if isinstance(node, _Stack):
            members = [self.build(m) for m in node.members]
            if self.as_tensordict:
                from tensordict import LazyStackedTensorDict

                return LazyStackedTensorDict(*members, stack_dim=node.stack_dim)
            return members
        if isinstance(node, _TensorClass):
            return self.tensorclass(node)
        return node.value

    def level(self, level: _Level) -> Any:
        built = {key: self.build(value) for key, value in level.entries.items()}
        if not self.as_tensordict:
            return built
        from tensordict import TensorDict

        kwargs = {"names": level.names} if level.names is not None else {}
        device = self.td_device if self.td_device is not None else level.device
        try:
            out = TensorDict({}, batch_size=level.batch_size, device=device, **kwargs)
            for key, value in built.items():
                entry = level.entries[key]
                if isinstance(entry, _NonTensor) and entry.stack:
                    from tensordict import NonTensorStack

                    out.set(key, NonTensorStack.from_list(value))
                elif isinstance(entry, _NonTensor):
                    out.set_non_tensor(key, value)
                else:
                    out.set(key, value)
        except (RuntimeError, ValueError, TypeError, IndexError) as e:
            # A batch size, names or shapes in meta.json that do not fit together.
            raise _malformed(level.where, f"tensordict cannot hold what meta.json describes: {e}") from e
        return out

    def tensorclass(self, node: _TensorClass) -> Any:
        """An allowlisted class is built from the fields; any other stays a dict."""
        data = self.level(node.level)
        names, objects = self.user
        if node.class_name not in names:
            return data
        cls = objects[names.index(node.class_name)]
        try:
            if self.as_tensordict and hasattr(cls, "_from_tensordict"):
                return cls._from_tensordict(data)
            return cls(**data)
        except Exception as e:  # noqa: BLE001 - the file's fields did not fit the class
            raise _malformed(node.class_name, f"cannot build the allowlisted class from its fields: {e}") from e

    def leaf(self, leaf: _Leaf) -> Any:
        if leaf.nested is not None:
            return self.nested(leaf)
        return self.tensor(leaf, leaf.shape, leaf.offset)

    def tensor(self, leaf: _Leaf, shape: tuple[int, ...], offset: int) -> Any:
        numel = math.prod(shape)
        if self.backend == "numpy":
            import numpy as np

            if self.meta_only:
                return TensorSpec(leaf.dtype.name, shape, _strides.contiguous(shape))
            dtype = _numpy_dtype(leaf.dtype, leaf.where)
            if numel == 0:
                return np.empty(shape, dtype=dtype)
            return np.frombuffer(leaf.buffer, dtype=dtype, count=numel, offset=offset).reshape(shape)
        import torch

        dtype = getattr(torch, leaf.dtype.name)
        if self.meta_only:
            return torch.empty(shape, dtype=dtype) if self.fake else torch.empty(shape, dtype=dtype, device="meta")
        if numel == 0:
            tensor = torch.empty(shape, dtype=dtype)
        else:
            tensor = torch.frombuffer(leaf.buffer, dtype=dtype, count=numel, offset=offset).view(shape)
        return tensor if self.device is None else tensor.to(self.device, non_blocking=self.non_blocking)

    def nested(self, leaf: _Leaf) -> Any:
        """A jagged tensor: a nested tensor viewing the file (torch), else a list of
        its components (numpy, and meta records)."""
        offsets, at = [], leaf.offset
        for shape in leaf.nested:
            offsets.append(at)
            at += math.prod(shape) * leaf.dtype.itemsize
        if self.backend == "numpy" or self.meta_only or leaf.buffer is None:
            parts = [self.tensor(leaf, s, o) for s, o in zip(leaf.nested, offsets, strict=True)]
            if self.backend == "numpy" or self.meta_only:
                return parts
            import torch

            return torch.nested.as_nested_tensor(parts, layout=torch.strided)
        import torch

        size = leaf.dtype.itemsize
        buffer = torch.frombuffer(leaf.buffer, dtype=getattr(torch, leaf.dtype.name),
                                  count=(at - leaf.offset) // size, offset=leaf.offset)
        sizes = torch.tensor(leaf.nested, dtype=torch.int64)
        strides = torch.tensor([_strides.contiguous(s) for s in leaf.nested], dtype=torch.int64)
        starts = torch.tensor([(o - leaf.offset) // size for o in offsets], dtype=torch.int64)
        tensor = torch._nested_view_from_buffer(buffer, sizes, strides, starts)
        return tensor if self.device is None else tensor.to(self.device, non_blocking=self.non_blocking)


# --- the entry point ------------------------------------------------------------------------

def _resolve_device(device: Any, backend: str) -> tuple[bool, Any]:
    """(meta_only, device to copy leaves to, or None to keep them mapped)."""
    if device is None:
        return False, None
    if isinstance(device, int) and not isinstance(device, bool):
        if backend == "numpy":
            raise ValueError(f"the numpy backend loads onto the CPU only; device={device!r} needs backend='torch'")
        import torch

        device = torch.device(device)  # a CUDA index, as torch reads one
    name = str(device)
    if name == "meta":
        return True, None
    if name == "cpu":
        return False, None
    if backend == "numpy":
        raise ValueError(f"the numpy backend loads onto the CPU only; device={device!r} needs backend='torch'")
    return False, device


def _open_prefix(prefix: str, writable: bool) -> tuple[int, bool]:
    """A descriptor of the prefix (which may itself be a link: the caller named it),
    and whether it is a folder."""
    st = os.stat(prefix)
    if stat.S_ISDIR(st.st_mode):
        return os.open(prefix, os.O_RDONLY | _O_DIRECTORY), True
    if not stat.S_ISREG(st.st_mode):
        raise _malformed(prefix, "neither a folder nor a zip archive")
    return os.open(prefix, (os.O_RDWR if writable else os.O_RDONLY) | _O_EXTRA), False


def _descend(folder: Any, keys: tuple[str, ...], robust: bool, subpath: Any) -> Any:
    """The folder of the nested key ``keys``, entering a tensorclass's ``_tensordict``
    where the key is one of its fields. Only folders on the way are looked at; each
    is closed once left."""
    for key in keys:
        names = _names_for(key, robust, folder.where)
        if not any(folder.has(n) for n in names) and folder.has("_tensordict"):
            inner = folder.child("_tensordict")
            folder.close()
            folder = inner
        found = next((n for n in names if folder.has(n)), None)
        if found is None:
            folder.close()
            raise ValueError(f"subpath {subpath!r} names no saved tensordict in {folder.where}")
        try:
            child = folder.child(found)
        finally:
            folder.close()
        folder = child
    return folder


def load_memmap(
    prefix: str | os.PathLike[str],
    device: Any = None,
    non_blocking: bool = False,
    *,
    out: Any = None,
    robust_key: bool | None = True,
    subpath: Any = None,
    mode: Literal["r", "r+"] | None = None,
    num_threads: int = 0,
    allow_pickle: bool | None = None,
    backend: Literal["torch", "numpy"] | None = None,
    as_tensordict: bool = False,
    unknown_globals: Literal["error", "stub"] = "error",
) -> Any:
    """Load a TensorDict memmap folder or archive (``memmap()``, ``save()``, ``.tdz``)
    without tensordict and without running code from it. The parameters up to
    ``allow_pickle`` are ``TensorDictBase.load_memmap``'s.

    Args:
        prefix: the folder, or the zip / ``.tdz`` archive.
        device: None (or ``"cpu"``) keeps every leaf a lazy view of its file;
            ``"meta"`` reads no payload byte and gives ``TensorSpec`` records (numpy)
            or meta tensors (torch); another device (a ``torch.device``, a string, or
            an int: a CUDA index) copies the leaves there (torch). Under a torch
            ``FakeTensorMode`` the leaves are fake tensors, and no payload is read.
        non_blocking: passed to the copies to ``device``.
        out: a tensordict to load into (torch, with tensordict installed): its
            nested tensordicts are reused, its leaves replaced, its keys absent from
            the saved data removed; a device on ``out`` is used, another ``device``
            raises ``ValueError``. With the numpy backend, a nested dict, filled the
            same way. ``out`` is returned.
        robust_key: True (or None) reads tensordict's percent-encoded file names, and
            the plain names of keys that are safe file names; False the plain names only.
        subpath: ``"a/b"`` or ``("a", "b")``: load only that nested tensordict (or a
            tensorclass's entry, as ``obj.get(key)`` reaches it); only its files are opened.
        mode: ``"r"``: private copy-on-write mappings, writes never reach the files.
            ``"r+"``: shared mappings, in-place writes reach the files (a file the
            process cannot write raises ``PermissionError``; refused for compressed
            or unaligned archive entries). None (the default, as in tensordict): an
            archive as ``"r"``, each file of a folder as ``"r+"`` when the process
            can write it and as ``"r"`` otherwise.
        num_threads: threads that decompress the compressed entries of an archive
            (in Rust, with the GIL released); 0 decompresses them one after another.
        allow_pickle: pickle sidecars (non-tensor data tensordict pickled) are
            decoded by tensorplay's restricted VM with the safe-globals allowlist,
            never by pickle: with True, or with None and a ``FutureWarning`` (as
            tensordict warns: its default becomes False in 0.16). False refuses
            them (``UnsafeCheckpointError``, a ``RuntimeError``).
        backend: ``"numpy"``, ``"torch"``, or None for torch when it is installed.
        as_tensordict: return a ``TensorDict`` (needs tensordict and the torch backend).
        unknown_globals: ``"stub"`` decodes pickle sidecars as ``tensorplay.load``
            does in stub mode: a global outside the allowlist becomes an inert
            ``tensorplay.Stub``; ``"error"`` refuses it.

    Returns nested dicts of arrays or tensors (or ``out``); lazy stacks become
    lists, non-tensor data its value, a jagged tensor a nested tensor (torch) or a
    list of its components (numpy, meta), and a tensorclass its allowlisted class
    or a dict. With ``as_tensordict``, tensordict's own types.

    Raises:
        tensorplay.CheckpointError: a subclass naming the file, for a bad or unsafe tree.
        FileNotFoundError: ``prefix`` does not exist.
        PermissionError: ``mode="r+"`` and a file the process cannot write.
        ValueError: a bad argument, a ``prefix`` that is a file but no archive
            (``NotAnArchiveError``, also a ``MalformedCheckpointError``), a ``subpath``
            that names no saved tensordict, or a ``device`` other than ``out``'s.
    """
    from .serialization import _fake_mode_active, _resolve_backend

    if mode not in (None, "r", "r+"):
        raise ValueError(f"mode must be None, 'r' or 'r+', not {mode!r}")
    if type(num_threads) is not int or num_threads < 0:
        raise ValueError(f"num_threads must be a non-negative int, not {num_threads!r}")
    if allow_pickle is not None and not isinstance(allow_pickle, bool):
        raise TypeError(f"allow_pickle must be a bool or None, not {allow_pickle!r}")
    if unknown_globals not in ("error", "stub"):
        raise ValueError(f"unknown_globals must be 'error' or 'stub', not {unknown_globals!r}")
    backend = _resolve_backend(backend)
    if out is not None and not isinstance(out, dict):
        _require_tensordict()
        from tensordict import is_tensor_collection

        if not is_tensor_collection(out):
            raise TypeError(f"out must be a TensorDict or a tensorclass (a dict with the numpy backend), "
                            f"not {type(out).__name__}")
        as_tensordict = True
        device = _out_device(out, device)
    if as_tensordict:
        _require_tensordict()
        if backend != "torch":
            raise ValueError("as_tensordict=True (or a tensordict as out) needs backend='torch'")
    fake = backend == "torch" and _fake_mode_active()
    meta_only, copy_to = (True, None) if fake else _resolve_device(device, backend)
    keys = _subpath_keys(subpath)
    robust = robust_key is None or bool(robust_key)
    if not _O_NOFOLLOW:
        raise _unsupported(os.fspath(prefix), "this platform cannot open files without following links")
    user = _allowlist.resolved()
    reader = _Reader(meta_only, robust, allow_pickle, _limits.default_limits(), user,
                     stub=unknown_globals == "stub")
    with _stub.warning():
        tree = _read_tree(reader, prefix, keys, robust, subpath, mode, num_threads)
    if allow_pickle is None and reader.decoded:
        import warnings

        warnings.warn(f"load_memmap decoded pickled non-tensor data ({', '.join(reader.decoded)}) with tensorplay's "
                      "restricted pickle VM: no code ran. tensordict's load_memmap runs pickle there, and its default "
                      "becomes allow_pickle=False in TensorDict 0.16: pass allow_pickle=True to keep loading it.",
                      FutureWarning, stacklevel=2)
    td_device = copy_to if copy_to is not None else ("meta" if meta_only and not fake else None)
    builder = _Builder(backend, meta_only, copy_to, as_tensordict, user, fake, non_blocking, td_device)
    loaded = builder.build(tree)
    return loaded if out is None else _fill(out, loaded)


def _out_device(out: Any, device: Any) -> Any:
    """The device a load into ``out`` uses: ``out``'s when it has one (another one
    is a ValueError; a device type without an index matches any index of it)."""
    import torch

    have = getattr(out, "device", None)
    if have is None:
        return device
    if device is not None:
        want = torch.device(device)
        if want.type != have.type or (want.index is not None and have.index is not None and want.index != have.index):
            raise ValueError(f"cannot load a tensordict on device {want} into a tensordict on device {have}")
    return have


def _fill(out: Any, loaded: Any) -> Any:
    """Load ``loaded`` into ``out`` as tensordict does: nested collections reused,
    leaves replaced, keys the saved data lacks removed. ``out`` is returned."""
    if isinstance(out, dict):
        if not isinstance(loaded, dict):
            raise ValueError(f"out is a dict, but the saved data is a {type(loaded).__name__} (a lazy stack loads as "
                             "a list)")
        for key in [k for k in out if k not in loaded]:
            del out[key]
        for key, value in loaded.items():
            current = out.get(key)
            if isinstance(value, dict) and isinstance(current, dict):
                _fill(current, value)
            else:
                out[key] = value
        return out
    from tensordict import is_non_tensor, is_tensor_collection, is_tensorclass

    target = out._tensordict if is_tensorclass(out) else out
    source = loaded._tensordict if is_tensorclass(loaded) else loaded
    for key in [k for k in target.keys() if k not in source.keys()]:
        target.del_(key)
    for key in source.keys():
        value = source._get_str(key, None)
        current = target._get_str(key, None)
        nested = is_tensor_collection(value) and not is_non_tensor(value)
        if nested and current is not None and is_tensor_collection(current) and not is_non_tensor(current):
            _fill(current, value)
        else:
            target._set_str(key, value, inplace=False, validated=True, non_blocking=False)
    return out


def _read_tree(reader: _Reader, prefix: Any, keys: Any, robust: bool, subpath: Any, mode: str | None,
               num_threads: int) -> Any:
    path = os.fspath(prefix)
    # An archive maps as "r" unless "r+" is asked for: one mapping of the whole
    # file, whose payloads may be compressed or unaligned.
    fd, is_folder = _open_prefix(path, mode == "r+")
    archive = None
    try:
        if is_folder:
            root: Any = _Folder(fd, path, mode)
        else:
            archive = _Archive(path, fd, mode == "r+", _limits.merged(None))
            root = _ArchiveFolder(archive, "")
        tree = reader.level(_descend(root, keys, robust, subpath), 0)
        if archive is not None:
            archive.finish(num_threads)
    finally:
        if is_folder:
            root.close()
        else:
            os.close(fd)
    return tree


def _require_tensordict() -> None:
    try:
        from tensordict import TensorDict  # noqa: F401
    except ImportError as e:
        raise ImportError("as_tensordict=True needs the tensordict package; without it, load_memmap returns "
                          "nested dicts") from e
