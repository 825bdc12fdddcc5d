"""Small value types of the public API."""
from __future__ import annotations

from typing import NamedTuple


class TensorSpec(NamedTuple):
    """A tensor's description without its data: what the numpy backend returns for a
    meta tensor, and what ``inspect`` reports. Strides are in elements."""

    dtype: str
    shape: tuple[int, ...]
    stride: tuple[int, ...]
