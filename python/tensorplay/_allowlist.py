"""The user's allowlist. ``add_safe_globals`` entries are process-wide, as in torch;
``safe_globals`` entries are context-local (a ContextVar), so two threads loading
with different allowlists never see each other's entries."""
from __future__ import annotations

import contextvars
import sys
import threading
from collections.abc import Iterable
from typing import Any

_lock = threading.Lock()
_process_entries: list[Any] = []
_context_entries: contextvars.ContextVar[tuple[Any, ...]] = contextvars.ContextVar(
    "tensorplay_safe_globals", default=())
# Until a ``safe_globals`` block first runs, every context holds the default; the
# first read of a ContextVar in a thread creates its context, which costs a
# one-file scan a measurable share of its time.
_context_used = False


def entry_name(entry: Any) -> str:
    """The ``module.qualname`` under which an allowlist entry matches a GLOBAL."""
    if isinstance(entry, tuple):
        if len(entry) != 2:
            raise ValueError("Expected tuple of length 2 (global, str of callable full path), "
                             f"but got tuple of length: {len(entry)}")
        if not isinstance(entry[1], str):
            raise TypeError(f"Expected second item in tuple to be str of callable full path, but got: {type(entry[1])}")
        return entry[1]
    qualname = getattr(entry, "__qualname__", None)
    if not isinstance(qualname, str):
        raise TypeError(f"{entry!r} has no __qualname__; allowlist it as (object, 'module.qualname')")
    # torch names an entry f"{__module__}.{__qualname__}" whatever __module__ is: a
    # builtin method (zoneinfo.ZoneInfo._unpickle) has None, and its entry, which
    # no GLOBAL names, breaks no load.
    return f"{getattr(entry, '__module__', None)}.{qualname}"


def _entry_object(entry: Any) -> Any:
    return entry[0] if isinstance(entry, tuple) else entry


def _validated(entries: Iterable[Any]) -> list[Any]:
    entries = list(entries)
    for entry in entries:
        entry_name(entry)
        hash(entry)
    return entries


def add(entries: Iterable[Any]) -> None:
    entries = _validated(entries)
    with _lock:
        for entry in entries:
            if entry not in _process_entries:
                _process_entries.append(entry)


def clear() -> None:
    with _lock:
        _process_entries.clear()


def process_entries() -> list[Any]:
    with _lock:
        return list(_process_entries)


def push_context(entries: Iterable[Any]) -> contextvars.Token:
    global _context_used
    _context_used = True
    return _context_entries.set(_context_entries.get() + tuple(_validated(entries)))


def pop_context(token: contextvars.Token) -> None:
    _context_entries.reset(token)


def current() -> list[Any]:
    """Every entry visible here: process-wide ones, then this context's."""
    return _in_priority_order(process_entries(), _context_entries.get())


def _in_priority_order(*groups: Iterable[Any]) -> list[Any]:
    """The groups' entries in order, each once."""
    merged: list[Any] = []
    for group in groups:
        for entry in group:
            if entry not in merged:
                merged.append(entry)
    return merged


def _torchs_entries() -> list[Any]:
    """torch's own allowlist (``torch.serialization.add_safe_globals``, which torch
    itself calls for jagged nested tensors and DTensor): torch.load honours it, so
    a drop-in must. Empty until torch is imported; never imports it."""
    torch = sys.modules.get("torch")
    serialization = getattr(torch, "serialization", None)
    get = getattr(serialization, "get_safe_globals", None)
    return list(get()) if get is not None else []


# The last names() answer, by the entries it came from: once torch is imported
# every scan would otherwise rename torch's entries, a tenth of a small file's scan.
_names_memo: tuple[tuple[Any, ...], tuple[str, ...]] = ((), ())


def names() -> tuple[str, ...]:
    """The names of every visible entry, for calls that need no objects."""
    global _names_memo
    # The usual case, decided without a lock, a ContextVar or torch's list.
    if not _process_entries and not _context_used and "torch" not in sys.modules:
        return ()
    process = process_entries()
    context = _context_entries.get() if _context_used else ()
    torchs = _torchs_entries()
    if not process and not context and not torchs:
        return ()
    key = (*process, None, *context, None, *torchs)
    memo = _names_memo  # one read: another thread may replace it meanwhile
    if key != memo[0]:
        memo = _names_memo = (key, tuple(entry_name(e) for e in _in_priority_order(process, context, torchs)))
    return memo[1]


def resolved() -> tuple[list[str], list[Any]]:
    """Names and objects to hand to the core, in priority order: this module's
    entries, then torch's."""
    entries = _in_priority_order(current(), _torchs_entries())
    return [entry_name(e) for e in entries], [_entry_object(e) for e in entries]
