"""Small value types of the public API."""
from __future__ import annotations

from typing import NamedTuple


class TensorSpec(NamedTuple):
    """A tensor's description without its data: what the numpy backend returns for a
    meta tensor, and what ``inspect`` reports. Strides are in elements."""

    dtype: str
    shape: tuple[int, ...]
    stride: tuple[int, ...]


class TensorInfo(NamedTuple):
    """Where a tensor's bytes are, as ``inspect`` reports it, without reading them.

    ``storage`` is the storage key in the file (``data/<key>``), ``storage_offset``
    the tensor's first element within it (in elements), ``offset`` the byte offset
    of the storage's data in the file, ``nbytes`` the storage's size and ``device``
    where it was saved, as the file names it (``"cpu"``, ``"cuda:0"``, ``"meta"``).
    """

    dtype: str | None = None
    shape: tuple[int, ...] = ()
    stride: tuple[int, ...] = ()
    storage: str | None = None
    storage_offset: int = 0
    offset: int | None = None
    nbytes: int = 0
    layout: str = "strided"
    requires_grad: bool = False
    parameter: bool = False
    device: str | None = None

    @property
    def numel(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n
