"""tensorplay's serialization API, mirroring ``torch.serialization``.

``load`` reads PyTorch checkpoints without running any code from them: a Rust
pickle VM builds only allowlisted types, and tensors are views of the mapped file
or copies made once, in parallel, with the GIL released.
"""
from __future__ import annotations

import contextlib
from collections.abc import Iterable
from typing import Any, Literal

from . import _allowlist, _core, _limits, _load_file, _loading, _paths, _settings, _stub
from ._settings import (
    LoadEndianness,
    get_crc32_options,
    get_default_load_endianness,
    get_default_mmap_options,
    set_crc32_options,
    set_default_load_endianness,
    set_default_mmap_options,
    skip_data,
)
from .utils.serialization import config

__all__ = [
    "load",
    "save",
    "add_safe_globals",
    "clear_safe_globals",
    "get_safe_globals",
    "get_unsafe_globals_in_checkpoint",
    "LoadEndianness",
    "get_default_load_endianness",
    "set_default_load_endianness",
    "get_default_mmap_options",
    "set_default_mmap_options",
    "get_crc32_options",
    "set_crc32_options",
    "register_package",
    "skip_data",
    "ARGPARSE_PRESET",
    "PATHLIB_PRESET",
    "LIGHTNING_PRESET",
    "OMEGACONF_PRESET",
    "TRANSFORMERS_PRESET",
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

def register_package(priority: int, tagger: Any, deserializer: Any) -> None:
    """Register how storages of a device are tagged when saved and restored when
    loaded: torch's ``register_package``, on torch's own registry, so that
    ``torch.save``, ``torch.load``, ``tensorplay.save`` and ``tensorplay.load`` all
    follow it.

    Args:
        priority: lower runs first; torch's own entries are 10 (CPU) to 26.
        tagger: ``tagger(storage) -> str | None``, the location ``save`` records for
            a storage; the first one that returns a string wins.
        deserializer: ``deserializer(storage, location) -> storage | None``: a CPU
            storage holding the loaded bytes, and the location it was saved on (or
            the one ``map_location`` maps it to); the first one that returns a
            storage wins.

    Needs torch: taggers and deserializers take torch storages. The numpy backend
    loads every storage onto the CPU and has no devices to register.
    """
    if not _settings.torch_available():
        raise RuntimeError("register_package needs torch: taggers and deserializers take torch storages, and the "
                           "numpy backend loads every storage onto the CPU")
    import torch

    torch.serialization.register_package(priority, tagger, deserializer)


def _unsafe_load(f, map_location, pickle_module, mmap, pickle_load_args):
    if not _settings.torch_available():
        raise RuntimeError(
            "weights_only=False runs arbitrary code from the file through pickle; tensorplay never does that "
            "itself and delegates it to torch.load, which is not installed."
        )
    import torch

    kwargs = dict(pickle_load_args)
    if pickle_module is not None:
        kwargs["pickle_module"] = pickle_module
    skipping = _settings.own_skip_data()
    # tensorplay's skip_data block, handed on as torch's own.
    with torch.serialization.skip_data(skipping.materialize_fake_tensors) if skipping else contextlib.nullcontext():
        return torch.load(f, map_location=map_location, weights_only=False, mmap=mmap, **kwargs)


def load(
    f: Any,
    map_location: Any = None,
    pickle_module: Any = None,
    *,
    weights_only: bool | None = True,
    mmap: bool | None = None,
    backend: Literal["torch", "numpy"] | None = None,
    limits: dict[str, int] | None = None,
    unknown_globals: Literal["error", "stub"] = "error",
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
        limits: resource limits for this call, by name (``tensorplay.default_limits()`` lists
            them; ``tensorplay.set_default_limits`` changes them for the process).
        unknown_globals: ``"error"`` (the default) refuses a global outside the
            allowlist, naming it. ``"stub"`` builds a :class:`tensorplay.Stub` in its
            place, which records how the file used it (call arguments, state,
            items) and is never imported or called; tensors and allowlisted values
            inside it are built as usual. Dangerous globals are refused either way.
            The load then warns once (``tensorplay.StubWarning``) naming them.
        pickle_load_args: ``encoding`` for Python 2 strings (default ``"utf-8"``).

    Raises:
        tensorplay.CheckpointError: a subclass of ``pickle.UnpicklingError`` for a bad,
            unsafe or over-limit file, naming what was wrong and where.
        FileNotFoundError: the path does not exist.
    """
    if weights_only is None:
        weights_only = pickle_module is None
    if unknown_globals not in ("error", "stub"):
        raise ValueError(f"unknown_globals must be 'error' or 'stub', not {unknown_globals!r}")
    mmap = bool(config.load.mmap if mmap is None else mmap)
    if _paths.is_url(f):
        return _load_url(f, map_location, weights_only, backend, limits, unknown_globals, pickle_load_args)
    if not weights_only:
        if unknown_globals == "stub":
            raise ValueError("unknown_globals='stub' is a weights-only load; weights_only=False runs the file's code")
        return _unsafe_load(f, map_location, pickle_module, mmap, pickle_load_args)
    shared = _settings.shared_mapping()
    if unknown_globals == "error":
        return _loading.weights_only_load(f, map_location, pickle_module, mmap, shared, _settings.endianness(),
                                          backend, limits, pickle_load_args)
    with _stub.warning():
        return _loading.weights_only_load(f, map_location, pickle_module, mmap, shared, _settings.endianness(),
                                          backend, limits, pickle_load_args, stub=True)


def _load_url(url: str, map_location: Any, weights_only: bool, backend: _settings.Backend | None,
              limits: dict[str, int] | None, unknown_globals: Literal["error", "stub"],
              pickle_load_args: dict[str, Any]) -> Any:
    """A checkpoint where it lives: its directory, pickles and local headers by
    ranges, then its storages (none for ``map_location="meta"``), into a sparse
    local copy the weights-only load reads once (see :mod:`tensorplay._remote_mirror`)."""
    if not weights_only:
        raise ValueError(f"{url}: a URL is loaded weights-only; weights_only=False would hand it to torch.load")
    from . import _remote_mirror

    with _remote_mirror.mirrored(url, storages=map_location != "meta") as path:
        return load(path, map_location, weights_only=True, mmap=False, backend=backend, limits=limits,
                    unknown_globals=unknown_globals, **pickle_load_args)


def save(obj: Any, f: Any, pickle_module: Any = None, pickle_protocol: int = 2,
         _use_new_zipfile_serialization: bool = True, _disable_byteorder_record: bool = False) -> None:
    """Save ``obj`` to ``f`` as ``torch.save`` does, record for record.

    torch tensors are written exactly as torch writes them (each storage once, views
    keep sharing it, Parameters, ``requires_grad`` and ``_metadata`` survive); numpy
    arrays are written as the equivalent tensors, so ``torch.load`` opens the file
    without tensorplay, and a view of a larger array keeps sharing its base.
    Objects weights-only loading cannot rebuild are still saved, as torch saves them.

    ``f`` is a path, a PathLike or a writable binary file object. A path is written
    to a temporary file in the same folder, fsynced and renamed over the target, so
    a failed save leaves the old file intact. ``config.save`` (alignment, CRC-32) and
    ``skip_data`` apply; ``_use_new_zipfile_serialization=False`` writes the legacy
    format torch still reads.
    """
    from . import _save

    _save.save(obj, f, pickle_module, pickle_protocol, _use_new_zipfile_serialization, _disable_byteorder_record)


def get_unsafe_globals_in_checkpoint(f: Any) -> list[str]:
    """The ``module.name`` of every global in the checkpoint that the allowlist
    (built-in plus yours) does not cover, in order of first appearance, without
    building anything. ``[]`` means ``load`` will not refuse the file for a global.

    Unlike torch's, it reads every pickle protocol, legacy-format files and raw
    pickles, and files where they live (``http(s)://``, ``hf://``, ``s3://`` and
    other fsspec URLs, read by ranges: see ``tensorplay.scanner.scan``). A file
    that cannot be fully read raises ``MalformedCheckpointError`` unless an
    unsafe global was found before the break; a URL that cannot be read as
    asked raises an ``OSError``.
    """
    if _paths.is_url(f):
        from . import _remote

        return _remote.unsafe_globals(f, _allowlist.names())
    # Positional arguments: a scan takes tens of microseconds, and matching
    # keywords is a measurable part of a first call.
    source = f if isinstance(f, str) else _load_file.source(f, mmap=False)[0]
    return _core.unsafe_globals(source, _allowlist.names(), _limits.merged(None))


# Opt-in presets, never on by default (see _presets): built on first use, since
# argparse alone is a third of ``import tensorplay``.
ARGPARSE_PRESET: list[type]
PATHLIB_PRESET: list[type]
LIGHTNING_PRESET: list[type]
OMEGACONF_PRESET: list[Any]  # classes, and (stand-in, "omegaconf name") pairs
TRANSFORMERS_PRESET: list[Any]  # classes, and (stand-in, "accelerate name") pairs


def __getattr__(name: str) -> Any:
    # Any other missing name (a `from .serialization import x` probe) imports nothing.
    if name.endswith("_PRESET"):
        from ._presets import PRESETS

        if name in PRESETS:
            globals()[name] = preset = PRESETS[name]()
            return preset
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})


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
    """The entries ``add_safe_globals`` made, as given, then those of the
    ``safe_globals`` blocks in force here. (torch's own list,
    ``torch.serialization.get_safe_globals()``, counts too but is not repeated.)"""
    return _allowlist.current()


class safe_globals:
    """Allowlist globals inside a ``with`` block, for this thread or task only."""

    def __init__(self, safe_globals: Iterable[Any]):
        self.safe_globals = list(safe_globals)
        self._tokens: list[Any] = []

    def __enter__(self) -> None:
        self._tokens.append(_allowlist.push_context(self.safe_globals))

    def __exit__(self, *exc: object) -> None:
        _allowlist.pop_context(self._tokens.pop())
