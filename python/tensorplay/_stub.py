"""Stub mode: a global outside the allowlist becomes an inert :class:`Stub` that
records how the file used it. Nothing is imported and nothing is called: the
restricted VM hands the builder the global's name, and every call, ``__new__``,
BUILD, APPEND and SETITEM on it is recorded here as data."""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator
from typing import Any


class StubWarning(UserWarning):
    """A load in stub mode stood in for globals outside the allowlist."""


class Stub:
    """What a checkpoint's pickle made with a global outside the allowlist.

    ``module`` and ``name`` name the global; ``args`` and ``kwargs`` are what the
    file called it with (``None`` when it was only named, never called);
    ``state`` what BUILD gave it (a list when BUILD came more than once);
    ``items`` what APPEND added (a list) or SETITEM set (a dict); ``source`` the
    class source a legacy whole-module file recorded for an ``nn.Module`` class
    (text, never compiled or run; ``None`` elsewhere). Tensors and every
    allowlisted value inside are built as a load builds them.
    """

    __slots__ = ("module", "name", "args", "kwargs", "state", "items", "source")

    def __init__(self, module: str, name: str, args: tuple | None = None, kwargs: dict | None = None):
        self.module = module
        self.name = name
        self.args = args
        self.kwargs = kwargs
        self.state: Any = None
        self.items: list | dict | None = None
        self.source: str | None = None

    @property
    def qualname(self) -> str:
        return f"{self.module}.{self.name}"

    # What the builder does to an object made by an allowlisted class, recorded.
    def _called(self, args: tuple, kwargs: dict | None = None) -> Stub:
        made = Stub(self.module, self.name, tuple(args), dict(kwargs) if kwargs else {})
        made.source = self.source
        return made

    def __setstate__(self, state: Any) -> None:
        # More than one BUILD is rare (a subclass adding slots): keep each.
        if self.state is None:
            self.state = state
        elif isinstance(self.state, _Builds):
            self.state.append(state)
        else:
            self.state = _Builds([self.state, state])

    def _append(self, item: Any) -> None:
        if self.items is None:
            self.items = []
        if isinstance(self.items, dict):
            self.items = list(self.items.items())
        self.items.append(item)

    def _setitem(self, key: Any, value: Any) -> None:
        if self.items is None:
            self.items = {}
        if isinstance(self.items, list):
            self.items.append((key, value))
        else:
            self.items[key] = value

    def to_dict(self) -> dict:
        """The state as a plain dict: a dict state itself, the ``__dict__`` part of
        a ``(dict, slots)`` state merged with its slots, else the keyword arguments
        (``{}`` when there are none)."""
        state = self.state
        if isinstance(state, tuple) and len(state) == 2 and all(s is None or isinstance(s, dict) for s in state):
            return {**(state[0] or {}), **(state[1] or {})}
        if isinstance(state, dict):
            return dict(state)
        return dict(self.kwargs or {})

    def __repr__(self) -> str:
        parts = [self.qualname]
        if self.args:
            parts.append(f"args={self.args!r}")
        if self.kwargs:
            parts.append(f"kwargs={self.kwargs!r}")
        if self.state is not None:
            parts.append(f"state={self.state!r}")
        if self.items is not None:
            parts.append(f"items={self.items!r}")
        return f"Stub({', '.join(parts)})"

    def __reduce__(self) -> Any:
        raise TypeError(f"a Stub ({self.qualname}) stands in for a class that was never loaded: it cannot be "
                        "pickled or saved (take the values you need out of it)")


class _Builds(list):
    """The states of a stub given BUILD more than once, in order."""


_stubbed: contextvars.ContextVar[dict[str, None] | None] = contextvars.ContextVar("tensorplay_stubbed", default=None)


def note(names: list[str]) -> None:
    """The builder's list of every global a load stood in for, for the warning."""
    seen = _stubbed.get()
    if seen is not None:
        seen.update(dict.fromkeys(names))


def made_any() -> bool:
    """Whether the load being collected stood in for any global so far."""
    return bool(_stubbed.get())


@contextlib.contextmanager
def collecting() -> Iterator[list[str]]:
    """The names of the globals stubbed while the block runs (filled when it ends);
    they count in the collection around it too (a load made of other loads)."""
    seen: dict[str, None] = {}
    token = _stubbed.set(seen)
    names: list[str] = []
    try:
        yield names
    finally:
        _stubbed.reset(token)
        names.extend(seen)
        note(names)


@contextlib.contextmanager
def warning() -> Iterator[None]:
    """One warning, when the block ends without an error, listing the globals
    stubbed while it ran (none when it stubbed none)."""
    with collecting() as names:
        yield
    if names:
        import warnings

        listed = ", ".join(names)
        # Past this generator, contextlib's __exit__ and the public load function: its caller.
        warnings.warn(StubWarning(f"stood in for {len(names)} global(s) outside the allowlist with "
                                  f"tensorplay.Stub, never importing or calling them: {listed}"), stacklevel=4)
