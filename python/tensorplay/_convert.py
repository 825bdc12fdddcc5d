"""``tensorplay convert IN OUT.safetensors``: any checkpoint ``load`` reads, as
safetensors, through the safetensors package's numpy writer. No torch, no code.
The archives whose own readers run code convert to the state dict those readers
give, taken out without running any of it: a TorchScript archive
(``jit_state_dict``), a torch.export ``.pt2`` (``export_state_dict``), and, in
stub mode, a whole pickled module (``module_state_dict``, wherever it sits in the tree).

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
from typing import Any, Literal

import numpy as np

from . import _core
from ._atomic import replacing
from ._modules import is_module, module_state_dict
from ._stub import Stub
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
        elif is_module(value):
            stack.append((path, module_state_dict(value)))
        elif isinstance(value, Stub):
            parts = {"__stub__": value.qualname, "args": value.args, "kwargs": value.kwargs, "state": value.state,
                     "items": value.items}
            stack.append((path, {k: v for k, v in parts.items() if v is not None}))
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


# The extra that installs the safetensors package (pyproject.toml), named in the
# error a conversion without it raises.
INSTALL_CONVERT = "pip install 'tensorplay-serialization[convert]'"


def safetensors_numpy() -> tuple[Callable[[str], dict], Callable[..., None]]:
    """safetensors' numpy ``load_file`` and ``save_file``. safetensors is an
    optional dependency: without it the error names the extra to install."""
    try:
        from safetensors.numpy import load_file, save_file
    except ImportError as e:
        raise ModuleNotFoundError(f"converting to safetensors needs the safetensors package, which is not installed: "
                                  f"{INSTALL_CONVERT}", name="safetensors") from e
    return load_file, save_file


def convert(source: Any, target: str | os.PathLike[str], *, force: bool = False, metadata: bool = False,
            progress: Callable[[int, int], None] | None = None, report: Callable[[str], None] | None = None,
            unknown_globals: Literal["error", "stub"] = "error") -> dict:
    """Convert ``source`` to safetensors at ``target``. Returns a summary. A
    sharded checkpoint (its index, or a folder holding one) converts shard by
    shard into the folder ``target``, with a ``model.safetensors.index.json``.
    With ``unknown_globals="stub"`` a file with globals outside the allowlist
    converts too: each stub's tensors are taken under its key
    (``hparams.state.mask``), its other values are like any other value, and
    ``<key>.__stub__`` names the global it stood in for."""
    safetensors_numpy()  # before a load that could take minutes
    index = _sharded_index(source)
    if index is not None:
        if unknown_globals != "error":
            raise ValueError("unknown_globals='stub' is not supported for a sharded checkpoint")
        return _convert_shards(index, os.fspath(target), force, metadata, progress, report)
    target = os.fspath(target)
    if os.path.exists(target) and not force:
        raise FileExistsError(f"{target} exists; pass force=True (--force) to overwrite it")
    summary, _ = _write(_state(source, unknown_globals), target, metadata, progress, report)
    return summary


def _state(source: Any, unknown_globals: Literal["error", "stub"]) -> Any:
    """What converts: the state dict the reader of an archive of code gives (its
    tensors only, as torch's ``state_dict`` has them), else what ``load`` gives."""
    from . import _export
    from ._torchscript import jit_state_dict

    kind = None
    if isinstance(source, (bytes, memoryview)) or (isinstance(source, (str, os.PathLike))
                                                   and os.path.isfile(source)):
        kind = _core.archive_kind(os.fspath(source) if isinstance(source, os.PathLike) else source)
    if kind == "torchscript":
        return jit_state_dict(source, backend="numpy")
    if _export.reads(kind):
        return _export.export_state_dict(source, backend="numpy", unknown_globals=unknown_globals)
    return load(source, backend="numpy", unknown_globals=unknown_globals)


def _sharded_index(source: Any) -> str | None:
    from . import _sharded, dcp

    if not isinstance(source, (str, os.PathLike)):
        return None
    path = os.fspath(source)
    if os.path.isdir(path):
        return None if dcp.is_dcp_folder(path) else _sharded.find_index(path)
    return path if _sharded.is_index(path) else None


def _convert_shards(index_path: str, folder: str, force: bool, metadata: bool,
                    progress: Callable[[int, int], None] | None, report: Callable[[str], None] | None) -> dict:
    """Each torch shard becomes the safetensors shard of the same keys (the same
    boundaries, as Hugging Face's conversion keeps them), each checked by reading
    it back; the index is written last, so a folder with an index is complete."""
    from . import _sharded

    index = _sharded.Index(index_path)
    shards = index.shards
    names = [_safetensors_name(shard, i, len(shards)) for i, shard in enumerate(shards, 1)]
    outputs = [os.path.join(folder, n) for n in [*names, SAFETENSORS_INDEX]]
    if not force and any(os.path.exists(p) for p in outputs):
        raise FileExistsError(f"{folder} already holds converted shards; pass force=True (--force) to overwrite them")
    os.makedirs(folder, exist_ok=True)
    weight_map: dict[str, str] = {}
    totals = {"tensors": 0, "shared": 0, "other_values": 0}
    total_size = 0
    for shard, name in zip(shards, names):
        summary, written = _write(load(index.shard_path(shard), backend="numpy"), os.path.join(folder, name),
                                  metadata, progress, report)
        for key, array in written.items():
            weight_map[key] = name
            total_size += array.nbytes
        for key in totals:
            totals[key] += summary[key]
    document = {"metadata": {"total_size": total_size}, "weight_map": weight_map}
    with replacing(os.path.join(folder, SAFETENSORS_INDEX)) as tmp, open(tmp, "w") as f:
        json.dump(document, f, indent=2, sort_keys=True)
    return {**totals, "shards": len(shards)}


SAFETENSORS_INDEX = "model.safetensors.index.json"


def _safetensors_name(shard: str, i: int, n: int) -> str:
    """``pytorch_model-00001-of-00003.bin`` becomes ``model-00001-of-00003.safetensors``."""
    if shard.startswith("pytorch_model") and shard.endswith(".bin"):
        return "model" + shard[len("pytorch_model"):-len(".bin")] + ".safetensors"
    return f"model-{i:05d}-of-{n:05d}.safetensors"


def _write(state: Any, target: str, metadata: bool, progress: Callable[[int, int], None] | None,
           report: Callable[[str], None] | None) -> tuple[dict, dict[str, np.ndarray]]:
    """Write one safetensors file of ``state``, read it back and compare; the
    summary and the arrays written, by name."""
    load_file, save_file = safetensors_numpy()

    tensors: dict[str, np.ndarray] = {}
    others: dict[str, Any] = {}
    _flatten(state, "", tensors, others)
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
        _check_reload(tmp, out, load_file)
    return {"tensors": len(out), "shared": len(tensors) - len(out), "other_values": len(others)}, out


def _check_reload(path: str, written: dict[str, np.ndarray], load_file: Callable[[str], dict]) -> None:
    """The file just written holds exactly ``written``, byte for byte (a regular
    file: a device or pipe written through cannot be read back)."""
    if not os.path.isfile(path):
        return
    back = load_file(path)
    if back.keys() != written.keys() or any(
            back[k].dtype != a.dtype or back[k].shape != a.shape or back[k].tobytes() != a.tobytes()
            for k, a in written.items()):
        raise RuntimeError(f"{path}: the safetensors file read back differs from what was written")
