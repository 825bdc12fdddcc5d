"""Helpers the Rust builder calls for the rare kinds of value: user-allowlisted
objects, and tensor kinds only torch can make. Every function receives objects
that are already built; none of them imports or calls anything a file names."""
from __future__ import annotations

import sys
import types
from collections import OrderedDict

from . import _core, _stub
from ._types import TensorInfo, TensorSpec


def _refuse(message: str) -> BaseException:
    return _core.error("forbidden", message)


def _malformed(what: str, cause: BaseException) -> BaseException:
    return _core.build_error(what, cause)


# --- user-allowlisted objects (torch's weights-only semantics) ---------------------

def _is_allowlisted(obj, allowlisted) -> bool:
    """``obj`` is an allowlist entry's object, or, for a method fetched anew at
    each access (``zoneinfo.ZoneInfo._unpickle``), bound to the same object as one:
    torch's ``func in allowed.values()``, without calling any ``__eq__``."""
    for entry in allowlisted:
        if obj is entry:
            return True
    self = getattr(obj, "__self__", None) if isinstance(obj, (types.MethodType, types.BuiltinMethodType)) else None
    if self is None or isinstance(self, types.ModuleType):
        return False
    name = obj.__name__
    return any(isinstance(e, type(obj)) and getattr(e, "__self__", None) is self and e.__name__ == name
               for e in allowlisted)


def _full_name(obj) -> tuple[str, str] | None:
    module, qualname = getattr(obj, "__module__", None), getattr(obj, "__qualname__", None)
    if isinstance(qualname, str):
        if not isinstance(module, str):  # a builtin method: its class's module
            module = getattr(getattr(obj, "__self__", None), "__module__", None)
        if isinstance(module, str):
            return module, qualname
    return None


def _dangerous(obj) -> bool:
    """On the denylist (or blocklist) by its ``module.qualname``, or a module."""
    if isinstance(obj, types.ModuleType):
        return True
    name = _full_name(obj)
    return name is not None and _core.is_dangerous(*name)


def allowlisted_getattr(args, allowlisted):
    """REDUCE of an allowlisted ``builtins.getattr``: ``getattr(C, name)`` where
    ``C`` and ``C.name`` are both allowlisted, as a nested class (``A.B``) or a
    method (``zoneinfo.ZoneInfo._unpickle``) is pickled by protocols 0 to 3. Never
    a module, a dunder, a default, or a name on the denylist; ``C`` and the name
    are checked before the lookup, what it found after."""
    if not isinstance(args, tuple) or len(args) != 2 or type(args[1]) is not str:
        raise _refuse("Trying to call reduce for builtins.getattr with arguments other than (C, name): "
                      "tensorplay allows getattr only as getattr(C, name)")
    owner, name = args
    shown = _full_name(owner)
    where = f"{shown[0]}.{shown[1]}" if shown else repr(owner)
    if isinstance(owner, types.ModuleType):
        raise _refuse(f"Trying to call getattr on the module {owner.__name__} for {name!r}: "
                      "tensorplay never fetches an attribute of a module")
    if not _is_allowlisted(owner, allowlisted):
        raise _refuse(f"Trying to call getattr for {name!r} on {owner!r}, which is not allowlisted: "
                      f"getattr(C, name) needs C allowlisted (add_safe_globals([{where}]))")
    if name.startswith("__") and name.endswith("__"):
        raise _refuse(f"Trying to call getattr for the dunder {name!r} of {where}: tensorplay never fetches "
                      "a dunder")
    if _dangerous(owner) or (shown and _core.is_dangerous(shown[0], f"{shown[1]}.{name}")):
        raise _refuse(f"Trying to call getattr for {where}.{name}, which is on the denylist")
    attr = getattr(owner, name)
    if _dangerous(attr):
        raise _refuse(f"Trying to call getattr for {where}.{name}, which is {attr!r}, on the denylist")
    if not _is_allowlisted(attr, allowlisted):
        # torch's words (its REDUCE of the fetched function), then how to allow it.
        belongs = f" which belongs to {attr.__self__}" if hasattr(attr, "__self__") else ""
        raise _refuse(f"Trying to call reduce for unrecognized function {attr}{belongs}: getattr({where}, "
                      f"{name!r}) fetched it and it is not allowlisted (add_safe_globals([{where}.{name}]) if "
                      "you trust it)")
    return attr


def _check_returned(obj, allowlisted, what: str) -> None:
    if _dangerous(obj) or not _is_allowlisted(obj, allowlisted):
        belongs = f" which belongs to {obj.__self__}" if hasattr(obj, "__self__") else ""
        raise _refuse(f"Trying to {what} unrecognized function {obj}{belongs}")


def call_allowlisted(func, args, allowlisted):
    """REDUCE on what an allowlisted callable returned (a method getattr fetched):
    only when it is allowlisted itself, as torch checks every REDUCE."""
    _check_returned(func, allowlisted, "call reduce for")
    return func(*args)


def new_allowlisted(cls, args, kwargs, allowlisted):
    """NEWOBJ on what an allowlisted callable returned (a nested class getattr
    fetched): only when it is allowlisted itself."""
    _check_returned(cls, allowlisted, "create new object for")
    return new_object(cls, args, kwargs)


# --- stub mode: globals outside the allowlist, recorded and never called ------------

stub = _stub.Stub
stubbed = _stub.note


def stub_call(stand_in, args):
    """REDUCE on a stubbed global: the call, recorded."""
    return stand_in._called(args)


def new_object(cls, args, kwargs):
    """NEWOBJ / NEWOBJ_EX: ``cls.__new__(cls, *args, **kwargs)`` for an allowlisted class."""
    if isinstance(cls, _stub.Stub):
        return cls._called(args if isinstance(args, tuple) else (args,), kwargs)
    if not isinstance(cls, type):
        raise _refuse(f"Can only create new object for nn.Parameter or classes allowlisted via "
                      f"`add_safe_globals` but got {cls!r}")
    if not isinstance(args, tuple):
        raise _malformed("NEWOBJ arguments", TypeError(f"expected a tuple, got {type(args).__name__}"))
    return cls.__new__(cls, *args, **(kwargs or {}))


def build(inst, state):
    """BUILD: ``__setstate__`` when the class has one, else ``__dict__`` and slots."""
    setstate = getattr(inst, "__setstate__", None)
    if setstate is not None:
        setstate(state)
        return
    slotstate = None
    if isinstance(state, tuple) and len(state) == 2:
        state, slotstate = state
    if state:
        # Key by key, names interned, as pickle does: dict.update would turn the
        # instance dict that shares its keys with the class's other instances
        # into one of its own, twice the size (50,000 DCP metadata records: +50 MiB).
        inst_dict = inst.__dict__
        for key, value in state.items():
            inst_dict[sys.intern(key) if type(key) is str else key] = value
    if slotstate:
        for key, value in slotstate.items():
            setattr(inst, key, value)


def append(obj, item):
    if isinstance(obj, _stub.Stub):
        return obj._append(item)
    if not isinstance(obj, list):
        raise _refuse(f"Can only append to lists, but got {type(obj)}")
    obj.append(item)


def setitem(obj, key, value):
    if isinstance(obj, _stub.Stub):
        return obj._setitem(key, value)
    if not isinstance(obj, dict):
        raise _refuse(f"Can only SETITEM for dict, collections.OrderedDict, collections.Counter, but got {type(obj)}")
    obj[key] = value


# --- torch-only tensor kinds --------------------------------------------------------

def typed_storage(untyped, dtype):
    import torch
    return torch.storage.TypedStorage(wrap_storage=untyped, dtype=dtype, _internal=True)


def set_tensor_metadata(tensor, metadata):
    import torch
    torch._utils.set_tensor_metadata(tensor, metadata)


def meta_tensor(dtype, size, stride):
    import torch
    return torch.empty_strided(size, stride, dtype=dtype, device="meta")


def parameter(data, requires_grad, state):
    import torch
    param = torch.nn.Parameter(data, requires_grad)
    if state is not None:
        param = torch._utils._set_obj_state(param, state)
    return param


def from_type(tensor, cls, state):
    import torch
    return torch._tensor._rebuild_from_type_v2(lambda: tensor, cls, (), state)


def qtensor(untyped, dtype, offset, size, stride, qparams):
    import torch
    storage = typed_storage(untyped, dtype)
    try:
        return torch._utils._rebuild_qtensor(storage, offset, size, stride, qparams, False, OrderedDict())
    except Exception as e:
        raise _malformed("invalid quantized tensor", e) from e


def sparse_tensor(layout, parts, size, coalesced):
    """Sparse tensors are always validated: torch 2.13 skips that by default, and a
    crafted index then corrupts memory on ``to_dense()``. The core checked the same
    invariants from the index bytes before anything was built (so a scan refuses
    the file too); torch's check is the second line."""
    import torch
    try:
        if layout == torch.sparse_coo:
            indices, values = parts
            kwargs = {} if coalesced is None else {"is_coalesced": coalesced}
            return torch.sparse_coo_tensor(indices, values, size, check_invariants=True, **kwargs)
        compressed, plain, values = parts
        return torch.sparse_compressed_tensor(compressed, plain, values, size, layout=layout, check_invariants=True)
    except Exception as e:
        raise _malformed("invalid sparse tensor", e) from e


def nested_tensor(buffer, sizes, strides, offsets):
    """A strided nested tensor, each component checked to lie inside its buffer
    (the core checked the same from the metadata bytes first)."""
    import torch
    try:
        if buffer.dim() != 1 or sizes.dim() != 2 or strides.shape != sizes.shape or offsets.shape != sizes.shape[:1]:
            raise ValueError("nested tensor metadata has inconsistent shapes")
        if any(t.dtype != torch.int64 for t in (sizes, strides, offsets)):
            raise ValueError("nested tensor metadata must be int64")
        n = buffer.numel()
        for size, stride, offset in zip(sizes.tolist(), strides.tolist(), offsets.tolist()):
            if offset < 0 or any(v < 0 for v in size + stride):
                raise ValueError("negative nested tensor metadata")
            if all(v > 0 for v in size):
                extent = offset + sum((a - 1) * b for a, b in zip(size, stride)) + 1
                if extent > n:
                    raise ValueError(f"a component needs {extent} elements, the buffer has {n}")
        return torch._nested_view_from_buffer(buffer, sizes, strides, offsets)
    except Exception as e:
        raise _malformed("invalid nested tensor", e) from e


_TORCH_CALLS = {
    "torch._utils._rebuild_wrapper_subclass",
    "torch._utils._rebuild_device_tensor_from_numpy",
    "torch._utils._rebuild_device_tensor_from_cpu_tensor",
}


def torch_call(name, args):
    """A rebuild function whose result only torch can make. The core checked its
    arguments; whatever torch still refuses is the file's fault."""
    import torch
    if name not in _TORCH_CALLS:
        raise _refuse(f"Trying to call reduce for unrecognized function {name}")
    try:
        return getattr(torch._utils, name.rsplit(".", 1)[1])(*args)
    except Exception as e:
        raise _malformed(f"{name} failed", e) from e


# --- numpy backend --------------------------------------------------------------------

def apply_conj_neg(array, conj, neg):
    """numpy has no lazy conjugate or negative view, so the elements the view spans
    are copied once, transformed, and viewed again with the tensor's shape and
    strides: a 0-d tensor stays a 0-d array, broadcast and overlapping strides
    survive. (A ufunc on the view would give a scalar for 0-d and new strides.)
    Negation is IEEE 754's, a flip of the sign bit; torch resolves float16 and
    bfloat16 through float32, which quiets or canonicalises a NaN."""
    import numpy as np

    span = 1 + sum((n - 1) * s for n, s in zip(array.shape, array.strides)) // array.itemsize if array.size else 0
    spanned = np.zeros(span, dtype=array.dtype)
    out = np.ndarray(array.shape, dtype=array.dtype, buffer=spanned, strides=array.strides)
    np.copyto(out, array)
    if conj:
        np.conjugate(spanned, out=spanned)
    if neg:
        np.negative(spanned, out=spanned)
    return out


def meta_spec(dtype, shape, stride):
    return TensorSpec(dtype, tuple(shape), tuple(stride))


# --- numpy values inside a checkpoint (both backends, as torch.load returns them) ------

def numpy_array(descr, shape, fortran, data):
    """A writable array from raw bytes already checked to match shape and dtype."""
    import numpy as np
    return np.frombuffer(data, dtype=np.dtype(descr)).reshape(shape, order="F" if fortran else "C").copy(
        order="F" if fortran else "C")


def numpy_dtype(descr):
    import numpy as np
    return np.dtype(descr)


def numpy_scalar(descr, data):
    import numpy as np
    return np.frombuffer(data, dtype=np.dtype(descr))[0]


def tensor_info(**fields):
    return TensorInfo(**fields)
