"""Routing ``torch.load`` (and every library that calls it) through tensorplay.

Only the name ``torch.load`` (and ``torch.serialization.load``) is replaced; code
that did ``from torch import load`` before patching keeps torch's function.
``weights_only=False`` keeps its meaning: an explicit opt-in that goes to torch.
"""
from __future__ import annotations

import contextlib
import functools
import os
import threading
from collections.abc import Iterator
from typing import Any

_lock = threading.Lock()
_original: Any = None


_TRUE = ("1", "y", "yes", "true")


def _is_safetensors_path(f: Any) -> bool:
    return isinstance(f, (str, os.PathLike)) and os.fspath(f).endswith(".safetensors")


def _torch_loads_weights_only(weights_only: bool | None, pickle_module: Any) -> bool:
    """Whether ``torch.load`` would make this call a weights-only load, after its
    environment switches: ``TORCH_FORCE_WEIGHTS_ONLY_LOAD`` makes every load one,
    ``TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD`` every load that does not pass
    ``weights_only`` a pickle load. With both set torch raises, so torch gets it."""
    force = os.getenv("TORCH_FORCE_WEIGHTS_ONLY_LOAD", "0").lower() in _TRUE
    force_no = os.getenv("TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD", "0").lower() in _TRUE
    if force:
        return not force_no
    if weights_only is None:
        return pickle_module is None and not force_no
    return bool(weights_only)


def _load_with_torchs_settings(f: Any, map_location: Any, pickle_module: Any, mmap: Any,
                               pickle_load_args: dict[str, Any], stub: bool = False) -> Any:
    """tensorplay's weights-only load, under the settings torch.load itself reads:
    ``torch.utils.serialization.config.load.mmap``, torch's mmap flags and byte
    order, and (as in every load) torch's safe globals and ``skip_data``."""
    import mmap as mmap_module

    import torch
    from torch.utils.serialization import config as torch_config

    from . import _loading, _settings

    mmap = bool(torch_config.load.mmap if mmap is None else mmap)
    shared = torch.serialization.get_default_mmap_options() == mmap_module.MAP_SHARED
    endianness = _settings.endianness_name(torch.serialization.get_default_load_endianness())
    if not stub:
        return _loading.weights_only_load(f, map_location, pickle_module, mmap, shared, endianness, "torch",
                                          None, pickle_load_args, api="torch")
    from . import _stub

    with _stub.warning():
        return _loading.weights_only_load(f, map_location, pickle_module, mmap, shared, endianness, "torch",
                                          None, pickle_load_args, stub=True, api="torch")


def stubs_for_patch(unknown_globals: str | None) -> bool:
    """Whether a patched loader stands stubs in: ``unknown_globals`` says so, or,
    when it is None, ``TENSORPLAY_UNKNOWN_GLOBALS=stub`` does. Shared by every patch."""
    if unknown_globals not in (None, "error", "stub"):
        raise ValueError(f"unknown_globals must be 'error' or 'stub', not {unknown_globals!r}")
    if unknown_globals is None:
        return os.environ.get("TENSORPLAY_UNKNOWN_GLOBALS", "").strip().lower() == "stub"
    return unknown_globals == "stub"


def switched_on(variable: str) -> bool:
    """Whether an environment switch such as ``TENSORPLAY_PATCH_TORCH`` is on."""
    return os.environ.get(variable, "").strip().lower() in ("1", "true", "yes", "on")


def patch_torch(unknown_globals: str | None = None) -> None:
    """Make ``torch.load`` load through ``tensorplay.load`` for the whole process.

    ``unknown_globals="stub"`` (or ``TENSORPLAY_UNKNOWN_GLOBALS=stub`` in the
    environment) makes its weights-only loads stand a ``tensorplay.Stub`` in for
    each global outside the allowlist instead of refusing the file; never the
    default. A patch already in place keeps its setting."""
    global _original
    import torch

    stub = stubs_for_patch(unknown_globals)
    with _lock:
        if _original is not None:
            return
        original = torch.load

        @functools.wraps(original)
        def load(f, map_location=None, pickle_module=None, *, weights_only=None, mmap=None, **pickle_load_args):
            if not _torch_loads_weights_only(weights_only, pickle_module) or _is_safetensors_path(f):
                return original(f, map_location, pickle_module, weights_only=weights_only, mmap=mmap,
                                **pickle_load_args)
            return _load_with_torchs_settings(f, map_location, pickle_module, mmap, pickle_load_args, stub)

        load.__tensorplay_patch__ = True
        torch.load = load
        torch.serialization.load = load
        _original = original


def unpatch_torch() -> None:
    """Give ``torch.load`` back its original function."""
    global _original
    import torch

    with _lock:
        if _original is None:
            return
        torch.load = _original
        torch.serialization.load = _original
        _original = None


def is_patched() -> bool:
    return _original is not None


@contextlib.contextmanager
def patched_torch(unknown_globals: str | None = None) -> Iterator[None]:
    """``torch.load`` goes through tensorplay inside the ``with`` block."""
    was_patched = is_patched()
    patch_torch(unknown_globals)
    try:
        yield
    finally:
        if not was_patched:
            unpatch_torch()


def patch_from_environment() -> None:
    """``TENSORPLAY_PATCH_TORCH=1`` patches torch when tensorplay is imported."""
    if switched_on("TENSORPLAY_PATCH_TORCH"):
        patch_torch()
