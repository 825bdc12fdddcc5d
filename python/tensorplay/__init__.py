"""tensorplay: load PyTorch checkpoints without ever running code from them.

>>> import tensorplay
>>> state = tensorplay.load("model.pt")                     # torch tensors, or numpy without torch
>>> state = tensorplay.load("model.pt", mmap=True)          # zero-copy views of the file
>>> state = tensorplay.load("model.pt", backend="numpy")    # numpy arrays, even with torch installed
"""
import os as _os

from ._core import (
    CheckpointError,
    LimitExceededError,
    MalformedCheckpointError,
    UnsafeCheckpointError,
    UnsupportedCheckpointError,
    __version__,
)
from ._limits import default_limits, set_default_limits

# The rest is imported on first use. `tensorplay scan FILE`, which hubs run once
# per upload, needs none of it: importing it all was half of that process.
_LAZY = {
    "serialization": ("serialization", None),
    "utils": ("utils.serialization", None),
    "load": ("serialization", "load"),
    "save": ("serialization", "save"),
    "add_safe_globals": ("serialization", "add_safe_globals"),
    "clear_safe_globals": ("serialization", "clear_safe_globals"),
    "get_safe_globals": ("serialization", "get_safe_globals"),
    "safe_globals": ("serialization", "safe_globals"),
    "inspect": ("_inspect", "inspect"),
    "Inspection": ("_inspect", "Inspection"),
    "TensorSpec": ("_types", "TensorSpec"),
    "TensorInfo": ("_types", "TensorInfo"),
    "patch_torch": ("_patch", "patch_torch"),
    "patched_torch": ("_patch", "patched_torch"),
    "unpatch_torch": ("_patch", "unpatch_torch"),
    "load_memmap": ("_tensordict", "load_memmap"),
}

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
    try:
        module_name, attribute = _LAZY[name]
    except KeyError:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None
    import importlib

    module = importlib.import_module(f"{__name__}.{module_name}")
    # A submodule by name: importing it (and `utils`' config) set it here already.
    value = getattr(module, attribute) if attribute else globals()[name]
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})


if "TENSORPLAY_PATCH_TORCH" in _os.environ:
    from ._patch import patch_from_environment as _patch_from_environment

    _patch_from_environment()
