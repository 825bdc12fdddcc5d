"""Comparing a loaded state dict with the one that was saved: torch tensors, or
numpy arrays (the numpy backend) of the same dtype, shape and values, in the
same dicts and lists, with the same plain values."""
from __future__ import annotations

import numpy as np
import torch


def as_numpy(t: torch.Tensor) -> np.ndarray:
    if t.dtype == torch.bfloat16:
        import ml_dtypes

        return t.view(torch.int16).numpy().view(ml_dtypes.bfloat16)
    return t.numpy()


def assert_same_tree(loaded, expected) -> None:
    if isinstance(expected, torch.Tensor):
        if isinstance(loaded, np.ndarray):
            assert loaded.shape == tuple(expected.shape)
            assert loaded.dtype == as_numpy(expected).dtype
            assert np.array_equal(loaded, as_numpy(expected))
        else:
            assert loaded.dtype == expected.dtype and torch.equal(loaded, expected)
    elif isinstance(expected, dict):
        assert loaded.keys() == expected.keys()
        for key in expected:
            assert_same_tree(loaded[key], expected[key])
    elif isinstance(expected, list):
        assert isinstance(loaded, list) and len(loaded) == len(expected)
        for a, b in zip(loaded, expected):
            assert_same_tree(a, b)
    else:
        assert loaded == expected
