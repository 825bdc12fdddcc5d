"""``tensorplay.utils.serialization.config``: the defaults ``save`` and ``load`` use,
with torch's names and meanings."""
from __future__ import annotations

import contextlib
import mmap as _mmap
import sys
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..serialization import LoadEndianness

__all__ = ["Config", "LoadConfig", "SaveConfig", "config"]


class _Section:
    _fields: dict[str, Any] = {}

    def __init__(self) -> None:
        for name, value in self._fields.items():
            object.__setattr__(self, name, value)

    def __setattr__(self, name: str, value: Any) -> None:
        if name not in self._fields:
            raise AttributeError(f"{type(self).__name__} has no option {name!r}; options: {sorted(self._fields)}")
        object.__setattr__(self, name, value)

    def __repr__(self) -> str:
        body = ", ".join(f"{k}={getattr(self, k)!r}" for k in self._fields)
        return f"{type(self).__name__}({body})"


class LoadConfig(_Section):
    """Options of ``tensorplay.load``.

    - ``mmap``: the ``mmap`` default when ``load(mmap=None)`` (default False);
    - ``endianness``: byte order assumed when a file has no ``byteorder`` record
      (a ``LoadEndianness``, or None for little-endian);
    - ``mmap_flags``: ``mmap.MAP_PRIVATE`` (copy-on-write, the default) or ``mmap.MAP_SHARED``;
    - ``calculate_storage_offsets``: accepted for torch compatibility; it changes
      nothing. torch computes storage offsets from the central directory instead of
      reading each local header, and silently reads the wrong bytes from a file not
      laid out exactly as torch writes it; tensorplay always reads the 30-byte local
      header, which lies on the page the payload starts on.
    """

    if TYPE_CHECKING:  # the options, as set from _fields
        mmap: bool
        endianness: LoadEndianness | None
        mmap_flags: int | None
        calculate_storage_offsets: bool

    _fields = {
        "mmap": False,
        "endianness": None,
        "mmap_flags": None if sys.platform == "win32" else _mmap.MAP_PRIVATE,
        "calculate_storage_offsets": False,
    }


class SaveConfig(_Section):
    """Options of ``tensorplay.save``: ``compute_crc32`` (default True),
    ``use_pinned_memory_for_d2h`` (default False) and ``storage_alignment`` (default 64)."""

    if TYPE_CHECKING:
        compute_crc32: bool
        use_pinned_memory_for_d2h: bool
        storage_alignment: int

    _fields = {
        "compute_crc32": True,
        "use_pinned_memory_for_d2h": False,
        "storage_alignment": 64,
    }


class Config:
    """The two sections of options: ``load`` (a :class:`LoadConfig`) and ``save``
    (a :class:`SaveConfig`), as ``torch.utils.serialization.config`` has them."""

    def __init__(self) -> None:
        self.load = LoadConfig()
        self.save = SaveConfig()

    @contextlib.contextmanager
    def patch(self, **options: Any) -> Iterator[None]:
        """Set options for the duration of a ``with`` block: ``patch(**{"load.mmap": True})``."""
        saved = []
        try:
            for dotted, value in options.items():
                section_name, _, name = dotted.partition(".")
                section = getattr(self, section_name)
                saved.append((section, name, getattr(section, name)))
                setattr(section, name, value)
            yield
        finally:
            for section, name, value in reversed(saved):
                setattr(section, name, value)

    def __repr__(self) -> str:
        return f"Config(load={self.load!r}, save={self.save!r})"


config = Config()
"""The process's defaults: ``config.load.mmap``, ``config.save.compute_crc32``..."""
