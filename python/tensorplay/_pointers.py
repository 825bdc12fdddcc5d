"""Pointers one file of a folder gives a loader, followed as that loader follows
them. The bytes a distributed checkpoint's metadata, a sharded checkpoint's index or
a TensorDict level names are judged as what that loader reads them as, wherever
they lie: in a file a folder walk reads only from byte 0 (a TensorDict leaf, git's
own data), in a text file, inside another file's tensor bytes. A pointer out of
the folder is unsafe: no writer makes one, and what it reaches is not in the scan.

- **DCP** (``torch.distributed.checkpoint``'s ``FileSystemReader`` and default load
  planner, torch 2.13 to 2.15): every item of a ``.metadata`` or ``__<rank>.metadata``
  (its ``storage_data``: a file relative to the folder, an offset, a length, the
  stream transforms). The planner hands a bytes item to ``torch.load(weights_only=False)``
  and a tensor chunk to ``torch.load(weights_only=True)``: each span is scanned as a
  file of its own, after its transforms are undone.
- **Sharded checkpoints** (transformers, accelerate): every shard the ``weight_map``
  of an index (``*.index.json``) names is ``torch.load``-ed whatever its own name,
  so it is scanned as a checkpoint.
- **TensorDict** (``TensorDict.load_memmap``, tensordict 0.15): a ``meta.json`` key
  naming a sub-level outside its folder (tensordict's ``robust_key=False``, and
  releases before the robust default, join the key to the folder as it is). The
  pickle sidecars it unpickles (``other.pickle``, ``pickle.pkl``) lie in the
  level's own folder, which the walk reads file by file.
"""
from __future__ import annotations

import os
from collections import namedtuple

from . import _core
from ._paths import INDEX_SUFFIX

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

# What the loader does with what a pointer reaches, as reports say it.
DCP = "torch.distributed.checkpoint's default planner: each item's bytes as torch.load reads them"
DCP_BYTES = "torch.distributed.checkpoint: a bytes item, read by torch.load(weights_only=False)"
DCP_TENSOR = "torch.distributed.checkpoint: a tensor chunk, read by torch.load(weights_only=True)"
SHARD = "a sharded checkpoint's shard, read by torch.load"
TENSORDICT_LEVEL = "TensorDict.load_memmap: a sub-level's folder"


Pointer = namedtuple("Pointer", "source item reader")
Pointer.__doc__ = """Where a reading comes from: the file that points (``source``),
what it names (``item``: a DCP item's key, a shard's name, a TensorDict key) and what
the loader does with the bytes it reaches (``reader``)."""

Reading = namedtuple("Reading", "target pointer spans outside problem")
Reading.__doc__ = """One file a pointer makes a loader read: ``target``'s whole file
(``spans`` None) or the ``spans`` of it, each ``(offset, length, label, transforms)``
(the compressions to undo first). ``outside`` is the name that leaves the folder
(nothing is read); ``problem`` a ``(kind, reason)`` that kept the pointer from being
followed."""


def kind_of(path: str) -> str | None:
    """Which pointers the file at ``path`` gives a loader, by the names loaders open
    such files by: ``"dcp"`` (``.metadata``, ``__<rank>.metadata``), ``"shard_index"``
    (``*.index.json``), ``"tensordict"`` (``meta.json``), or None. (What a pointer
    reaches is then read whatever its own name.)"""
    name = os.path.basename(path)
    try:
        if _core.allowed_in_file(name):
            return "dcp"
    except UnicodeEncodeError:
        return None  # bytes that are not UTF-8: none of these names
    if name.endswith(INDEX_SUFFIX):
        return "shard_index"
    if name == "meta.json":
        return "tensordict"
    return None


def follow(path: str, kind: str) -> list[Reading]:
    """The readings the pointers of the file at ``path`` make a loader do."""
    return {"dcp": _dcp, "shard_index": _shards, "tensordict": _tensordict_levels}[kind](path)


def _inside(folder: str, name: str) -> str | None:
    """``folder/name`` as a loader joins them, when it stays inside ``folder``
    (a sub-folder is fine); None when it leaves it (``..``, an absolute path)."""
    joined = os.path.normpath(os.path.join(folder, name))
    base = os.path.normpath(folder)
    return joined if joined == base or joined.startswith(base.rstrip(os.sep) + os.sep) else None


def _unopenable(name: str) -> str | None:
    """Why no loader opens a file of this name (``open`` refuses a NUL byte), else None."""
    return f"names {name!r}, which no loader can open (a NUL byte)" if "\0" in name else None


def _json(path: str) -> object | None:
    """The JSON document at ``path`` as a loader reads it, or None when it cannot be
    read as one (its own scan says why): bounded by ``max_pickle_bytes``, as tensorplay's
    readers bound a ``meta.json``, and by Python's recursion limit."""
    import json

    from . import _limits

    most = _limits.default_limits()["max_pickle_bytes"]
    try:
        with open(path, "rb") as f:
            data = f.read(most + 1)
        if len(data) > most:
            return None
        return json.loads(data)
    except (OSError, ValueError, RecursionError):
        return None


def _metadata(path: str) -> Any:
    """A DCP metadata file as a listing of its items: read without torch where
    numpy represents every object in it, else (an object only torch makes, such
    as a function where a name should be) as DCP reads it, with torch, when it
    is installed."""
    from . import dcp

    try:
        return dcp.read_metadata(path, backend="numpy")
    except _core.UnsupportedCheckpointError:
        import importlib.util

        if importlib.util.find_spec("torch") is None:
            raise
        return dcp.read_metadata(path, backend="torch")


def _dcp(path: str) -> list[Reading]:
    from . import dcp

    folder = os.path.dirname(path) or "."
    try:
        metadata = _metadata(path)
        items = dict(metadata.storage_data)
        kinds = dict(metadata.state_dict_metadata)
    except (_core.CheckpointError, AttributeError, TypeError, ValueError) as e:
        # The metadata's own scan says why it is unsafe or unreadable; this says
        # that its pointers were not followed.
        reason = f"its items cannot be listed, so the bytes they point at were not read: {e}"
        return [Reading(path, Pointer(path, None, DCP), None, None, ("dcp_metadata", reason))]
    spans: dict[str, list[tuple[int, int, str, list[str]]]] = {}
    readings: list[Reading] = []
    for index, info in items.items():
        fqn = getattr(index, "fqn", index)
        # An item the metadata does not describe is read as bytes: the stricter reading.
        described = kinds.get(fqn) if isinstance(fqn, str) else None
        is_tensor = type(described).__name__ == "TensorStorageMetadata"
        pointer = Pointer(path, str(fqn), DCP_TENSOR if is_tensor else DCP_BYTES)
        relative = getattr(info, "relative_path", None)
        offset, length = getattr(info, "offset", None), getattr(info, "length", None)
        if isinstance(relative, os.PathLike):
            relative = os.fspath(relative)
        why = None
        if not isinstance(relative, str) or not _is_size(offset) or not _is_size(length):
            why = f"names no file span: relative_path={relative!r} offset={offset!r} length={length!r}"
        if why or (why := _unopenable(relative)):
            readings.append(Reading(path, pointer, None, None, ("dcp_metadata", why)))
            continue
        target = _inside(folder, relative)
        if target is None:
            readings.append(Reading(os.path.join(folder, relative), pointer, None, relative, None))
            continue
        try:
            transforms = dcp.stream_transforms(info)
        except _core.CheckpointError as e:
            # The Python layer's own errors carry no kind: an unknown transform is unsupported.
            readings.append(Reading(target, pointer, None, None, (getattr(e, "kind", None) or "unsupported", str(e))))
            continue
        label = f"{'tensor chunk' if is_tensor else 'bytes item'} {fqn!r} (bytes {offset} to {offset + length})"
        spans.setdefault(target, []).append((offset, length, label, transforms))
    pointer = Pointer(path, None, DCP)
    return readings + [Reading(target, pointer, found, None, None) for target, found in spans.items()]


def _is_size(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _shards(path: str) -> list[Reading]:
    folder = os.path.dirname(path) or "."
    # An index that is no JSON object with a weight_map is reported by its own scan.
    document = _json(path)
    weight_map = document.get("weight_map") if isinstance(document, dict) else None
    if not isinstance(weight_map, dict):
        return []
    readings = []
    named = {(shard if isinstance(shard, str) else repr(shard)): shard for shard in weight_map.values()}
    for name, shard in named.items():
        pointer = Pointer(path, name, SHARD)
        why = _unopenable(shard) if isinstance(shard, str) and shard else f"a shard named {shard!r}"
        if why:
            readings.append(Reading(path, pointer, None, None, ("shard_index", why)))
            continue
        target = _inside(folder, shard)
        if target is None:
            readings.append(Reading(os.path.join(folder, shard), pointer, None, shard, None))
        else:
            readings.append(Reading(target, pointer, None, None, None))
    return readings


def _tensordict_levels(path: str) -> list[Reading]:
    folder = os.path.dirname(path) or "."
    meta = _json(path)
    if not isinstance(meta, dict):
        return []
    readings = []
    for key, entry in meta.items():
        if isinstance(entry, dict) and entry.get("type") is not None and _inside(folder, key) is None:
            pointer = Pointer(path, key, TENSORDICT_LEVEL)
            readings.append(Reading(os.path.join(folder, key), pointer, None, key, None))
    return readings
