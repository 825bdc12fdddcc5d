"""Whole pickled ``nn.Module``s (``torch.save(model)``) read as data: in stub mode
each module is a :class:`Stub` holding the attribute dict torch pickled, and
``module_state_dict`` walks that tree as ``nn.Module.state_dict()`` walks a live
one. Nothing of the modules' classes is imported or run, so what only their code
adds (``get_extra_state``, an overridden ``_save_to_state_dict``, state-dict
hooks) is not there."""

from __future__ import annotations

import os
import sys
import warnings
from typing import Any, Literal

from . import _core
from ._stub import Stub, StubWarning
from ._torchscript import is_torchscript_class

_Source = str | os.PathLike[str] | bytes | memoryview

# What nn.Module.__getstate__ pickles and state_dict() reads.
_PARAMETERS, _BUFFERS, _MODULES, _NOT_PERSISTENT = "_parameters", "_buffers", "_modules", "_non_persistent_buffers_set"


def module_state_dict(source: Stub | _Source, *, backend: Literal["torch", "numpy"] | None = None,
                      limits: dict[str, int] | None = None) -> dict[str, Any]:
    """The parameters and persistent buffers of a whole pickled module, named and
    ordered as ``torch.load(path, weights_only=False).state_dict()`` names them:
    each module's parameters, then its buffers but those in its
    ``_non_persistent_buffers_set``, then its submodules' entries under
    ``<name>.``; ``None`` entries left out; a tensor or module two names share is
    under each. ``source`` is a path, the file's bytes (zip or legacy format,
    loaded as ``load(source, unknown_globals="stub")`` loads it), or the root
    :class:`Stub` such a load returned. Parameters come detached, as torch gives them."""
    from . import _limits, _load_file

    if isinstance(source, Stub):
        root = source
    else:
        with warnings.catch_warnings():
            # Every module class is a stub: the warning would say only that.
            warnings.simplefilter("ignore", StubWarning)
            root = _load_file.load(os.fspath(source) if isinstance(source, os.PathLike) else source,
                        unknown_globals="stub", backend=backend, limits=limits)
    if not isinstance(root, Stub):
        raise _error(f"the file holds a {type(root).__name__}, not a pickled nn.Module")
    if is_torchscript_class(root):
        raise _error(f"the file holds a TorchScript module ({root.qualname}): use tensorplay.jit_state_dict")
    max_visits = {**_limits.default_limits(), **(limits or {})}["max_nodes"]
    torch = sys.modules.get("torch")
    parameter = torch.nn.Parameter if torch is not None else None
    out: dict[str, Any] = {}
    on_path: set[int] = set()  # the modules being walked, to refuse one that holds itself
    visits = 0
    # Iterative, as the tree is as deep as the file made it; a False entry leaves a module.
    pending: list[tuple[str, Stub, bool]] = [("", root, True)]
    while pending:
        prefix, module, entering = pending.pop()
        if not entering:
            on_path.discard(id(module))
            continue
        where = prefix[:-1] or "<root>"
        if id(module) in on_path:
            raise _error(f"module {where} ({module.qualname}) contains itself")
        visits += 1
        if visits > max_visits:
            # Shared modules are walked under each name, as torch walks them: a file
            # can share them so often that the walk would not end.
            raise _core.error("limit", f"whole pickled module: the state dict walks more than {max_visits} "
                              f"modules (at {where})", limit="max_nodes", maximum=max_visits)
        on_path.add(id(module))
        pending.append((prefix, module, False))
        state = _attributes(module, where)
        parameters, buffers, children = (_dict_of(state, key, module, where)
                                         for key in (_PARAMETERS, _BUFFERS, _MODULES))
        # Modules pickled before torch had non-persistent buffers lack the set; torch's
        # __setstate__ gives them an empty one.
        not_persistent = state.get(_NOT_PERSISTENT, set())
        if not isinstance(not_persistent, (set, frozenset)):
            raise _error(f"module {where} ({module.qualname}) has a {type(not_persistent).__name__} "
                         f"{_NOT_PERSISTENT}, not a set")
        for kind, entries in (("parameter", parameters), ("buffer", buffers)):
            for name, value in entries.items():
                if value is None or (kind == "buffer" and name in not_persistent):
                    continue
                if not _is_tensor(value):
                    raise _error(f"module {where} ({module.qualname}) has {kind} {name!r} that is a "
                                 f"{type(value).__name__}, not a tensor")
                if parameter is not None and isinstance(value, parameter):
                    value = value.detach()
                out[prefix + name] = value
        named = []
        for name, child in children.items():
            if child is None:
                continue
            if not isinstance(child, Stub):
                raise _error(f"module {where} ({module.qualname}) has submodule {name!r} that is a "
                             f"{type(child).__name__}, not a module")
            named.append((f"{prefix}{name}.", child, True))
        pending.extend(reversed(named))
    return out


def is_module(value: Any) -> bool:
    """Whether ``value`` is the stub of a pickled ``nn.Module``: its attribute dict
    holds the three dicts every module has (``_parameters``, ``_buffers``, ``_modules``)."""
    if not isinstance(value, Stub) or is_torchscript_class(value):
        return False
    try:
        state = _attributes(value, "")
    except _core.CheckpointError:
        return False
    return all(isinstance(state.get(key), dict) for key in (_PARAMETERS, _BUFFERS, _MODULES))


def _attributes(module: Stub, where: str) -> dict[str, Any]:
    """The attribute dict a module's BUILD gave it (a ``(dict, slots)`` pair merged)."""
    state = module.state
    if isinstance(state, tuple) and len(state) == 2 and isinstance(state[0], dict) and (
            state[1] is None or isinstance(state[1], dict)):
        state = {**state[0], **(state[1] or {})}
    if not isinstance(state, dict):
        raise _error(f"module {where} ({module.qualname}) has {_described(state)} as its state, "
                     "not the attribute dict of an nn.Module")
    return state


def _dict_of(state: dict[str, Any], key: str, module: Stub, where: str) -> dict[str, Any]:
    value = state.get(key)
    if not isinstance(value, dict):
        got = "no" if key not in state else f"a {type(value).__name__}"
        raise _error(f"module {where} ({module.qualname}) has {got} {key}, not a dict: not an nn.Module")
    bad = next((k for k in value if not isinstance(k, str)), None)
    if bad is not None:
        raise _error(f"module {where} ({module.qualname}) has a {type(bad).__name__} key in its {key}")
    return value


def _is_tensor(value: Any) -> bool:
    """A tensor of either backend (a torch tensor or parameter, a numpy array)."""
    return not isinstance(value, Stub) and hasattr(value, "shape") and hasattr(value, "dtype")


def _described(value: Any) -> str:
    if value is None:
        return "nothing"
    if isinstance(value, list):
        return "several BUILD states"
    return f"a {type(value).__name__}"


def _error(reason: str) -> _core.MalformedCheckpointError:
    return _core.error("malformed_archive", f"whole pickled module: {reason}")
