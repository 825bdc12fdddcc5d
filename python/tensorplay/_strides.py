"""Strides of C-contiguous tensors, for the readers that lay tensors out."""
from __future__ import annotations

import functools


@functools.lru_cache(maxsize=4096)  # a checkpoint has few shapes, and a read asks once per chunk
def contiguous(shape: tuple[int, ...]) -> tuple[int, ...]:
    """The strides of a C-contiguous tensor of ``shape``, in elements."""
    strides, step = [], 1
    for n in reversed(shape):
        strides.append(step)
        step *= max(n, 1)
    return tuple(reversed(strides))
