"""Strides and strided views, for the readers that lay tensors out."""
from __future__ import annotations

import functools
from typing import Any


@functools.lru_cache(maxsize=4096)  # a checkpoint has few shapes, and a read asks once per chunk
def contiguous(shape: tuple[int, ...]) -> tuple[int, ...]:
    """The strides of a C-contiguous tensor of ``shape``, in elements."""
    strides, step = [], 1
    for n in reversed(shape):
        strides.append(step)
        step *= max(n, 1)
    return tuple(reversed(strides))


def strided(storage: Any, shape: tuple[int, ...], stride: tuple[int, ...], offset: int, backend: str) -> Any:
    """A view of a flat ``storage`` (elements) with ``shape``, ``stride`` (in
    elements) and ``offset``; the caller checked that it stays inside."""
    if backend == "torch":
        return storage.as_strided(shape, stride, offset)
    import numpy as np

    item = storage.itemsize
    return np.lib.stride_tricks.as_strided(storage[offset:], shape, tuple(st * item for st in stride))
