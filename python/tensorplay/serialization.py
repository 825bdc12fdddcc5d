"""tensorplay's serialization API, mirroring ``torch.serialization``.

``load`` reads PyTorch checkpoints without running any code from them: a Rust
pickle VM builds only allowlisted types, and tensors are views of the mapped file
or copies made once, in parallel, with the GIL released.
"""
from __future__ import annotations

import argparse
import importlib.util
import io
import os
from collections.abc import Iterable
from typing import Any

from . import _allowlist, _core
from .utils.serialization import config

__all__ = [
    "load",
    "add_safe_globals",
    "clear_safe_globals",
    "get_safe_globals",
    "get_unsafe_globals_in_checkpoint",
    "ARGPARSE_PRESET",
    "safe_globals",
    "CheckpointError",
    "UnsafeCheckpointError",
    "MalformedCheckpointError",
    "LimitExceededError",
    "UnsupportedCheckpointError",
]

CheckpointError = _core.CheckpointError
UnsafeCheckpointError = _core.UnsafeCheckpointError
MalformedCheckpointError = _core.MalformedCheckpointError
LimitExceededError = _core.LimitExceededError
UnsupportedCheckpointError = _core.UnsupportedCheckpointError

def _torch_available() -> bool:
    return importlib.util.find_spec("torch") is not None


def _resolve_backend(backend: str | None) -> str:
    if backend is None:
        return "torch" if _torch_available() else "numpy"
    if backend not in ("torch", "numpy"):
        raise ValueError(f"backend must be None, 'torch' or 'numpy', not {backend!r}")
    if backend == "torch" and not _torch_available():
        raise ModuleNotFoundError("backend='torch' needs torch installed; use backend='numpy' without it")
    return backend


def _source(f: Any, mmap: bool) -> str | bytes:
    """A path to map, or the bytes of a file object from its current position."""
    if isinstance(f, (str, os.PathLike)):
        return os.fspath(f)
    if mmap:
        raise ValueError("f must be a file path in order to use the mmap argument")
    read = getattr(f, "read", None)
    if not callable(read):
        raise TypeError(f"f must be a path or a binary file object, not {type(f).__name__}")
    if isinstance(f, io.BytesIO):
        return f.getbuffer()[f.tell():].tobytes()
    data = read()
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise TypeError("f must be opened in binary mode")
    return bytes(data)


def _placement(map_location: Any, backend: str) -> dict[str, Any]:
    """How ``map_location`` turns into the core's arguments. Storages are always
    built on the CPU first; torch's ``restore_location`` then moves those that
    must move, exactly as ``torch.load`` does."""
    if map_location is None or (isinstance(map_location, str) and map_location == "cpu"):
        cpu = True
    else:
        cpu = str(map_location) == "cpu" and not callable(map_location) and not isinstance(map_location, dict)
    if backend == "numpy":
        if not cpu:
            raise ValueError(f"the numpy backend loads onto the CPU only; map_location={map_location!r} needs "
                             "backend='torch'")
        return {}
    import torch

    if map_location is None:
        return {"restore": torch.serialization.default_restore_location}
    if cpu:
        return {}
    if str(map_location) == "meta" and isinstance(map_location, (str, torch.device)):
        return {"data": "meta"}
    return {"restore": torch.serialization._get_restore_location(map_location), "restore_all": True}


def _unsafe_load(f, map_location, pickle_module, mmap, pickle_load_args):
    if not _torch_available():
        raise RuntimeError(
            "weights_only=False runs arbitrary code from the file through pickle; tensorplay never does that "
            "itself and delegates it to torch.load, which is not installed."
        )
    import torch

    kwargs = dict(pickle_load_args)
    if pickle_module is not None:
        kwargs["pickle_module"] = pickle_module
    return torch.load(f, map_location=map_location, weights_only=False, mmap=mmap, **kwargs)


def load(
    f: Any,
    map_location: Any = None,
    pickle_module: Any = None,
    *,
    weights_only: bool | None = True,
    mmap: bool | None = None,
    backend: str | None = None,
    limits: dict[str, int] | None = None,
    **pickle_load_args: Any,
) -> Any:
    """Load an object saved with ``torch.save`` without running code from the file.

    Args:
        f: a path, a PathLike, or a binary file object (read from its current position).
        map_location: where storages go, with torch's meaning: None (where they were
            saved), a str or ``torch.device``, a dict remapping saved locations, or a
            callable ``(storage, location)``. ``"meta"`` reads no payload byte. The
            numpy backend takes None or ``"cpu"``.
        pickle_module: only with ``weights_only=False``, which delegates to ``torch.load``.
        weights_only: True (the default) builds only allowlisted types. False is an
            explicit opt-in to unsafe pickle, delegated to ``torch.load``.
        mmap: tensors become views of one private copy-on-write mapping of the file
            (only the pages used are read; writes never reach the file). False copies
            each storage once. None uses ``config.load.mmap``.
        backend: ``"torch"`` (tensors, as ``torch.load`` returns them), ``"numpy"``
            (numpy arrays, no torch needed), or None for torch when it is installed.
        limits: overrides of resource limits by name (see ``tensorplay.default_limits()``).
        pickle_load_args: ``encoding`` for Python 2 strings (default ``"utf-8"``).

    Raises:
        tensorplay.CheckpointError: a subclass of ``pickle.UnpicklingError`` for a bad,
            unsafe or over-limit file, naming what was wrong and where.
        FileNotFoundError: the path does not exist.
    """
    if weights_only is None:
        weights_only = pickle_module is None
    if mmap is None:
        mmap = bool(config.load.mmap)
    if not weights_only:
        return _unsafe_load(f, map_location, pickle_module, mmap, pickle_load_args)
    if pickle_module is not None:
        raise RuntimeError("Can not safely load weights when explicit pickle_module is specified")
    encoding = pickle_load_args.pop("encoding", "utf-8")
    if pickle_load_args:
        raise TypeError(f"load() got unexpected keyword arguments {sorted(pickle_load_args)}")
    backend = _resolve_backend(backend)
    placement = _placement(map_location, backend)
    names, objects = _allowlist.resolved()
    return _core.load(
        _source(f, mmap),
        backend=backend,
        mmap=mmap,
        shared=False,
        user_names=names,
        user_objects=objects,
        limits=limits,
        encoding=encoding,
        threads=_copy_threads(),
        **placement,
    )


def _copy_threads() -> int | None:
    """Threads that copy storages; ``TENSORPLAY_THREADS`` overrides the core count."""
    value = os.environ.get("TENSORPLAY_THREADS")
    return int(value) if value else None


def get_unsafe_globals_in_checkpoint(f: Any) -> list[str]:
    """The ``module.name`` of every global in the checkpoint that the allowlist
    (built-in plus yours) does not cover, in order of first appearance, without
    building anything. ``[]`` means ``load`` will not refuse the file for a global.

    Unlike torch's, it reads every pickle protocol, legacy-format files and raw
    pickles. A file that cannot be fully read raises ``MalformedCheckpointError``
    unless an unsafe global was found before the break.
    """
    names, _ = _allowlist.resolved()
    return _core.unsafe_globals(_source(f, mmap=False), user_names=names)


#: Opt-in preset: ``add_safe_globals(ARGPARSE_PRESET)`` lets ``argparse.Namespace``
#: objects (how many training scripts save their hyperparameters) load as plain
#: attribute state.
ARGPARSE_PRESET = [argparse.Namespace]


def add_safe_globals(safe_globals: Iterable[Any]) -> None:
    """Allowlist globals for every weights-only load in this process.

    Each entry is an object (matched by ``module.qualname``) or a tuple
    ``(object, "module.qualname")`` for an object importable under another name.
    """
    _allowlist.add(safe_globals)


def clear_safe_globals() -> None:
    """Remove every entry ``add_safe_globals`` made."""
    _allowlist.clear()


def get_safe_globals() -> list[Any]:
    """The entries ``add_safe_globals`` made, as given."""
    return _allowlist.process_entries()


class safe_globals:
    """Allowlist globals inside a ``with`` block, for this thread or task only."""

    def __init__(self, safe_globals: Iterable[Any]):
        self.safe_globals = list(safe_globals)
        self._tokens: list[Any] = []

    def __enter__(self) -> None:
        self._tokens.append(_allowlist.push_context(self.safe_globals))

    def __exit__(self, *exc: object) -> None:
        _allowlist.pop_context(self._tokens.pop())
