"""Resource limits: defaults from the core, process-wide overrides, and per-call
overrides, merged in that order. Every limit bounds one thing a hostile file
could make the loader spend; raise one only for files you trust.

| limit | bounds | default |
| --- | --- | --- |
| max_pickle_bytes | bytes of one pickle stream | 1 GiB |
| max_nodes | values the VM creates | 50,000,000 |
| max_payload_bytes | total bytes of str/bytes/bytearray values | 1 GiB |
| max_stack_depth | items on the VM's stack at once | 16,777,216 |
| max_mark_depth | MARKs open at once | 4,194,304 |
| max_memo_entries | memo entries | 67,108,864 |
| max_container_len | items in one list, tuple, dict or set | 67,108,864 |
| max_ndim | dimensions of one tensor | 64 |
| max_storages | distinct storages | 4,194,304 |
| max_zip_entries | entries in one zip archive | 8,388,608 |
| max_inflated_bytes | bytes inflated from compressed entries | 64 GiB |
| max_key_values | values inside one dict key or set item (hashed recursively) | 10,000 |
| max_depth | levels of nesting a tree of files may have (TensorDict folders) | 100 |
"""
from __future__ import annotations

import threading

from . import _core

_lock = threading.Lock()
_overrides: dict[str, int] = {}


def default_limits() -> dict[str, int]:
    """Every limit with the value a load uses now (core defaults plus process-wide overrides)."""
    with _lock:
        return {**_core.default_limits(), **_overrides}


def set_default_limits(**limits: int | None) -> None:
    """Raise or lower limits for every later load, scan and inspect in this process.
    ``set_default_limits(max_nodes=10**8)``; pass ``None`` to restore a default."""
    known = _core.default_limits()
    for name, value in limits.items():
        if name not in known:
            raise ValueError(f"unknown limit {name!r}; known: {', '.join(known)}")
        if value is not None and (not isinstance(value, int) or value < 0):
            raise ValueError(f"{name} must be a non-negative int, not {value!r}")
    with _lock:
        for name, value in limits.items():
            if value is None:
                _overrides.pop(name, None)
            else:
                _overrides[name] = value


def merged(per_call: dict[str, int] | None) -> dict[str, int] | None:
    """The limits for one call: process-wide overrides, then the call's own.
    ``None`` when neither changes a default, so the core builds no map."""
    if not _overrides and not per_call:
        return None
    with _lock:
        out = dict(_overrides)
    out.update(per_call or {})
    return out
