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

# Type checkers read the lazy names' real types from here; at run time the
# block never runs (and `typing` is not imported for its TYPE_CHECKING).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from . import dcp as dcp
    from . import pickle as pickle
    from . import scanner as scanner
    from . import serialization as serialization
    from . import utils as utils
    from ._export import export_constants as export_constants
    from ._export import export_state_dict as export_state_dict
    from ._inspect import Inspection as Inspection
    from ._inspect import inspect as inspect
    from ._modules import module_state_dict as module_state_dict
    from ._patch import patch_torch as patch_torch
    from ._patch import patched_torch as patched_torch
    from ._patch import unpatch_torch as unpatch_torch
    from ._patch_tensordict import patch_tensordict as patch_tensordict
    from ._patch_tensordict import patched_tensordict as patched_tensordict
    from ._patch_tensordict import unpatch_tensordict as unpatch_tensordict
    from ._stub import Stub as Stub
    from ._stub import StubWarning as StubWarning
    from ._tensordict import load_memmap as load_memmap
    from ._torchscript import jit_state_dict as jit_state_dict
    from ._types import TensorInfo as TensorInfo
    from ._types import TensorSpec as TensorSpec
    from .serialization import add_safe_globals as add_safe_globals
    from .serialization import clear_safe_globals as clear_safe_globals
    from .serialization import get_safe_globals as get_safe_globals
    from .serialization import load as load
    from .serialization import safe_globals as safe_globals
    from .serialization import save as save

# The rest is imported on first use. `tensorplay scan FILE`, which hubs run once
# per upload, needs none of it: importing it all was half of that process.
_LAZY = {
    "serialization": ("serialization", None),
    "scanner": ("scanner", None),
    "dcp": ("dcp", None),
    "pickle": ("pickle", None),
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
    "patch_tensordict": ("_patch_tensordict", "patch_tensordict"),
    "patched_tensordict": ("_patch_tensordict", "patched_tensordict"),
    "unpatch_tensordict": ("_patch_tensordict", "unpatch_tensordict"),
    "load_memmap": ("_tensordict", "load_memmap"),
    "jit_state_dict": ("_torchscript", "jit_state_dict"),
    "module_state_dict": ("_modules", "module_state_dict"),
    "export_state_dict": ("_export", "export_state_dict"),
    "export_constants": ("_export", "export_constants"),
    "Stub": ("_stub", "Stub"),
    "StubWarning": ("_stub", "StubWarning"),
}

__all__ = [
    "load",
    "Stub",
    "StubWarning",
    "load_memmap",
    "jit_state_dict",
    "module_state_dict",
    "export_state_dict",
    "export_constants",
    "save",
    "patch_torch",
    "patched_torch",
    "unpatch_torch",
    "patch_tensordict",
    "patched_tensordict",
    "unpatch_tensordict",
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


# Not for type checkers, which see every lazy name imported above: with it, a
# misspelt name would be Any to them instead of an error.
if not TYPE_CHECKING:

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

if "TENSORPLAY_PATCH_TENSORDICT" in _os.environ:
    from ._patch_tensordict import patch_from_environment as _patch_tensordict_from_environment

    _patch_tensordict_from_environment()
