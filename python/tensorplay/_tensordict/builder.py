"""The loaded tree built into torch tensors or numpy arrays (views of the
mapped leaves, copies, or meta/fake tensors), as a dict or a TensorDict."""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from .. import _strides
from .._types import TensorSpec
from .layout import DType, Leaf, Level, NonTensor, Stack, TensorClass, malformed, unsupported


def _numpy_dtype(dtype: DType, where: str) -> Any:
    import numpy as np

    if dtype.numpy is None:
        raise unsupported(where, f"numpy has no dtype for torch.{dtype.name}; load with backend='torch'")
    if dtype.ml_dtypes:
        import ml_dtypes

        return np.dtype(getattr(ml_dtypes, dtype.numpy))
    return np.dtype(dtype.numpy)


@dataclass
class Builder:
    """Turns what the reader found into numpy arrays, torch tensors, meta records,
    plain containers or tensordict objects."""

    backend: str
    meta_only: bool
    device: Any
    as_tensordict: bool
    user: tuple[list[str], list[Any]]
    #: Under a torch FakeTensorMode: fake tensors, and no file read.
    fake: bool = False
    non_blocking: bool = False
    #: The device each TensorDict gets: the one asked for ("meta" included), else
    #: the one its meta.json records.
    td_device: Any = None

    def build(self, node: Any) -> Any:
        if isinstance(node, Leaf):
            return self.leaf(node)
        if isinstance(node, Level):
            return self.level(node)
        if isinstance(node, Stack):
            members = [self.build(m) for m in node.members]
            if self.as_tensordict:
                from tensordict import LazyStackedTensorDict

                return LazyStackedTensorDict(*members, stack_dim=node.stack_dim)
            return members
        if isinstance(node, TensorClass):
            return self.tensorclass(node)
        return node.value

    def level(self, level: Level) -> Any:
        built = {key: self.build(value) for key, value in level.entries.items()}
        if not self.as_tensordict:
            return built
        from tensordict import TensorDict

        kwargs = {"names": level.names} if level.names is not None else {}
        device = self.td_device if self.td_device is not None else level.device
        try:
            out = TensorDict({}, batch_size=level.batch_size, device=device, **kwargs)
            for key, value in built.items():
                entry = level.entries[key]
                if isinstance(entry, NonTensor) and entry.stack:
                    from tensordict import NonTensorStack

                    out.set(key, NonTensorStack.from_list(value))
                elif isinstance(entry, NonTensor):
                    out.set_non_tensor(key, value)
                else:
                    out.set(key, value)
        except (RuntimeError, ValueError, TypeError, IndexError) as e:
            # A batch size, names or shapes in meta.json that do not fit together.
            raise malformed(level.where, f"tensordict cannot hold what meta.json describes: {e}") from e
        return out

    def tensorclass(self, node: TensorClass) -> Any:
        """An allowlisted class is built from the fields; any other stays a dict."""
        data = self.level(node.level)
        names, objects = self.user
        if node.class_name not in names:
            return data
        cls = objects[names.index(node.class_name)]
        try:
            if self.as_tensordict and hasattr(cls, "_from_tensordict"):
                return cls._from_tensordict(data)
            return cls(**data)
        except Exception as e:  # noqa: BLE001 - the file's fields did not fit the class
            raise malformed(node.class_name, f"cannot build the allowlisted class from its fields: {e}") from e

    def leaf(self, leaf: Leaf) -> Any:
        if leaf.nested is not None:
            return self.nested(leaf)
        return self.tensor(leaf, leaf.shape, leaf.offset)

    def tensor(self, leaf: Leaf, shape: tuple[int, ...], offset: int) -> Any:
        numel = math.prod(shape)
        if self.backend == "numpy":
            import numpy as np

            if self.meta_only:
                return TensorSpec(leaf.dtype.name, shape, _strides.contiguous(shape))
            dtype = _numpy_dtype(leaf.dtype, leaf.where)
            if numel == 0:
                return np.empty(shape, dtype=dtype)
            return np.frombuffer(leaf.buffer, dtype=dtype, count=numel, offset=offset).reshape(shape)
        import torch

        dtype = getattr(torch, leaf.dtype.name)
        if self.meta_only:
            return torch.empty(shape, dtype=dtype) if self.fake else torch.empty(shape, dtype=dtype, device="meta")
        if numel == 0:
            tensor = torch.empty(shape, dtype=dtype)
        else:
            tensor = torch.frombuffer(leaf.buffer, dtype=dtype, count=numel, offset=offset).view(shape)
        return tensor if self.device is None else tensor.to(self.device, non_blocking=self.non_blocking)

    def nested(self, leaf: Leaf) -> Any:
        """A jagged tensor: a nested tensor viewing the file (torch), else a list of
        its components (numpy, and meta records)."""
        offsets, at = [], leaf.offset
        for shape in leaf.nested:
            offsets.append(at)
            at += math.prod(shape) * leaf.dtype.itemsize
        if self.backend == "numpy" or self.meta_only or leaf.buffer is None:
            parts = [self.tensor(leaf, s, o) for s, o in zip(leaf.nested, offsets, strict=True)]
            if self.backend == "numpy" or self.meta_only:
                return parts
            import torch

            return torch.nested.as_nested_tensor(parts, layout=torch.strided)
        import torch

        size = leaf.dtype.itemsize
        buffer = torch.frombuffer(leaf.buffer, dtype=getattr(torch, leaf.dtype.name),
                                  count=(at - leaf.offset) // size, offset=leaf.offset)
        sizes = torch.tensor(leaf.nested, dtype=torch.int64)
        strides = torch.tensor([_strides.contiguous(s) for s in leaf.nested], dtype=torch.int64)
        starts = torch.tensor([(o - leaf.offset) // size for o in offsets], dtype=torch.int64)
        tensor = torch._nested_view_from_buffer(buffer, sizes, strides, starts)
        return tensor if self.device is None else tensor.to(self.device, non_blocking=self.non_blocking)
