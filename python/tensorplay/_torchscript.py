"""TorchScript archives read as data: ``data.pkl``'s modules become stubs (their
``__torch__`` classes are defined only by the archive's code, which is never
imported or run) and ``jit_state_dict`` names their tensors as
``torch.jit.load(path).state_dict()`` does. Which attributes are parameters and
buffers is written only in ``code/``: the core reads those two lines of each
class and nothing else there (``_core.torchscript_module_lists``)."""

from __future__ import annotations

import os
import warnings
from typing import Any, Literal

from . import _core
from ._stub import Stub, StubWarning

_Source = str | os.PathLike[str] | bytes | memoryview


def jit_state_dict(path: _Source, *, backend: Literal["torch", "numpy"] | None = None,
                   limits: dict[str, int] | None = None) -> dict[str, Any]:
    """The parameters and buffers of the TorchScript archive at ``path`` (a path,
    or the archive's bytes), named and ordered as ``torch.jit.load(path).state_dict()``
    names them: each module's parameters, then its buffers, then its submodules'
    entries under ``<attribute>.``; a tensor two modules share is under each name.
    Nothing from the archive is run: ``data.pkl`` loads as
    ``load(path, unknown_globals="stub")`` loads it."""
    from . import _limits, _load_file

    source = os.fspath(path) if isinstance(path, os.PathLike) else path
    merged = _limits.merged(limits)
    lists = _core.torchscript_module_lists(source, limits=merged)
    with warnings.catch_warnings():
        # Every TorchScript module is a stub: the warning would say only that.
        warnings.simplefilter("ignore", StubWarning)
        root = _load_file.load(source, unknown_globals="stub", backend=backend, limits=limits)
    if not isinstance(root, Stub) or root.qualname not in lists:
        raise _error(f"its data.pkl holds {_what(root)}, not a module class its code/ declares")
    out: dict[str, Any] = {}
    # Iterative, as the stub tree is as deep as the file made it.
    pending: list[tuple[str, Stub]] = [("", root)]
    while pending:
        prefix, module = pending.pop()
        parameters, buffers = lists[module.qualname]
        state = module.state
        if not isinstance(state, dict):
            # A module whose class defines __setstate__ is rebuilt by that code from a state of its
            # own shape: which of its values are parameters only running the code would tell.
            raise _error(f"module {prefix or '<root>'} ({module.qualname}) has no attribute dict but "
                         f"{_what(state)} its class's __setstate__ code takes apart, which is never run")
        for name in (*parameters, *buffers):
            if name not in state:
                raise _error(f"module {prefix or '<root>'} ({module.qualname}) lists {name!r} in its code "
                             "but has no such attribute")
            # torch's state_dict leaves out a parameter or buffer that is None.
            if state[name] is not None:
                out[prefix + name] = state[name]
        children = []
        for name, value in state.items():
            if isinstance(value, Stub) and value.qualname in lists:
                children.append((f"{prefix}{name}.", value))
            elif isinstance(value, Stub) and _looks_like_module(value):
                raise _error(f"module {prefix}{name} ({value.qualname}) has no __parameters__ and __buffers__ "
                             "in the archive's code/")
        pending.extend(reversed(children))
    return out


def is_torchscript_class(stub: Stub) -> bool:
    """Whether ``stub`` stands in for a class a TorchScript archive's code defines."""
    return stub.module == "__torch__" or stub.module.startswith("__torch__.")


def _looks_like_module(stub: Stub) -> bool:
    """A TorchScript module's state always holds ``training``; other objects' rarely."""
    return is_torchscript_class(stub) and isinstance(stub.state, dict) and "training" in stub.state


def _what(value: Any) -> str:
    return f"a stub of {value.qualname}" if isinstance(value, Stub) else f"a {type(value).__name__}"


def _error(reason: str) -> _core.MalformedCheckpointError:
    return _core.error("malformed_archive", f"TorchScript archive: {reason}")
