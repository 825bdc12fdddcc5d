"""Routing tensordict's own loader (``TensorDict.load_memmap``, ``TensorDict.load``
and the same methods of every tensorclass) through ``tensorplay.load_memmap``.

Where the load is intercepted: tensordict defines ``load_memmap`` once, on a mixin
of ``TensorDictBase``, and every other class reaches that one function, in one of
four shapes: inherited (``TensorDict``, ``LazyStackedTensorDict``...), a copy made
when a ``@tensorclass`` is decorated (``classmethod(_unchecked_copy(f))``: one cached
copy, shared by every such class), a wrapper around the function bound to the
class (``TensorClass`` subclasses, ``NonTensorData``...), or the function bound to
``TensorDictBase`` (``TensorClass`` itself). ``load`` and ``load_memmap_`` call
``cls.load_memmap``. Replacing attributes would have to follow each shape, and
the classes decorated while the patch is in place would keep the patched copy
after it is removed. So the patch replaces the *code* of that function and of
its copies instead: every shape, and every class defined before or after
patching, runs tensorplay's loader, and unpatching puts the original code back;
no attribute of any class changes.

What stays tensordict's:

- a reload that tensordict does of data this process has just written from memory
  (``save(..., archive=True)`` and ``memmap_like(..., atomic=True)`` return the
  saved data loaded back): it runs tensordict's own loader, as without the patch;
- ``tensordict.TensorDict._load_memmap`` and the tensorclass ``_load_memmap``,
  private methods that only the original loader calls.
"""
from __future__ import annotations

import contextlib
import contextvars
import os
import sys
import threading
import types
from collections.abc import Iterator
from typing import Any, Literal

_lock = threading.Lock()
#: The patched functions and their original code; None when not patched.
_patched: list[tuple[types.FunctionType, types.CodeType]] | None = None
_unknown_globals = "error"
#: Set while tensordict's own loader runs (a self-reload): its nested calls of
#: ``TensorDict.load_memmap`` stay tensordict's too.
_in_original: contextvars.ContextVar[bool] = contextvars.ContextVar("tensorplay_td_original", default=False)

#: tensordict's own code of load_memmap, kept once patched: what a call that is not
#: routed runs (a self-reload, or a copy made while patched, called after unpatching).
_ORIGINAL_CODE: types.CodeType | None = None
#: The functions of tensordict that reload what they have just written.
_SELF_RELOADERS = ("memmap", "memmap_like")


def _load_memmap_trampoline(cls: Any, prefix: Any, device: Any = None, non_blocking: Any = False, *, out: Any = None,
                            robust_key: Any = True, subpath: Any = None, mode: Any = None, num_threads: Any = 0,
                            allow_pickle: Any = None) -> Any:
    # Runs with tensordict's globals, as the code of tensordict's function: it
    # names nothing but the module it imports.
    import sys

    return sys.modules["tensorplay._patch_tensordict"]._dispatch(
        cls, prefix, device, non_blocking, out, robust_key, subpath, mode, num_threads, allow_pickle)


_TRAMPOLINE_CODE = _load_memmap_trampoline.__code__


def _tensordict_function() -> types.FunctionType:
    """tensordict's ``load_memmap`` function (under the classmethod)."""
    try:
        from tensordict import TensorDict
        from tensordict.base import TensorDictBase
    except ImportError as e:
        raise ImportError("tensorplay.patch_tensordict needs the tensordict package") from e

    owner = next((klass for klass in TensorDictBase.__mro__ if "load_memmap" in klass.__dict__), None)
    if owner is None:
        raise RuntimeError("tensorplay.patch_tensordict: tensordict defines no load_memmap")
    function: object = getattr(owner.__dict__["load_memmap"], "__func__", None)
    bound: Any = TensorDict.load_memmap
    inherited = getattr(bound, "__func__", None) is function
    if inherited and isinstance(function, types.FunctionType):
        return function
    raise RuntimeError("tensorplay.patch_tensordict: TensorDict.load_memmap is not tensordict's classmethod "
                       "(another patch is in place?)")


def _check_signature(function: types.FunctionType) -> None:
    """The trampoline replaces the code only of a function with the same parameters."""
    mine, theirs = _TRAMPOLINE_CODE, function.__code__
    same = (mine.co_argcount == theirs.co_argcount and mine.co_kwonlyargcount == theirs.co_kwonlyargcount
            and mine.co_posonlyargcount == theirs.co_posonlyargcount
            and mine.co_flags & 0x0C == theirs.co_flags & 0x0C  # *args, **kwargs
            and len(function.__closure__ or ()) == 0
            and mine.co_varnames[:mine.co_argcount + mine.co_kwonlyargcount]
            == theirs.co_varnames[:theirs.co_argcount + theirs.co_kwonlyargcount])
    if not same:
        raise RuntimeError("tensorplay.patch_tensordict: this tensordict's load_memmap has another signature "
                           f"({theirs.co_varnames[:theirs.co_argcount + theirs.co_kwonlyargcount]}); "
                           "it cannot be routed")


def _registered_classes() -> list[type]:
    """Every tensordict class and tensorclass defined so far."""
    import tensordict.base as base

    seen: dict[type, None] = {}
    todo: list[Any] = [c for c in base._ACCEPTED_CLASSES if c.__module__ != "torch"
            and not (isinstance(c, type) and c.__name__ == "Tensor")]
    while todo:
        klass = todo.pop()
        if klass in seen or not isinstance(klass, type):
            continue
        seen[klass] = None
        try:
            todo.extend(type.__subclasses__(klass))
        except TypeError:
            pass
    return list(seen)


def _copies_of(function: types.FunctionType, code: types.CodeType) -> list[types.FunctionType]:
    """The function and every function object that runs its code: the copy
    ``@tensorclass`` gives each class (cached, made here if no class made it yet)
    and any other copy found on a class."""
    found: dict[int, types.FunctionType] = {id(function): function}
    copier = getattr(sys.modules.get("tensordict.tensorclass"), "_unchecked_copy", None)
    if callable(copier):
        try:
            copy = copier(function)
        except Exception:  # noqa: BLE001 - a tensordict without the cached copy
            copy = None
        if isinstance(copy, types.FunctionType):
            found[id(copy)] = copy
    for klass in _registered_classes():
        for name in ("load_memmap", "load"):
            value = klass.__dict__.get(name)
            for candidate in _functions_under(value):
                if candidate.__code__ is code:
                    found[id(candidate)] = candidate
    return list(found.values())


def _functions_under(value: Any) -> Iterator[types.FunctionType]:
    """The functions a class attribute calls: itself, under a classmethod, a bound
    method, and ``functools.wraps`` wrappers."""
    for _ in range(8):
        if value is None:
            return
        if isinstance(value, (classmethod, staticmethod, types.MethodType)):
            value = value.__func__
            continue
        if isinstance(value, types.FunctionType):
            yield value
        value = getattr(value, "__wrapped__", None)


def patch_tensordict(unknown_globals: Literal["error", "stub"] | None = None) -> None:
    """Make ``TensorDict.load_memmap``, ``TensorDict.load`` (and ``tensordict.load``,
    ``load_memmap_``) and the same methods of every tensorclass, defined before or
    after this call, load through ``tensorplay.load_memmap(..., as_tensordict=True)``
    for the whole process. tensordict's signature and return types are kept.

    ``unknown_globals="stub"`` (or ``TENSORPLAY_UNKNOWN_GLOBALS=stub``) makes pickle
    sidecars loaded with ``allow_pickle=True`` stand a ``tensorplay.Stub`` in for a
    global outside the allowlist instead of refusing the data. A patch already in
    place keeps its setting."""
    global _patched, _unknown_globals, _ORIGINAL_CODE
    from ._patch import stubs_for_patch

    stub = stubs_for_patch(unknown_globals)
    with _lock:
        if _patched is not None:
            return
        function = _tensordict_function()
        if function.__code__ is _TRAMPOLINE_CODE:
            raise RuntimeError("tensorplay.patch_tensordict: tensordict's load_memmap is already routed")
        _check_signature(function)
        code = function.__code__
        targets = _copies_of(function, code)
        for target in targets:
            target.__code__ = _TRAMPOLINE_CODE
        _ORIGINAL_CODE = code
        _unknown_globals = "stub" if stub else "error"
        _patched = [(target, code) for target in targets]


def unpatch_tensordict() -> None:
    """Give tensordict's loader back its original code."""
    global _patched
    with _lock:
        if _patched is None:
            return
        for target, code in _patched:
            if target.__code__ is _TRAMPOLINE_CODE:
                target.__code__ = code
        _patched = None


def is_patched() -> bool:
    return _patched is not None


@contextlib.contextmanager
def patched_tensordict(unknown_globals: Literal["error", "stub"] | None = None) -> Iterator[None]:
    """tensordict's loader goes through tensorplay inside the ``with`` block."""
    was_patched = is_patched()
    patch_tensordict(unknown_globals)
    try:
        yield
    finally:
        if not was_patched:
            unpatch_tensordict()


def patch_from_environment() -> None:
    """``TENSORPLAY_PATCH_TENSORDICT=1`` patches tensordict when tensorplay is imported."""
    from ._patch import switched_on

    if switched_on("TENSORPLAY_PATCH_TENSORDICT"):
        patch_tensordict()


# --- a routed call ----------------------------------------------------------------------

def _run_original(cls: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """tensordict's own loader, made from its code with the patched function's
    globals and defaults (which the code swap left as they were)."""
    if _ORIGINAL_CODE is None:
        raise RuntimeError("tensorplay.patch_tensordict: the original load_memmap is unknown")
    function = _tensordict_function()
    original = types.FunctionType(_ORIGINAL_CODE, function.__globals__, function.__name__, function.__defaults__,
                                  function.__closure__)
    original.__kwdefaults__ = function.__kwdefaults__
    token = _in_original.set(True)
    try:
        return original.__get__(cls)(*args, **kwargs)
    finally:
        _in_original.reset(token)


def _is_self_reload() -> bool:
    """Whether tensordict itself calls the loader, from the functions that reload
    what they have just written: the caller of the innermost trampoline."""
    frame: types.FrameType | None = sys._getframe(1)
    while frame is not None and frame.f_code is not _TRAMPOLINE_CODE:
        frame = frame.f_back
    caller = frame.f_back if frame is not None else None
    if caller is None:
        return False
    code = caller.f_code
    return code.co_name in _SELF_RELOADERS and code.co_filename.replace("\\", "/").endswith(
        "tensordict/_base/serialization.py")


def _trusted_entries(cls: Any) -> list[Any]:
    """The class ``load_memmap`` is called on, when it is a tensorclass of the user's
    own: trusted to be built from the saved fields, under its own name and under the
    name it has when saved from a script (``__main__``), as tensordict finds it."""
    if not isinstance(cls, type) or cls.__module__.split(".")[0] == "tensordict":
        return []
    from tensordict import is_tensorclass

    if not is_tensorclass(cls):
        return []
    names = {f"{cls.__module__}.{cls.__qualname__}", f"__main__.{cls.__qualname__}"}
    return [(cls, name) for name in sorted(names)]


def _dispatch(cls: Any, prefix: Any, device: Any, non_blocking: Any, out: Any, robust_key: Any, subpath: Any,
              mode: Any, num_threads: Any, allow_pickle: Any) -> Any:
    args = (prefix, device, non_blocking)
    kwargs = {"out": out, "robust_key": robust_key, "subpath": subpath, "mode": mode, "num_threads": num_threads,
              "allow_pickle": allow_pickle}
    if _patched is None or _in_original.get() or _is_self_reload():
        return _run_original(cls, args, kwargs)
    from . import _tensordict
    from .serialization import safe_globals

    trusted = _trusted_entries(cls)
    with safe_globals(trusted) if trusted else contextlib.nullcontext():
        return _tensordict.load_memmap(os.fspath(prefix), device, non_blocking, out=out, robust_key=robust_key,
                                       subpath=subpath, mode=mode, num_threads=num_threads, allow_pickle=allow_pickle,
                                       backend="torch", as_tensordict=True, unknown_globals=_unknown_globals)
