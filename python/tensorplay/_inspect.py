"""``tensorplay.inspect``: a checkpoint's structure, no payload byte read, no torch."""
from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Literal, NamedTuple

from . import _allowlist, _core, _limits, _refusal, _stub
from ._types import TensorInfo


def _walk(obj: Any, path: str) -> Iterator[tuple[str, Any]]:
    """(dotted path, leaf) pairs, depth first, iteratively."""
    stack = [(path, obj)]
    while stack:
        here, node = stack.pop()
        if isinstance(node, TensorInfo):
            yield here, node
        elif isinstance(node, dict):
            for key, value in reversed(list(node.items())):
                stack.append((f"{here}.{key}" if here else str(key), value))
        elif isinstance(node, (list, tuple)) and not hasattr(node, "_fields"):
            for i, value in reversed(list(enumerate(node))):
                stack.append((f"{here}.{i}" if here else str(i), value))
        else:
            yield here, node


class Inspection(NamedTuple):
    format: str
    #: The loaded structure with every tensor replaced by a ``TensorInfo``.
    tree: Any
    #: The globals outside the allowlist that stand in as ``tensorplay.Stub`` (stub mode).
    stubbed: tuple[str, ...] = ()

    def entries(self) -> Iterator[tuple[str, Any]]:
        """Every leaf with its dotted path, depth first."""
        return _walk(self.tree, "")

    def tensors(self) -> list[tuple[str, TensorInfo]]:
        return [(p, v) for p, v in self.entries() if isinstance(v, TensorInfo)]

    def totals(self) -> dict[str, Any]:
        """Element count over distinct tensors, and bytes per dtype over distinct storages."""
        seen_tensors, seen_storages = set(), set()
        parameters = 0
        nbytes: dict[str, int] = {}
        for _, t in self.tensors():
            key = (t.storage, t.storage_offset, t.shape, t.stride, t.dtype)
            if key not in seen_tensors:
                seen_tensors.add(key)
                parameters += t.numel
            if t.storage is not None and t.storage not in seen_storages:
                seen_storages.add(t.storage)
                nbytes[t.dtype or "?"] = nbytes.get(t.dtype or "?", 0) + t.nbytes
        return {"tensors": len(self.tensors()), "parameters": parameters, "bytes_per_dtype": nbytes}

    def to_json(self) -> dict[str, Any]:
        leaves = []
        for path, value in self.entries():
            if isinstance(value, TensorInfo):
                leaves.append({"path": path, **value._asdict(), "shape": list(value.shape),
                               "stride": list(value.stride)})
            else:
                leaves.append({"path": path, "value": repr(value)})
        return {"format": self.format, "entries": leaves, "totals": self.totals(), "stubbed": list(self.stubbed)}


def inspect(f: Any, *, limits: dict[str, int] | None = None,
            unknown_globals: Literal["error", "stub"] = "error") -> Inspection:
    """The structure of a checkpoint in any format ``load`` reads: the tree of keys,
    and for each tensor its dtype, shape, stride, storage key, byte offset in the
    file, size and device. No payload byte is read and torch is not needed; the
    same allowlist as ``load`` applies (use ``tensorplay scan`` on files it refuses).

    ``f`` is what ``load`` takes (a path, a PathLike or a binary file object, or
    a URL: its directory, pickles and local headers are read by ranges), or the
    file's bytes. ``unknown_globals="stub"`` stands a ``tensorplay.Stub`` in for
    each global outside the allowlist, as ``load`` does, and lists them in
    ``stubbed``."""
    import os

    from . import _load_file, _paths

    if _paths.is_url(f):
        from . import _remote_mirror

        with _remote_mirror.mirrored(f, storages=False) as path:
            return inspect(path, limits=limits, unknown_globals=unknown_globals)

    if isinstance(f, (str, os.PathLike)) and os.path.isdir(f):
        from . import dcp

        if dcp.is_dcp_folder(f):
            return Inspection("dcp", dcp.structure(f))
    source = f if isinstance(f, bytes) else _load_file.source(f, mmap=False)[0]
    if unknown_globals not in ("error", "stub"):
        raise ValueError(f"unknown_globals must be 'error' or 'stub', not {unknown_globals!r}")
    names, objects = _allowlist.resolved()
    try:
        with _stub.collecting() as stubbed:
            fmt, tree = _core.inspect(source, user_names=names, user_objects=objects, limits=_limits.merged(limits),
                                      stub=unknown_globals == "stub")
            _refusal.refuse_hostile(source, names, _limits.merged(limits))
    except _core.UnsafeCheckpointError as refused:
        raise _refusal.complete(refused, source, names, _limits.merged(limits)) from None
    except _core.MalformedCheckpointError:
        from . import _export

        # A torch.export archive has no data.pkl: say what it is and what reads it.
        if _export.is_export_archive(source, limits):
            raise _export.refusal(source, limits) from None
        raise
    return Inspection(fmt, tree, tuple(stubbed))
