"""A safe ``pickle.load`` for plain data: a raw pickle (any protocol, from a file
object or bytes) read by the same restricted VM and allowlist as
``tensorplay.load``, with the same limits, errors and stub mode. Nothing the
pickle names is imported or called unless it is allowlisted
(``tensorplay.serialization.add_safe_globals``).

>>> import tensorplay.pickle
>>> tensorplay.pickle.loads(data)                         # plain data: dicts, lists, numbers, strings...
>>> tensorplay.pickle.load(f, unknown_globals="stub")     # other classes as inert tensorplay.Stub

A pickle refers to no storage here, so a checkpoint's ``data.pkl`` is refused:
load checkpoints with ``tensorplay.load``. numpy arrays inside are built from
their bytes, as in a checkpoint; torch values (dtypes, sizes) are torch's with
``backend="torch"``.
"""

from __future__ import annotations

import io
from typing import Any, Literal

from . import _allowlist, _core, _limits, _refusal, _stub

__all__ = ["load", "loads"]


def loads(data: bytes | bytearray | memoryview, /, *, encoding: str = "ASCII",
          unknown_globals: Literal["error", "stub"] = "error", backend: Literal["torch", "numpy"] = "numpy",
          limits: dict[str, int] | None = None) -> Any:
    """The object the pickle ``data`` holds, as ``pickle.loads`` would return it for
    allowlisted types. Bytes after its STOP are an error (a second pickle hidden
    there is how polyglot files fool scanners)."""
    return _run(bytes(data), encoding, unknown_globals, backend, limits, stream=False)


def load(file: Any, /, *, encoding: str = "ASCII", unknown_globals: Literal["error", "stub"] = "error",
         backend: Literal["torch", "numpy"] = "numpy", limits: dict[str, int] | None = None) -> Any:
    """One pickle from the binary file object ``file``, read from its position and
    left right after the pickle's STOP, as ``pickle.load`` leaves it."""
    read = getattr(file, "read", None)
    if not callable(read):
        raise TypeError(f"file must be a binary file object, not {type(file).__name__}")
    start = file.tell() if file.seekable() else None
    data = read()
    if not isinstance(data, (bytes, bytearray)):
        raise TypeError(f"file must be opened in binary mode, read() gave {type(data).__name__}")
    obj, taken = _run(bytes(data), encoding, unknown_globals, backend, limits, stream=True)
    if start is not None:
        file.seek(start + taken, io.SEEK_SET)
    return obj


def _run(data: bytes, encoding: str, unknown_globals: str, backend: str, limits: dict[str, int] | None,
         stream: bool) -> Any:
    if unknown_globals not in ("error", "stub"):
        raise ValueError(f"unknown_globals must be 'error' or 'stub', not {unknown_globals!r}")
    names, objects = _allowlist.resolved()
    merged = _limits.merged(limits)
    with _stub.warning():
        try:
            loaded = _core.loads(data, backend=backend, user_names=names, user_objects=objects, limits=merged,
                                 encoding=encoding, stub=unknown_globals == "stub", stream=stream)
            _refusal.refuse_hostile(data, names, merged)
        except _core.UnsafeCheckpointError as refused:
            raise _refusal.complete(refused, data, names, merged) from None
    return loaded
