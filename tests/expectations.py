"""Compare what tensorplay loaded with the manifest's description of what
torch.load returned (see fixtures/describe.py for the grammar)."""
from __future__ import annotations

from describe import Describer, describe


def assert_same_description(actual, expected, path="root"):
    """Walk both descriptions, failing at the first difference with its path."""
    if isinstance(expected, dict) and isinstance(actual, dict):
        assert set(actual) == set(expected), f"{path}: keys {sorted(actual)} != {sorted(expected)}"
        for key in expected:
            assert_same_description(actual[key], expected[key], f"{path}.{key}")
    elif isinstance(expected, list) and isinstance(actual, list):
        assert len(actual) == len(expected), f"{path}: length {len(actual)} != {len(expected)}"
        for i, (a, e) in enumerate(zip(actual, expected)):
            assert_same_description(a, e, f"{path}[{i}]")
    else:
        assert actual == expected, f"{path}: {actual!r} != {expected!r}"


def check_torch_result(obj, expected):
    """The torch backend must reproduce torch.load's description exactly."""
    assert_same_description(describe(obj), expected)


# --- numpy backend --------------------------------------------------------------

_TENSOR_FIELDS = ("dtype", "shape", "stride", "sha256", "values")


def _int_tuple(values):
    return {"kind": "tuple", "items": [{"kind": "int", "value": str(v)} for v in values]}


class _Any:
    def __init__(self, kind: type, what: str):
        self.kind, self.what = kind, what

    def __eq__(self, other):
        return isinstance(other, self.kind)

    def __repr__(self):
        return f"<any {self.what}>"


def numpy_expectation(expected):
    """What the numpy backend returns for a torch description: tensors become
    arrays (Parameters too), Size a tuple, dtype and device their names."""
    kind = expected["kind"]
    if kind == "tensor" and expected.get("device") == "meta":
        dtype = {"kind": "str", "value": expected["dtype"]}
        items = [dtype, _int_tuple(expected["shape"]), _int_tuple(expected["stride"])]
        return {"kind": "object", "class": "tensorplay._types.TensorSpec", "state": {"kind": "list", "items": items}}
    if kind == "tensor":
        node = {"kind": "ndarray"}
        node.update({k: expected[k] for k in _TENSOR_FIELDS if k in expected})
        if expected.get("neg") and "values" in node:
            # numpy negates NaNs by the sign bit alone, torch's float16 and bfloat16
            # through float32: the bits may differ where the values (NaN) do not.
            node["sha256"] = _Any(str, "sha256")
        if 0 in expected["shape"]:  # numpy makes an empty array's strides what it likes
            node["stride"] = _Any(list, "strides")
        return node
    if kind == "torch.Size":
        return {"kind": "tuple", "items": [{"kind": "int", "value": str(v)} for v in expected["value"]]}
    if kind in ("torch.dtype", "torch.device"):
        return {"kind": "str", "value": expected["value"]}
    out = dict(expected)
    if "items" in out:
        if kind == "dict":
            out["items"] = [[numpy_expectation(k), numpy_expectation(v)] for k, v in out["items"]]
        else:
            out["items"] = [numpy_expectation(v) for v in out["items"]]
    for key in ("metadata", "state"):
        if key in out:
            out[key] = numpy_expectation(out[key])
    return out


def _tensors_in_order(desc, out):
    """Tensor descriptions in the depth-first order the describer walks."""
    if isinstance(desc, dict):
        if desc.get("kind") == "ndarray" or (desc.get("kind") == "tensor" and desc.get("device") != "meta"):
            out.append(desc)
            return out
        for key in ("items", "metadata", "state"):
            if key in desc:
                _tensors_in_order(desc[key], out)
    elif isinstance(desc, list):
        for item in desc:
            _tensors_in_order(item, out)
    return out


class _ArrayCollector(Describer):
    def __init__(self):
        super().__init__()
        self.arrays = []

    def ndarray(self, a):
        self.arrays.append(a)
        return super().ndarray(a)


def check_numpy_result(obj, expected):
    """The numpy backend: same values, and arrays share memory exactly where the
    saved tensors shared a storage (a conjugated or negated view is a copy)."""
    collector = _ArrayCollector()
    actual = collector(obj)
    expected_tensors = _tensors_in_order(expected, [])
    assert_same_description(actual, numpy_expectation(expected))
    assert len(collector.arrays) == len(expected_tensors)
    starts = {}
    for array, tensor in zip(collector.arrays, expected_tensors):
        if tensor["kind"] == "ndarray" or tensor.get("storage_nbytes", 0) == 0 or not array.size:
            continue
        if tensor.get("conj") or tensor.get("neg"):  # numpy has no lazy view: a copy
            continue
        address = array.__array_interface__["data"][0] - tensor["storage_offset"] * array.itemsize
        starts.setdefault(tensor["storage"], set()).add(address)
    for storage, addresses in starts.items():
        assert len(addresses) == 1, f"views of storage {storage} do not share memory"
    all_addresses = [next(iter(a)) for a in starts.values()]
    assert len(all_addresses) == len(set(all_addresses)), "distinct storages share memory"


def contains_kind(desc, predicate) -> bool:
    if isinstance(desc, dict):
        if predicate(desc):
            return True
        return any(contains_kind(v, predicate) for v in desc.values())
    if isinstance(desc, list):
        return any(contains_kind(v, predicate) for v in desc)
    return False


def numpy_cannot_hold(expected) -> bool:
    """Sparse, quantized and complex32 tensors have no numpy form."""
    return contains_kind(expected, lambda d: d.get("kind") == "tensor" and (
        d.get("layout") in ("sparse_coo", "sparse_csr", "sparse_csc", "sparse_bsr", "sparse_bsc", "nested")
        or "qscheme" in d or d.get("dtype") in ("complex32",)))
