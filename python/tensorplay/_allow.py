"""``--allow`` on the command line: the globals a user trusts, by name.

``tensorplay scan`` only needs names. ``inspect`` and ``convert`` build what they
allow, so they import it, which is what trusting a class means; a pattern
``pkg.module.*`` allows every class that module defines. A name on the denylist
(``os.system``, ``builtins.eval``, ...) is refused: no allowlist lifts it, and
accepting it silently would mislead."""

from __future__ import annotations

import importlib

from . import _core

# `tensorplay scan` checks its --allow names here, once per upload: `inspect` and
# `typing` would be a fifth of that process.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any


class AllowError(ValueError):
    """An ``--allow`` entry that cannot be honoured, and why."""


def check_names(entries: list[str], patterns: bool = True) -> list[str]:
    """``--allow`` entries, each a ``module.name`` (or with ``patterns`` a
    ``module.*``); a denylisted one raises :class:`AllowError`. ``tensorplay scan``
    passes ``patterns=False``: it imports nothing, so it cannot list a module's classes."""
    for entry in entries:
        module, _, name = entry.rpartition(".")
        if not module or not name:
            raise AllowError(f"--allow {entry}: expected MODULE.NAME")
        if name == "*" and not patterns:
            raise AllowError(f"--allow {entry}: a scan allows names, not patterns (inspect and convert import a "
                             "pattern's module to allow its classes)")
        if name != "*" and _core.is_dangerous(module, name):
            raise AllowError(f"--allow {entry}: it is on the denylist of globals that run code or touch the "
                             "system, which no allowlist lifts")
    return entries


def resolve(entries: list[str], stub_missing: bool = False) -> list[tuple[Any, str]]:
    """``(object, "module.qualname")`` for each entry of ``inspect``/``convert``
    ``--allow``: the named object, or for ``pkg.module.*`` every class defined in
    that module (denylisted ones left out). With ``stub_missing`` (``inspect``), a
    name this process cannot import (``__main__.MyConfig`` of the script that saved
    the file) is allowed as an inert ``tensorplay.Stub``: shown, never imported or called."""
    allowed: list[tuple[Any, str]] = []
    for entry in check_names(entries):
        if entry.endswith(".*"):
            module_name = entry[:-2]
            module = _import(module_name, entry)
            for cls in (getattr(module, name, None) for name in sorted(dir(module))):
                if (isinstance(cls, type) and cls.__module__ == module_name
                        and not _core.is_dangerous(module_name, cls.__qualname__)):
                    allowed.append((cls, f"{module_name}.{cls.__qualname__}"))
            continue
        try:
            allowed.append((_lookup(entry), entry))
        except AllowError:
            if not stub_missing:
                raise
            from ._stub import Stub

            module, _, name = entry.rpartition(".")
            allowed.append((Stub(module, name), entry))
    return allowed


def stubbed(allowed: list[tuple[Any, str]]) -> list[str]:
    """The entries of ``resolve(..., stub_missing=True)`` that stand a stub in."""
    from ._stub import Stub

    return [name for obj, name in allowed if isinstance(obj, Stub)]


def _import(module_name: str, entry: str) -> Any:
    try:
        return importlib.import_module(module_name)
    except ImportError as e:
        raise AllowError(f"--allow {entry}: cannot import {module_name}: {e}") from None


def _lookup(entry: str) -> Any:
    """The object ``module.qual.name`` names: the longest importable module
    prefix, then attributes."""
    parts = entry.split(".")
    for split in range(len(parts) - 1, 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:split]))
        except ImportError:
            continue
        try:
            for attr in parts[split:]:
                obj = getattr(obj, attr)
        except AttributeError:
            break
        return obj
    raise AllowError(f"--allow {entry}: no such importable object")
