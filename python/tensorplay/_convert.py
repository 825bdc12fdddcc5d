"""``tensorplay convert IN OUT.safetensors``: any checkpoint ``load`` reads, as
safetensors, through the safetensors package's numpy writer. No torch, no code.

Nested containers flatten to dotted keys. Tensors that are the same view of one
storage (tied weights) are written once; the other names go into the metadata as
Hugging Face's converter records them (``{removed_name: kept_name}``), next to
``"format": "pt"``. Other values are reported and left out, or stored in the
metadata as JSON strings with ``metadata=True``.
"""
from __future__ import annotations

import json
import os
from collections.abc import Callable
from typing import Any

import numpy as np

from . import _core
from ._atomic import replacing
from .serialization import load

# What safetensors stores, by numpy dtype name: every dtype the numpy backend
# gives arrays of, but complex128, which its format lacks.
_STORABLE = {name for name, (_, spec, _, _) in _core.dtypes().items() if spec is not None} - {"complex128"}


def _flatten(obj: Any, prefix: str, tensors: dict, others: dict) -> None:
    """Leaves by dotted path. Two leaves on one path (a key ``"a.b"`` beside
    ``{"a": {"b": ...}}``, or the keys ``1`` and ``"1"``) would overwrite each
    other in the output, so they are refused."""
    stack = [(prefix, obj)]
    while stack:
        path, value = stack.pop()
        if path in tensors or path in others:
            raise ValueError(f"two values of the checkpoint flatten to the key {path!r}; safetensors keys must be "
                             "unique (rename one of them)")
        if isinstance(value, np.ndarray) and value.dtype != object:
            if value.dtype.name not in _STORABLE:
                raise ValueError(f"{path or '<root>'!r} is a {value.dtype.name} tensor, which safetensors cannot store")
            tensors[path] = value
        elif isinstance(value, dict):
            for key, item in reversed(list(value.items())):
                stack.append((f"{path}.{key}" if path else str(key), item))
        elif isinstance(value, (list, tuple)) and not hasattr(value, "_fields"):
            for i, item in reversed(list(enumerate(value))):
                stack.append((f"{path}.{i}" if path else str(i), item))
        else:
            others[path] = value


def _identity(a: np.ndarray) -> tuple:
    """Two arrays with the same identity are the same view of the same memory."""
    return (a.__array_interface__["data"][0], a.shape, a.strides, a.dtype.str)


def _json(value: Any) -> str:
    try:
        return json.dumps(value)
    except (TypeError, ValueError):
        return json.dumps(repr(value))


def convert(source: Any, target: str | os.PathLike[str], *, force: bool = False, metadata: bool = False,
            progress: Callable[[int, int], None] | None = None, report: Callable[[str], None] | None = None) -> dict:
    """Convert ``source`` to safetensors at ``target``. Returns a summary."""
    from safetensors.numpy import save_file

    target = os.fspath(target)
    if os.path.exists(target) and not force:
        raise FileExistsError(f"{target} exists; pass force=True (--force) to overwrite it")
    tensors: dict[str, np.ndarray] = {}
    others: dict[str, Any] = {}
    _flatten(load(source, backend="numpy"), "", tensors, others)
    kept: dict[tuple, str] = {}
    out: dict[str, np.ndarray] = {}
    meta = {"format": "pt"}
    for i, (name, array) in enumerate(tensors.items(), 1):
        first = kept.setdefault(_identity(array), name)
        if first != name and name != "format":  # the metadata's "format" says "pt"
            meta[name] = first
        else:
            out[name] = array if array.flags.c_contiguous else array.copy(order="C")
        if progress is not None:
            progress(i, len(tensors))
    for name, value in others.items():
        if metadata:
            if name in meta:
                raise ValueError(f"the non-tensor value {name!r} would overwrite the metadata entry of that name")
            meta[name] = _json(value)
        elif report is not None:
            report(f"left out non-tensor value {name or '<root>'} = {value!r:.80}")
    with replacing(target) as tmp:
        save_file(out, tmp, metadata=meta)
    return {"tensors": len(out), "shared": len(tensors) - len(out), "other_values": len(others)}
