"""tensorplay: load PyTorch checkpoints without ever running code from them.

>>> import tensorplay
>>> state = tensorplay.load("model.pt")                     # torch tensors, or numpy without torch
>>> state = tensorplay.load("model.pt", mmap=True)          # zero-copy views of the file
>>> state = tensorplay.load("model.pt", backend="numpy")    # numpy arrays, even with torch installed
"""
from . import serialization
from ._core import (
    CheckpointError,
    LimitExceededError,
    MalformedCheckpointError,
    UnsafeCheckpointError,
    UnsupportedCheckpointError,
    __version__,
)
from ._inspect import Inspection, inspect
from ._limits import default_limits, set_default_limits
from ._patch import patch_from_environment as _patch_from_environment
from ._patch import patch_torch, patched_torch, unpatch_torch
from ._types import TensorInfo, TensorSpec
from .serialization import add_safe_globals, clear_safe_globals, get_safe_globals, load, safe_globals, save

__all__ = [
    "load",
    "load_memmap",
    "save",
    "patch_torch",
    "patched_torch",
    "unpatch_torch",
    "serialization",
    "add_safe_globals",
    "clear_safe_globals",
    "get_safe_globals",
    "safe_globals",
    "default_limits",
    "set_default_limits",
    "TensorSpec",
    "TensorInfo",
    "inspect",
    "Inspection",
    "CheckpointError",
    "UnsafeCheckpointError",
    "MalformedCheckpointError",
    "LimitExceededError",
    "UnsupportedCheckpointError",
    "__version__",
]


def __getattr__(name: str):
    # TensorDict support is imported on first use: it is most of import time
    # (dataclasses, hashlib), and `tensorplay scan` runs once per uploaded file.
    if name == "load_memmap":
        from ._tensordict import load_memmap

        globals()[name] = load_memmap
        return load_memmap
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})


_patch_from_environment()
