"""The differential test of tensorplay against torch's weights-only loader: a
generator of pickle programs from exactly the opcodes torch's unpickler
implements, and the comparison of what both make of a checkpoint holding one.
Used for zip checkpoints (test_random_pickles.py) and legacy ones
(test_random_legacy_pickles.py), which differ in how a pickle names a storage."""
from __future__ import annotations

import pathlib
import struct
import warnings

import pytest
import tensorplay
from describe import describe
from expectations import assert_same_description, check_numpy_result, contains_kind, numpy_cannot_hold
from hypothesis import strategies as st
from pickle_programs import MUTATIONS, NO_ARGUMENT, mutate
from tensorplay import scanner
from tensorplay.serialization import get_unsafe_globals_in_checkpoint

torch = pytest.importorskip("torch")

# --- the generator ---------------------------------------------------------------

# The opcodes torch's weights-only unpickler implements that take no argument.
TORCH_NO_ARGUMENT = {"STOP", "NONE", "NEWTRUE", "NEWFALSE", "MARK", "EMPTY_TUPLE", "TUPLE", "TUPLE1", "TUPLE2",
                     "TUPLE3", "EMPTY_LIST", "APPEND", "APPENDS", "EMPTY_DICT", "SETITEM", "SETITEMS", "EMPTY_SET",
                     "REDUCE", "NEWOBJ", "BUILD", "BINPERSID"}
assert TORCH_NO_ARGUMENT <= set(NO_ARGUMENT)

# Globals the allowlist holds, ones it refuses, and ones it blocks outright.
ALLOWED = [
    ("collections", "OrderedDict"), ("collections", "Counter"), ("builtins", "set"), ("__builtin__", "set"),
    ("builtins", "complex"), ("builtins", "bytearray"), ("_codecs", "encode"), ("torch", "Size"),
    ("torch", "device"), ("torch", "float32"), ("torch", "int64"), ("torch", "FloatStorage"),
    ("torch", "LongStorage"), ("torch", "ByteStorage"), ("torch.storage", "UntypedStorage"),
    ("torch._utils", "_rebuild_tensor_v2"), ("torch._utils", "_rebuild_parameter"),
    ("torch.nn.parameter", "Parameter"), ("torch", "Tensor"), ("torch", "FloatTensor"),
    ("torch.serialization", "_get_layout"), ("torch", "per_tensor_affine"),
]
REFUSED = [
    ("copy_reg", "_reconstructor"), ("builtins", "eval"), ("builtins", "getattr"), ("builtins", "frozenset"),
    ("collections", "defaultdict"), ("torch", "float"), ("exceptions", "ValueError"), ("numpy", "load"),
]
BLOCKED = [("os", "system"), ("posix", "system"), ("sys", "modules")]

# data/0: eight float32 or four int64; data/1: eight bytes; data/2: empty.
RECORDS = {"0": bytes(range(1, 33)), "1": bytes(range(200, 208)), "2": b""}

KEYS = st.sampled_from(sorted(RECORDS) + ["3"])
_small = st.integers(0, 9)


def text(value: str) -> list:
    return [("BINUNICODE", value.encode("utf-8", "surrogatepass"))]


def integer(value: int) -> list:
    if 0 <= value < 256:
        return [("BININT1", value)]
    if -(2**31) <= value < 2**31:
        return [("BININT", value)]
    return [("LONG1", value.to_bytes((value.bit_length() + 8) // 8, "little", signed=True))]


_ints = st.one_of(
    _small.map(integer),
    st.integers(0, 255).map(lambda v: [("BININT1", v)]),
    st.integers(0, 65535).map(lambda v: [("BININT2", v)]),
    st.integers(-(2**31), 2**31 - 1).map(lambda v: [("BININT", v)]),
    st.binary(max_size=10).map(lambda b: [("LONG1", b)]),
)
_strings = st.one_of(
    st.text(st.characters(exclude_categories=()), max_size=6).map(text),
    st.binary(max_size=6).map(lambda b: [("BINUNICODE", b)]),
    st.binary(max_size=6).map(lambda b: [("SHORT_BINSTRING", b)]),
    st.sampled_from(["cpu", "meta", "storage", "latin1", "utf-8", "rot13", "strided", "foo"]).map(text),
)
_scalars = st.one_of(
    st.sampled_from([[("NONE",)], [("NEWTRUE",)], [("NEWFALSE",)]]),
    _ints,
    st.binary(min_size=8, max_size=8).map(lambda b: [("BINFLOAT", b)]),
    st.floats().map(lambda f: [("BINFLOAT", struct.pack(">d", f))]),
    _strings,
)
_memo_index = st.integers(0, 3)
_globals = st.sampled_from(ALLOWED + ALLOWED + REFUSED + BLOCKED).map(lambda g: [("GLOBAL", g)])


def tuple_of(items: list[list]) -> list:
    if len(items) == 0:
        return [("EMPTY_TUPLE",)]
    body = [op for item in items for op in item]
    if len(items) <= 3:
        return body + [(f"TUPLE{len(items)}",)]
    return [("MARK",)] + body + [("TUPLE",)]


@st.composite
def _tensor(draw, values, persistent_ids):
    ndim = draw(st.integers(0, 2))
    size = tuple_of([integer(draw(st.integers(0, 4))) for _ in range(ndim)])
    stride = tuple_of([integer(draw(st.integers(0, 3))) for _ in range(ndim)])
    args = [draw(persistent_ids(values)), integer(draw(st.integers(0, 4))), size, stride,
            draw(st.sampled_from([[("NEWFALSE",)], [("NEWTRUE",)]])),
            [("GLOBAL", ("collections", "OrderedDict")), ("EMPTY_TUPLE",), ("REDUCE",)]]
    tensor = [("GLOBAL", ("torch._utils", "_rebuild_tensor_v2"))] + tuple_of(args) + [("REDUCE",)]
    if draw(st.booleans()):
        return tensor
    return ([("GLOBAL", ("torch._utils", "_rebuild_parameter"))]
            + tuple_of([tensor, draw(st.sampled_from([[("NEWFALSE",)], [("NEWTRUE",)]])), [("EMPTY_DICT",)]])
            + [("REDUCE",)])


def _containers(values, persistent_ids):
    items = st.lists(values, max_size=4)
    pairs = st.lists(st.tuples(st.one_of(_scalars, _scalars, values), values), max_size=3)
    return st.one_of(
        items.map(tuple_of),
        items.map(lambda xs: [("EMPTY_LIST",)] + [op for x in xs for op in x + [("APPEND",)]]),
        items.map(lambda xs: [("EMPTY_LIST",), ("MARK",)] + [op for x in xs for op in x] + [("APPENDS",)]),
        pairs.map(lambda kv: [("EMPTY_DICT",)] + [op for k, v in kv for op in k + v + [("SETITEM",)]]),
        pairs.map(lambda kv: [("EMPTY_DICT",), ("MARK",)] + [op for k, v in kv for op in k + v] + [("SETITEMS",)]),
        st.just([("EMPTY_SET",)]),
        st.tuples(_globals, items).map(lambda g: g[0] + tuple_of(g[1]) + [("REDUCE",)]),
        st.tuples(_globals, items).map(lambda g: g[0] + tuple_of(g[1]) + [("NEWOBJ",)]),
        st.tuples(values, values).map(lambda vs: vs[0] + vs[1] + [("BUILD",)]),
        st.tuples(values, _memo_index, st.booleans()).map(
            lambda v: v[0] + [("BINPUT" if v[2] else "LONG_BINPUT", v[1])]),
        persistent_ids(values),
        _tensor(values, persistent_ids),
    )


_memo_gets = st.tuples(_memo_index, st.booleans()).map(lambda g: [("BINGET" if g[1] else "LONG_BINGET", g[0])])

_single_ops = st.one_of(
    st.sampled_from(sorted(TORCH_NO_ARGUMENT)).map(lambda name: (name,)),
    _memo_gets.map(lambda ops: ops[0]),
    _scalars.map(lambda ops: ops[0]),
    _globals.map(lambda ops: ops[0]),
)
_mutations = st.lists(st.tuples(st.sampled_from(MUTATIONS),
                                st.integers(0, 10**6), _single_ops), max_size=3)


def value_ops(persistent_ids):
    """Ops that push one value: scalars, memo gets and globals, in containers,
    calls, BUILDs and memo puts, with storages from `persistent_ids(values)`, a
    strategy of ops that push a persistent id and load it."""
    return st.recursive(st.one_of(_scalars, _memo_gets, _globals),
                        lambda inner: _containers(inner, persistent_ids), max_leaves=12)


def programs(persistent_ids):
    """Whole pickles: a PROTO (or none), one value, STOP, then mutated."""
    return st.builds(
        lambda proto, value, mutations: mutate(proto + value + [("STOP",)], mutations),
        st.sampled_from([[("PROTO", 2)], [("PROTO", 2)], [], [("PROTO", 1)], [("PROTO", 5)], [("PROTO", 253)]]),
        value_ops(persistent_ids),
        st.one_of(st.just([]), _mutations),
    )


# --- the checks ----------------------------------------------------------------


def torch_load(path):
    """(object, None) or (None, the exception) from torch.load(weights_only=True)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            return torch.load(path, weights_only=True), None
        except Exception as error:  # noqa: BLE001 - any exception is torch refusing the file
            return None, error


# What torch's loader accepts and tensorplay's refuses, by the message it gives.
REFUSED_ON_PURPOSE = (
    # torch.Tensor, a legacy tensor type or a storage class called with a size
    # allocates uninitialised memory, and torch returns whatever it held.
    "uninitialised memory",
    # torch ignores bytes after STOP: a second pickle hidden there is how polyglot
    # files fool other scanners, and no writer puts anything there.
    "follow the pickle's STOP",
    # The same after a legacy file's last storage (a zip appended there makes a
    # file that zip readers take for a zip checkpoint).
    "after the last storage",
    # torch.device(195) and torch.device('cuda:195'): torch wraps the index into
    # 8 bits, making another device (cuda:-61) than the file names.
    "does not fit torch's 8-bit device index",
)
# Not supported, as no pickler writes them: Counter(iterable), which counts the
# items (Python pickles a Counter as Counter(dict)); set(), OrderedDict(), bytes()
# or bytearray() of a non-empty iterable other than a list or tuple (a dict's
# keys, a string's characters), and OrderedDict() of pairs that are not lists or
# tuples (2-character strings); BUILD on a tensor other than a pre-1.0 empty one
# with `(storage, offset, size, stride)` (torch calls `set_` or `__setstate__`
# with any state) or setting attributes of a storage or a Counter; REDUCE or NEWOBJ
# arguments other than a tuple (torch unpacks any iterable); backward hooks other
# than an empty dict or None (torch sets whatever is there as the tensor's hooks,
# which it never saves); a storage key other than a str or an int (torch takes
# any value, and names a zip record by its str()); a legacy file's
# storage keys in anything but a list or tuple (torch iterates any iterable, and
# a set's order is not the file's).
NOT_SUPPORTED = (
    "collections.Counter: expects a dict",
    "collections.OrderedDict: expects a dict",
    "collections.OrderedDict: expects pairs, got a",
    "builtins.set: expects a list, tuple or set",
    "builtins.bytearray: cannot build from",
    "builtins.bytes: cannot build from",
    "unsupported: BUILD",
    "arguments must be a tuple",
    "the storage key list must be a list or tuple",
    "backward_hooks must be an OrderedDict",
    "backward hooks cannot be loaded",
    "the storage key must be a str or an int",
)


def refused_on_purpose(error, also=()) -> bool:
    return error is not None and any(reason in str(error) for reason in REFUSED_ON_PURPOSE + NOT_SUPPORTED + also)


def _as_214_names(names):
    """torch 2.13 reports a Python 2 exception as `exceptions.ValueError`, which no
    allowlist entry can match; tensorplay maps it to `builtins.ValueError` as 2.14
    does, so the name it reports is the one to allowlist."""
    return [name.replace("exceptions.", "builtins.", 1) if name.startswith("exceptions.") else name for name in names]


def _torch_object(description) -> bool:
    """A storage or StorageType object: the numpy backend has its own stand-ins."""
    return description.get("kind") == "object" and description.get("class", "").startswith("torch.")


def compare(path: pathlib.Path, torch_scan, also_refused=(), also_loaded=(), normalize=lambda obj: obj) -> None:
    """`torch_scan(path)`: torch's unsafe globals, and whether its scan read the
    whole pickle; None where it raises. `also_refused`: messages of refusals the
    format adds to REFUSED_ON_PURPOSE and NOT_SUPPORTED; `also_loaded`: messages
    of torch's errors on files tensorplay loads on purpose; `normalize`: applied to
    both loaded objects before they are compared."""
    expected, torch_error = torch_load(path)
    try:
        loaded = tensorplay.load(path, backend="torch")
        our_error = None
    except tensorplay.CheckpointError as error:
        our_error = error
    if torch_error is None and not refused_on_purpose(our_error, also_refused):
        assert our_error is None, f"torch loads it, tensorplay refuses: {our_error}"
        expected = describe(normalize(expected))
        assert_same_description(describe(normalize(loaded)), expected)
        assert_same_description(describe(normalize(tensorplay.load(path, backend="torch", mmap=True))), expected)
        if not numpy_cannot_hold(expected) and not contains_kind(expected, _torch_object):
            try:
                arrays = tensorplay.load(path, backend="numpy")
            except tensorplay.UnsupportedCheckpointError as error:  # torch objects as values or keys
                assert "the numpy backend cannot" in str(error)
            else:
                check_numpy_result(arrays, expected)
    elif not any(message in str(torch_error) for message in also_loaded):
        assert our_error is not None, f"torch refuses it ({torch_error!r}), tensorplay loads {loaded!r}"

    # A checkpoint is clean when a load accepts it; other files (a pickle that is
    # no legacy checkpoint's) are judged by what they would run.
    report = scanner.scan(path)
    checkpoint = report.format in ("torch-zip", "torch-legacy")
    if checkpoint and "cannot be restored here" not in str(our_error):  # the machine's devices, not the file
        assert (report.verdict == "clean") == (our_error is None), (report.verdict, our_error)
    theirs = torch_scan(path)
    try:
        ours = sorted(get_unsafe_globals_in_checkpoint(path))
    except tensorplay.MalformedCheckpointError:
        # torch's scanner skims past what it cannot read (a string's UTF-8, say);
        # tensorplay's says so, and its loader refuses the file too.
        assert our_error is not None
        return
    # On a malformed pickle the two scanners may stop in different places (torch's
    # at the first STOP, tensorplay's at a break, or past a STOP the stack does
    # not allow); anywhere else they report the same names.
    if theirs is not None and not isinstance(our_error, tensorplay.MalformedCheckpointError):
        names, whole_pickle = theirs
        if whole_pickle:
            assert ours == sorted(_as_214_names(names))
        else:  # tensorplay's also names what follows the STOP
            assert set(_as_214_names(names)) <= set(ours)
