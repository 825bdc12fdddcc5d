"""The process's settings that every reader and writer consults: the byte order
assumed for files without a ``byteorder`` record, the mmap flags, CRC-32 on
save, ``skip_data`` blocks, the backend chosen, and the copy threads.

They live below every loader (the torch formats, DCP, TensorDict folders) so
that each reads them here; ``tensorplay.serialization`` re-exports the public
ones under torch's names."""
from __future__ import annotations

import enum
import importlib.util
import mmap as _mmap
import os
import sys
import threading
from typing import Any, Literal

from .utils.serialization import config

# What a load builds: torch tensors, or numpy arrays (no torch needed).
Backend = Literal["torch", "numpy"]
# The core's names for a byte order (``LoadEndianness``).
Endianness = Literal["native", "little", "big"]


class LoadEndianness(enum.Enum):
    """The byte order assumed for files without a ``byteorder`` record (torch's meaning)."""

    NATIVE = 1
    LITTLE = 2
    BIG = 3


def get_default_load_endianness() -> LoadEndianness | None:
    """The byte order ``set_default_load_endianness`` set (None: little-endian)."""
    return config.load.endianness


def set_default_load_endianness(endianness: LoadEndianness | None) -> None:
    """What a file without a ``byteorder`` record is: None or LITTLE (little-endian, the
    default), BIG, or NATIVE (never swap). A ``byteorder`` record always wins."""
    if endianness is not None and not isinstance(endianness, LoadEndianness):
        # torch.serialization.LoadEndianness members are accepted by name.
        if type(endianness).__name__ != "LoadEndianness":
            raise TypeError("Invalid argument type in function set_default_load_endianness")
        endianness = LoadEndianness[endianness.name]
    config.load.endianness = endianness


_ENDIANNESS: dict[str, Endianness] = {"LITTLE": "little", "BIG": "big", "NATIVE": "native"}


def endianness_name(setting: Any) -> Endianness:
    """The core's name for a ``LoadEndianness``, tensorplay's or torch's (None: little)."""
    return "little" if setting is None else _ENDIANNESS[setting.name]


def endianness() -> Endianness:
    """The core's name for the byte order in force."""
    return endianness_name(config.load.endianness)


def get_default_mmap_options() -> int | None:
    """The mmap flags ``set_default_mmap_options`` set (None: ``mmap.MAP_PRIVATE``)."""
    return config.load.mmap_flags


class set_default_mmap_options:
    """``mmap.MAP_PRIVATE`` (the default: writes to loaded tensors stay in memory) or
    ``mmap.MAP_SHARED`` (writes reach the file). Works as a call, which persists,
    and as a context manager, which restores the previous flags on exit."""

    def __init__(self, flags: int):
        if sys.platform == "win32":
            raise RuntimeError("Changing the default mmap options is currently not supported for Windows")
        if flags not in (_mmap.MAP_PRIVATE, _mmap.MAP_SHARED):
            raise ValueError("Invalid argument in function set_default_mmap_options, expected mmap.MAP_PRIVATE or "
                             f"mmap.MAP_SHARED, but got {flags}")
        self.previous = config.load.mmap_flags
        config.load.mmap_flags = flags

    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        config.load.mmap_flags = self.previous


def shared_mapping() -> bool:
    """Whether mapped loads write through to the file (``mmap.MAP_SHARED``)."""
    return config.load.mmap_flags == _mmap.MAP_SHARED


def get_crc32_options() -> bool:
    """Whether ``save`` computes each record's CRC-32 (``set_crc32_options``)."""
    return bool(config.save.compute_crc32)


def set_crc32_options(compute_crc32: bool) -> None:
    """Whether ``save`` computes the CRC-32 of every record (zeros otherwise)."""
    config.save.compute_crc32 = bool(compute_crc32)


_skip = threading.local()


class skip_data:
    """Inside this block (per thread), ``load`` gives tensors the right shape, dtype and
    storage sharing without reading their bytes (the memory is uninitialised), and
    ``save`` writes the structure and reserves the space of every storage without
    writing its bytes."""

    def __init__(self, materialize_fake_tensors: bool = False):
        self.materialize_fake_tensors = materialize_fake_tensors
        self._saved: list[Any] = []

    def __enter__(self) -> skip_data:
        self._saved.append(getattr(_skip, "active", None))
        _skip.active = self
        return self

    def __exit__(self, *exc: object) -> None:
        _skip.active = self._saved.pop()


def own_skip_data() -> skip_data | None:
    """tensorplay's own ``skip_data`` block in force in this thread, or None."""
    return getattr(_skip, "active", None)


def skipping() -> skip_data | None:
    """The ``skip_data`` block in force in this thread, tensorplay's or torch's
    (``torch.serialization.skip_data`` works here as it does for torch), or None."""
    active = own_skip_data()
    if active is None:
        torch_state = getattr(getattr(sys.modules.get("torch"), "serialization", None), "_serialization_tls", None)
        if getattr(torch_state, "skip_data", False):
            return skip_data(getattr(torch_state, "materialize_fake_tensors", False))
    return active


def fake_mode_active() -> bool:
    """Whether a torch FakeTensorMode is in force (only when torch was imported)."""
    if "torch" not in sys.modules:
        return False
    import torch

    return torch._guards.detect_fake_mode(None) is not None


def torch_available() -> bool:
    return importlib.util.find_spec("torch") is not None


def resolve_backend(backend: Backend | None) -> Backend:
    """The backend a load uses: torch when installed, unless asked otherwise."""
    if backend is None:
        return "torch" if torch_available() else "numpy"
    if backend not in ("torch", "numpy"):
        raise ValueError(f"backend must be None, 'torch' or 'numpy', not {backend!r}")
    if backend == "torch" and not torch_available():
        raise ModuleNotFoundError("backend='torch' needs torch installed; use backend='numpy' without it")
    return backend


def copy_threads() -> int | None:
    """Threads that copy storages; ``TENSORPLAY_THREADS`` overrides the core count."""
    value = os.environ.get("TENSORPLAY_THREADS")
    return int(value) if value else None
