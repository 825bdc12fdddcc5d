"""Distributed checkpoints (``torch.distributed.checkpoint``, "DCP"), read without
running code from them.

A DCP folder holds ``.metadata`` (a pickle of DCP's metadata classes: which
tensors and items there are, their chunks, and where each chunk's bytes are) and
``__<rank>_<n>.distcp`` files: each chunk of a tensor, and each non-tensor item,
is one ``torch.save`` archive at the offset ``.metadata`` gives. torch's own
reader unpickles ``.metadata`` with ``pickle.load`` and its default planner loads
non-tensor items with ``torch.load(weights_only=False)``: both run whatever code
the files name. Here ``.metadata`` runs through the restricted VM with exactly
DCP's metadata classes allowlisted (``_core.allowed_in_file``, the list the
scanner uses too), and every chunk and item through ``tensorplay.load``'s rules.

- ``FileSystemReader(path)``: a ``StorageReader`` for ``dcp.load`` (needs torch).
- ``read_metadata(path)``: the ``Metadata`` of a folder or of a ``.metadata`` file.
- ``load(folder)``: the whole state dict, nested as saved, tensors assembled from
  their chunks, with either backend (what ``tensorplay.load(folder)`` returns).
"""
from __future__ import annotations

import io
import mmap
import os
from typing import Any

from . import _allowlist, _core, _limits, _paths, _refusal, _strides
from ._core import MalformedCheckpointError, UnsupportedCheckpointError

# FileSystemReader needs torch: it is made on first use (__getattr__).
__all__ = ["FileSystemReader", "METADATA_FILE", "TensorProperties", "is_dcp_folder", "load",  # noqa: F822
           "read_metadata",
           "structure"]

METADATA_FILE = ".metadata"
"""The name of a DCP folder's metadata file."""


def is_dcp_folder(path: str | os.PathLike[str]) -> bool:
    """A folder holding a DCP ``.metadata`` file."""
    return os.path.isdir(path) and os.path.isfile(os.path.join(path, METADATA_FILE))


# --- .metadata ---------------------------------------------------------------------------

class _Record:
    """One of DCP's metadata classes read as data, without torch: its fields as
    attributes (the dataclass fields DCP pickles as the object's state)."""

    def __repr__(self) -> str:
        fields = ", ".join(f"{k}={v!r}" for k, v in vars(self).items())
        return f"{type(self).__name__}({fields})"

    def __eq__(self, other: object) -> bool:
        return type(self) is type(other) and vars(self) == vars(other)

    def __hash__(self) -> int:  # MetadataIndex keys storage_data
        return hash((type(self).__name__, *sorted(vars(self).items())))


class TensorProperties(_Record):
    """DCP pickles its fields as a tuple: dtype, layout, requires_grad, memory
    format (an int), pin_memory, and since torch 2.15 strides."""

    def __setstate__(self, state: tuple[Any, ...]) -> None:
        if not isinstance(state, tuple) or len(state) not in (5, 6):
            raise ValueError(f"TensorProperties state must be a 5- or 6-tuple, not {state!r}")
        self.dtype, self.layout, self.requires_grad, self.memory_format, self.pin_memory = state[:5]
        self.strides = state[5] if len(state) == 6 else None


def _torch_tensor_properties() -> type:
    """torch's ``TensorProperties``, or, where that class predates the sixth field
    torch 2.15 pickles (``strides``), a subclass that also reads it: what a newer
    torch wrote then loads with the torch installed here. Reached by pickle as
    ``tensorplay.dcp.TorchTensorProperties`` (metadata crosses ranks pickled)."""
    import dataclasses

    from torch.distributed.checkpoint.metadata import TensorProperties as Torchs

    if any(f.name == "strides" for f in dataclasses.fields(Torchs)):
        return Torchs

    class TorchTensorProperties(Torchs):
        def __setstate__(self, state: Any) -> None:
            if isinstance(state, tuple) and len(state) == 6:
                super().__setstate__(state[:5])
                self.strides = state[5]
            else:
                super().__setstate__(state)

        def __eq__(self, other: object) -> bool:
            # torch's dataclass equality wants the very same class on both sides.
            if not isinstance(other, Torchs):
                return NotImplemented
            return all(getattr(self, f.name) == getattr(other, f.name) for f in dataclasses.fields(Torchs))

        __hash__ = None  # type: ignore[assignment]  # as torch's (an unfrozen dataclass)

    TorchTensorProperties.__module__ = __name__
    TorchTensorProperties.__qualname__ = "TorchTensorProperties"
    return TorchTensorProperties


def _memory_format_code(code: int) -> int:
    return code


_RECORD_CLASSES: dict[str, Any] = {
    name: type(name, (_Record,), {"__module__": __name__})
    for name in ("Metadata", "TensorStorageMetadata", "ChunkStorageMetadata", "BytesStorageMetadata",
                 "MetadataIndex", "StorageMeta", "_StorageInfo")
}
_RECORD_CLASSES["TensorProperties"] = TensorProperties
_RECORD_CLASSES["_MEM_FORMAT_ENCODING"] = _memory_format_code


def _metadata_globals(backend: str) -> list[tuple[Any, str]]:
    """DCP's metadata classes, by the names ``.metadata`` gives them: torch's own
    with the torch backend (what ``dcp.load``'s planners expect), plain records
    with the numpy one. Path classes are pathlib's in both."""
    import pathlib

    entries = []
    for name in _core.allowed_in_file(METADATA_FILE):
        module, _, attr = name.rpartition(".")
        if module == "pathlib":
            obj = getattr(pathlib, attr)
        elif backend == "torch" and attr == "TensorProperties":
            obj = _lazy("TorchTensorProperties")
        elif backend == "torch":
            import importlib

            obj = getattr(importlib.import_module(module), attr)
        else:
            obj = _RECORD_CLASSES[attr]
        entries.append((obj, name))
    return entries


def read_metadata(path: str | os.PathLike[str], *, backend: str | None = None,
                  limits: dict[str, int] | None = None) -> Any:
    """The ``Metadata`` of a DCP folder (or of a ``.metadata`` file): torch's class
    with the torch backend, a plain record of the same fields with numpy."""
    from . import _settings

    path = os.fspath(path)
    file = os.path.join(path, METADATA_FILE) if os.path.isdir(path) else path
    chosen = _settings.resolve_backend(backend)  # type: ignore[arg-type]
    names, objects = _allowlist.resolved()
    for obj, name in _metadata_globals(chosen):
        names.append(name)
        objects.append(obj)
    # The path, not its bytes: the core lets them go before it builds the objects.
    try:
        return _core.loads(file, name=file, backend=chosen, user_names=names, user_objects=objects,
                           limits=_limits.merged(limits))
    except _core.UnsafeCheckpointError as refused:
        raise _refusal.complete(refused, file, names, _limits.merged(limits)) from None


# --- items --------------------------------------------------------------------------------

# DCP's stream transforms (``torch.distributed.checkpoint._extension``), by registry
# name and major version: the compression each stands for. ZStandard is the one torch has.
_STREAM_TRANSFORMS = {("stream.zstd", "1"): "zstd"}


def _where(info: Any) -> str:
    return f"{os.fspath(info.relative_path)} at byte {info.offset}"


def stream_transforms(info: Any) -> list[str]:
    """The compressions to undo, in the order torch's reader undoes them, for the
    item ``info`` points at (none for an item stored as written)."""
    descriptors = getattr(info, "transform_descriptors", None) or ()
    where = _where(info)
    if not isinstance(descriptors, (list, tuple)):
        raise MalformedCheckpointError(f"{where}: transform_descriptors is not a list: {descriptors!r}")
    compressions = []
    for descriptor in descriptors:
        name, _, version = descriptor.partition("/") if isinstance(descriptor, str) else ("", "", "")
        compression = _STREAM_TRANSFORMS.get((name, version.partition(".")[0]))
        if compression is None:
            known = ", ".join(f"{n}/{v}" for n, v in _STREAM_TRANSFORMS)
            raise UnsupportedCheckpointError(
                f"{where}: the item is stored behind the stream transform {descriptor!r}; "
                f"tensorplay reads {known}")
        compressions.append(compression)
    return compressions


# Chunks read ahead by one pair of core calls: enough to make the calls' cost
# vanish, few enough that what they return stays small next to the tensors.
_READ_AHEAD = 4096


class _Files:
    """A folder's ``.distcp`` files, each mapped once, private and copy-on-write
    (a write to a tensor viewing it never reaches the file), and the items in them."""

    def __init__(self, folder: str):
        self.folder = folder
        self.maps: dict[str, mmap.mmap] = {}
        # Read once for all the chunks: each is a call's worth of work.
        self.names, self.objects = _allowlist.resolved()
        self.limits = _limits.merged(None)
        self.dtypes = _core.dtypes()
        # Tensor chunks read ahead (read_chunks), by file and offset: (tensor, viewed).
        self.ready: dict[tuple[str, int], tuple[Any, bool]] = {}

    def _path(self, relative: str) -> str:
        path = _paths.beside(self.folder, relative)
        if path is None:
            raise MalformedCheckpointError(f"{relative!r}: a DCP item must name a file in its folder")
        return _paths.held(path, os.path.join(self.folder, METADATA_FILE), relative)

    def _map(self, relative: str) -> mmap.mmap:
        mapped = self.maps.get(relative)
        if mapped is None:
            with open(self._path(relative), "rb") as f:
                if os.fstat(f.fileno()).st_size == 0:
                    raise MalformedCheckpointError(f"{relative}: the file is empty")
                mapped = self.maps[relative] = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_COPY)
        return mapped

    @staticmethod
    def _checked_span(info: Any) -> tuple[str, int, int]:
        relative = os.fspath(info.relative_path)
        offset, length = info.offset, info.length
        if not (isinstance(offset, int) and isinstance(length, int)) or offset < 0 or length <= 0:
            raise MalformedCheckpointError(f"{relative}: bad item span offset={offset!r} length={length!r}")
        return relative, offset, length

    def span(self, info: Any) -> tuple[mmap.mmap, int, memoryview]:
        """The map holding the bytes ``_StorageInfo`` points at, where they start
        in it, and the bytes (a view of the map, not a copy)."""
        relative, offset, length = self._checked_span(info)
        mapped = self._map(relative)
        if offset + length > len(mapped):
            raise MalformedCheckpointError(
                f"{relative}: the item at byte {offset} needs {length} bytes, the file has {len(mapped) - offset}")
        return mapped, offset, memoryview(mapped)[offset:offset + length]

    def item(self, info: Any) -> memoryview | bytes:
        """The item as ``torch.save`` wrote it: a view of the map, or, behind the
        writer's stream transforms, what undoing them gives."""
        stored = self.span(info)[2]
        for compression in stream_transforms(info):
            stored = _core.decode_stream(stored, compression, name=_where(info), limits=self.limits)
        return stored

    def load(self, info: Any, backend: str) -> Any:
        """The item, as ``tensorplay.load`` loads the archive it is (copied out)."""
        from . import _load_file

        return _load_file.load(self.item(info), backend=backend)  # type: ignore[arg-type]

    def describe(self, infos: list[Any]) -> dict[tuple[str, int], tuple[Any, ...]]:
        """The chunks ``infos`` name that are stored plainly (dense, uncompressed,
        little-endian), by file and offset, as ``_core.dcp_chunks`` describes them:
        one core call per file validates every archive, its pickle run by the
        restricted VM. A chunk behind the writer's stream transforms is left out."""
        by_file: dict[str, list[Any]] = {}
        for info in infos:
            if not stream_transforms(info):
                by_file.setdefault(self._checked_span(info)[0], []).append(info)
        described: dict[tuple[str, int], tuple[Any, ...]] = {}
        for relative, group in by_file.items():
            path = self._path(relative)
            try:
                found = _core.dcp_chunks(path, [(i.offset, i.length) for i in group], name=relative,
                                         user_names=self.names, limits=self.limits)
            except _core.UnsafeCheckpointError as refused:
                raise _refusal.complete(refused, path, self.names, self.limits) from None
            for info, chunk in zip(group, found):
                if chunk is not None:
                    described[(relative, info.offset)] = chunk
        return described

    def read_chunks(self, wanted: list[tuple[Any, bool]], backend: str, *, passing: bool = False) -> None:
        """Read ahead the tensor chunks ``wanted`` names (``(info, copy)``),
        ``_READ_AHEAD`` at a time: those ``describe`` finds are made into tensors,
        the ``copy`` ones new tensors torch or numpy own that ``_core.read_ranges``
        fills (with ``pread``, on all cores). The others become views of the map:
        where the bytes lie aligned for the dtype, or anywhere for views only
        ``passing`` through (copied out at once by the caller, as torch's kernels
        copy from any address). ``tensor`` hands them out."""
        for start in range(0, len(wanted), _READ_AHEAD):
            group = wanted[start:start + _READ_AHEAD]
            described = self.describe([info for info, _ in group])
            targets: list[tuple[str, int, Any]] = []
            for info, copy in group:
                key = (os.fspath(info.relative_path), info.offset)
                chunk = described.get(key)
                if chunk is not None:
                    made = self._tensor_of(key[0], chunk, backend, copy, passing, targets)
                    if made is not None:
                        self.ready[key] = made
            self.read_into(targets)

    def read_into(self, targets: list[tuple[str, int, Any]], *, in_order: bool = False) -> None:
        """Fill each target (a CPU tensor or array, as bytes) from its file, at
        its offset: one ``_core.read_ranges`` call per file, ``pread`` on all
        cores. With ``in_order``, targets that overlap are filled in the order
        given, so the later one wins."""
        from . import _settings

        by_file: dict[str, list[tuple[int, Any]]] = {}
        for relative, offset, target in targets:
            by_file.setdefault(relative, []).append((offset, target))
        for relative, ranges in by_file.items():
            _core.read_ranges(self._path(relative), ranges, name=relative, threads=_settings.copy_threads(),
                              in_order=in_order, limits=self.limits)

    def view(self, relative: str, chunk: tuple[Any, ...]) -> Any | None:
        """A torch view of the map holding a chunk ``describe`` found, or None for
        a dtype this torch lacks."""
        made = self._tensor_of(relative, chunk, "torch", False, True, [])
        return None if made is None else made[0]

    def tensor(self, info: Any, backend: str) -> tuple[Any, bool]:
        """A tensor chunk, and whether it is a view of the map (read ahead, or read
        now): a chunk stored plainly is a copy or a view, any other is loaded."""
        key = (os.fspath(info.relative_path), info.offset)
        if key not in self.ready:
            self.read_chunks([(info, False)], backend)
        ready = self.ready.pop(key, None)
        return ready if ready is not None else (self.load(info, backend), False)

    def _tensor_of(self, relative: str, chunk: tuple[Any, ...], backend: str, copy: bool, passing: bool,
                   targets: list[tuple[str, int, Any]]) -> tuple[Any, bool] | None:
        """The tensor ``_core.dcp_chunks`` described, and whether it views the map:
        with ``copy`` (or where its bytes lie misaligned for the dtype, unless the
        view is only ``passing``) a new tensor whose bytes ``targets`` will read
        from the file, else a view of the map."""
        dtype_name, shape, stride, storage_offset, data_offset, nbytes = chunk
        size, spec, from_ml_dtypes, _ = self.dtypes.get(dtype_name, (0, None, False, None))
        if not size or spec is None:
            return None
        if backend == "torch":
            import torch

            dtype: Any = getattr(torch, dtype_name)
            empty, as_bytes = torch.empty, lambda t: t  # read_ranges fills a tensor in place
        else:
            import numpy as np

            if from_ml_dtypes:
                import ml_dtypes

                dtype = np.dtype(getattr(ml_dtypes, spec))
            else:
                dtype = np.dtype(spec)
            empty, as_bytes = np.empty, lambda a: a.reshape(-1).view(np.uint8)
        if copy or (data_offset % size and not passing):
            if stride == _strides.contiguous(shape):
                tensor = empty(shape, dtype=dtype)
                if nbytes:
                    targets.append((relative, data_offset + storage_offset * size, as_bytes(tensor)))
                return tensor, False
            storage = empty((nbytes // size,), dtype=dtype)
            targets.append((relative, data_offset, as_bytes(storage)))
            return _strides.strided(storage, shape, stride, storage_offset, backend), False
        if nbytes == 0:
            return empty(shape, dtype=dtype), False
        if backend == "torch":
            import torch

            base = torch.frombuffer(self._map(relative), dtype=dtype, count=nbytes // size, offset=data_offset)
            return base.as_strided(shape, stride, storage_offset), True
        import numpy as np

        return np.ndarray(shape, dtype=dtype, buffer=self._map(relative), offset=data_offset + storage_offset * size,
                          strides=tuple(st * size for st in stride)), True

    def release(self, info: Any) -> None:
        """Let go of an item's pages once it is copied out: the map is the file's,
        and a load reads each item once."""
        mapped = self.maps.get(os.fspath(info.relative_path))
        if mapped is None or not hasattr(mmap, "MADV_DONTNEED"):
            return
        start = info.offset - info.offset % mmap.PAGESIZE
        mapped.madvise(mmap.MADV_DONTNEED, start, info.offset + info.length - start)


class _DirectReads:
    """Chunks read straight from their file into the planner's tensors: a chunk
    stored plainly that a request wants whole, into a contiguous CPU tensor of its
    dtype and shape, needs no view and no copy of its own (one ``pread``, for a
    batch of them per core call). Each is committed once read, in the plan's order."""

    def __init__(self, files: _Files, planner: Any):
        import torch

        self.files, self.planner = files, planner
        self.torch_dtypes = {name: getattr(torch, name, None) for name in files.dtypes}
        self.pending: list[tuple[str, int, Any, Any]] = []

    def add(self, relative: str, chunk: tuple[Any, ...], req: Any, target: Any) -> bool:
        """Take the read of ``chunk`` into ``target`` for ``req``, when it is one."""
        dtype_name, shape, stride, storage_offset, data_offset, _ = chunk
        if not (target.dtype == self.torch_dtypes.get(dtype_name) and target.shape == shape
                and req.lengths == shape and not any(req.storage_offsets) and stride == _strides.contiguous(shape)
                and target.is_cpu and target.is_contiguous()):
            return False
        itemsize = self.files.dtypes[dtype_name][0]
        self.pending.append((relative, data_offset + storage_offset * itemsize, target, req))
        return True

    def flush(self) -> None:
        """Read what was taken, then commit it."""
        # A planner may place two chunks in one tensor: the later one wins, as its copy would.
        self.files.read_into([(relative, offset, target) for relative, offset, target, _ in self.pending],
                             in_order=True)
        for _, _, target, req in self.pending:
            self.planner.commit_tensor(req, target)
        self.pending.clear()


# --- the whole state dict ----------------------------------------------------------------

def load(folder: str | os.PathLike[str], *, backend: str | None = None, mmap: bool = False) -> dict[str, Any]:
    """Every tensor and item of a DCP folder, nested as it was saved (dicts, and
    lists where the saved path has list indices), each tensor assembled from its
    chunks on the CPU. Torch tensors with the torch backend, numpy arrays with
    numpy. With ``mmap``, a tensor saved as one chunk is a view of the mapped
    ``.distcp`` file (copy-on-write); others are assembled in memory."""
    from . import _settings

    folder = os.fspath(folder)
    chosen = _settings.resolve_backend(backend)  # type: ignore[arg-type]
    metadata = _checked(read_metadata(folder, backend=chosen), folder)
    files = _Files(folder)
    chunks: dict[str, list[tuple[Any, Any]]] = {}
    for index, info in metadata.storage_data.items():
        chunks.setdefault(index.fqn, []).append((index, info))
    # One read of every tensor chunk per file: a tensor saved as one chunk is
    # copied out as it is (unless it is to be a view); the chunks of a sharded one
    # are views, placed into the tensor they assemble.
    wanted = []
    for fqn, md in metadata.state_dict_metadata.items():
        pieces = chunks.get(fqn, [])
        if type(md).__name__ != "BytesStorageMetadata":
            wanted += [(info, not mmap and len(pieces) == 1) for _, info in pieces]
    files.read_chunks(wanted, chosen)
    flat: dict[str, Any] = {}
    for fqn, md in metadata.state_dict_metadata.items():
        pieces = chunks.get(fqn, [])
        if type(md).__name__ == "BytesStorageMetadata":
            if len(pieces) != 1:
                raise MalformedCheckpointError(f"{fqn}: a non-tensor item needs one stored span, found {len(pieces)}")
            flat[fqn] = files.load(pieces[0][1], chosen)
        else:
            flat[fqn] = _assemble(files, fqn, md, pieces, chosen, mmap)
    return _nest(flat, getattr(metadata, "planner_data", None) or {})


def _checked(metadata: Any, folder: str) -> Any:
    """``metadata`` when it has the shape the readers walk: its maps are dicts."""
    for field in ("state_dict_metadata", "storage_data"):
        if not isinstance(getattr(metadata, field, None), dict):
            raise MalformedCheckpointError(f"{folder}/{METADATA_FILE}: the metadata has no {field} map")
    planner_data = getattr(metadata, "planner_data", None)
    if planner_data is not None and not isinstance(planner_data, dict):
        raise MalformedCheckpointError(f"{folder}/{METADATA_FILE}: planner_data is not a map")
    return metadata


def structure(folder: str | os.PathLike[str]) -> dict[str, Any]:
    """What ``tensorplay.inspect`` shows of a DCP folder: the state dict as saved,
    each tensor a ``TensorInfo`` from the metadata (no chunk read), each non-tensor
    item loaded (numpy backend)."""
    from ._types import TensorInfo

    folder = os.fspath(folder)
    metadata = _checked(read_metadata(folder, backend="numpy"), folder)
    files = _Files(folder)
    itemsizes = {name: row[0] for name, row in _core.dtypes().items()}
    spans: dict[str, Any] = {}
    for index, info in metadata.storage_data.items():
        spans.setdefault(index.fqn, info)
    flat: dict[str, Any] = {}
    for fqn, md in metadata.state_dict_metadata.items():
        info = spans.get(fqn)
        if type(md).__name__ == "BytesStorageMetadata":
            flat[fqn] = files.load(info, "numpy") if info is not None else None
            continue
        shape = tuple(int(n) for n in md.size)
        stride = _strides.contiguous(shape)
        numel = 1
        for n in shape:
            numel *= n
        dtype = md.properties.dtype
        flat[fqn] = TensorInfo(dtype=dtype, shape=shape, stride=tuple(stride),
                               storage=fqn,  # DCP keys each tensor's storage by its name
                               offset=None if info is None else info.offset,
                               nbytes=numel * itemsizes.get(dtype, 0), device="cpu",
                               requires_grad=bool(md.properties.requires_grad))
    return _nest(flat, getattr(metadata, "planner_data", None) or {})


def _assemble(files: _Files, fqn: str, md: Any, pieces: list[tuple[Any, Any]], backend: str, views: bool) -> Any:
    """A tensor of ``md.size`` from its chunks, each placed at its offsets; one
    chunk that is the whole tensor is that chunk (with ``views``, the view of the
    map it is; else a copy of it, and its pages are let go)."""
    size = tuple(int(n) for n in md.size)
    parts = [(tuple(int(o) for o in getattr(index, "offset", None) or ()), *files.tensor(info, backend))
             for index, info in pieces]
    if len(parts) == 1 and parts[0][0] == (0,) * len(size) and tuple(parts[0][1].shape) == size:
        _, chunk, viewed = parts[0]
        if views or not viewed:
            return chunk
        copied = chunk.clone() if backend == "torch" else chunk.copy()
        del chunk, parts
        files.release(pieces[0][1])
        return copied
    if not parts:
        raise MalformedCheckpointError(f"{fqn}: a tensor of size {size} has no stored chunk")
    first = parts[0][1]
    if backend == "torch":
        import torch

        whole = torch.zeros(size, dtype=first.dtype)
    else:
        import numpy as np

        whole = np.zeros(size, dtype=first.dtype)
    for offsets, chunk, _ in parts:
        shape = tuple(chunk.shape)
        if (len(offsets) != len(size) or len(shape) != len(size) or chunk.dtype != first.dtype
                or any(o < 0 or o + n > s for o, n, s in zip(offsets, shape, size))):
            raise MalformedCheckpointError(
                f"{fqn}: a chunk of shape {shape} at {offsets} does not fit a tensor of size {size}")
        whole[tuple(slice(o, o + n) for o, n in zip(offsets, shape))] = chunk
    del parts, chunk
    for _, info in pieces:
        files.release(info)
    return whole


def _nest(flat: dict[str, Any], paths: dict[str, Any]) -> dict[str, Any]:
    """The state dict as saved: each flattened key put back at its saved path
    (``planner_data``: the keys and list indices that led to it)."""

    root: dict[str, Any] = {}
    for fqn, value in flat.items():
        path = paths.get(fqn, (fqn,))
        if not isinstance(path, (tuple, list)) or not path:
            raise MalformedCheckpointError(f"{fqn}: bad saved path {path!r}")
        node: Any = root
        for key, next_key in zip(path[:-1], path[1:]):
            node = _child(node, key, [] if isinstance(next_key, int) else {}, fqn)
        _put(node, path[-1], value, fqn)
    return root


def _child(node: Any, key: Any, empty: Any, fqn: str) -> Any:
    if isinstance(node, list):
        _put(node, key, None, fqn, keep=True)
        if node[key] is None:
            node[key] = empty
        return node[key]
    return node.setdefault(key, empty)


def _put(node: Any, key: Any, value: Any, fqn: str, keep: bool = False) -> None:

    if isinstance(node, list):
        if not isinstance(key, int) or key < 0 or key > 1 << 24:
            raise MalformedCheckpointError(f"{fqn}: bad list index {key!r} in its saved path")
        node.extend([None] * (key + 1 - len(node)))
        if not keep:
            node[key] = value
    elif isinstance(node, dict):
        node[key] = value
    else:
        raise MalformedCheckpointError(f"{fqn}: its saved path runs through a value, not a dict or list")


# --- a StorageReader for dcp.load ---------------------------------------------------------

def _reader_class() -> type:
    """``FileSystemReader``, built on first use: it subclasses torch's."""
    import torch
    from torch.distributed._shard._utils import narrow_tensor_by_index
    from torch.distributed.checkpoint import filesystem
    from torch.distributed.checkpoint.metadata import StorageMeta
    from torch.distributed.checkpoint.planner import LoadItemType
    from torch.futures import Future

    class FileSystemReader(filesystem.FileSystemReader):
        """torch's ``FileSystemReader`` with its two unsafe steps replaced:
        ``.metadata`` through the restricted VM, and every tensor chunk and item
        through ``tensorplay.load``. A non-tensor item reaches the planner as a
        ``torch.save`` of what tensorplay built from it, so a planner that
        unpickles it (the default one does, with ``weights_only=False``) sees only
        allowlisted objects."""

        def read_metadata(self, *args: Any, **kwargs: Any) -> Any:
            rank = kwargs.get("rank")
            name = METADATA_FILE if rank is None else f"__{rank}{METADATA_FILE}"
            metadata = read_metadata(os.path.join(os.fspath(self.path), name), backend="torch")
            if getattr(metadata, "storage_meta", None) is None:
                metadata.storage_meta = StorageMeta()
            metadata.storage_meta.load_id = self.load_id
            return metadata

        def read_data(self, plan: Any, planner: Any) -> Any:
            files = _Files(os.fspath(self.path))
            storage_data, byte_io, resolve = self.storage_data, LoadItemType.BYTE_IO, planner.resolve_tensor
            located = sorted(((storage_data[r.storage_index], r) for r in plan.items),
                             key=lambda pair: (pair[0].relative_path, pair[0].offset))
            direct = _DirectReads(files, planner)
            # A batch at a time, as read_chunks reads ahead (see _READ_AHEAD).
            for start in range(0, len(located), _READ_AHEAD):
                batch = located[start:start + _READ_AHEAD]
                described = files.describe([info for info, r in batch if r.type != byte_io])
                for info, req in batch:
                    if req.type == byte_io:
                        direct.flush()
                        self._read_item(files, info, req, planner)
                        continue
                    target = resolve(req).detach()
                    key = (os.fspath(info.relative_path), info.offset)
                    chunk = described.get(key)
                    if chunk is not None and direct.add(key[0], chunk, req, target):
                        continue
                    direct.flush()
                    tensor = None if chunk is None else files.view(key[0], chunk)
                    self._copy_chunk(files, info, tensor, req, target, planner)
                direct.flush()
            fut: Future = Future()
            fut.set_result(None)
            return fut

        @staticmethod
        def _read_item(files: _Files, info: Any, req: Any, planner: Any) -> None:
            safe = io.BytesIO()
            torch.save(files.load(info, "torch"), safe)
            safe.seek(0)
            planner.load_bytes(req, safe)

        @staticmethod
        def _copy_chunk(files: _Files, info: Any, tensor: Any, req: Any, target: Any, planner: Any) -> None:
            """Copy the part of a chunk ``req`` wants into ``target``: ``tensor``, a
            view of the mapped file where the chunk is stored plainly, else the
            chunk loaded."""
            if tensor is None:
                tensor = files.load(info, "torch")
            if not isinstance(tensor, torch.Tensor):
                raise MalformedCheckpointError(
                    f"{req.storage_index.fqn}: the chunk holds a {type(tensor).__name__}, not a tensor")
            tensor = narrow_tensor_by_index(tensor, req.storage_offsets, req.lengths)
            if target.size() != tensor.size():
                raise AssertionError(f"req {req.storage_index} mismatch sizes {target.size()} vs {tensor.size()}")
            target.copy_(tensor)
            del tensor
            files.release(info)
            planner.commit_tensor(req, target)

    FileSystemReader.__module__ = __name__
    return FileSystemReader


_LAZY_CLASSES = {"FileSystemReader": _reader_class, "TorchTensorProperties": _torch_tensor_properties}


def _lazy(name: str) -> Any:
    cls = globals().get(name)
    if cls is None:
        cls = globals()[name] = _LAZY_CLASSES[name]()
    return cls


def __getattr__(name: str) -> Any:
    """The classes built on torch's, made on first use (importing this module
    needs no torch)."""
    if name not in _LAZY_CLASSES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return _lazy(name)
