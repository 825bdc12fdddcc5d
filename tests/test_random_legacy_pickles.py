"""Random legacy-format checkpoints, loaded by torch's weights-only loader and by
tensorplay.

A legacy file (`_use_new_zipfile_serialization=False`, and every checkpoint from
before torch 1.6) is five pickles in a row, the magic number, the protocol
version, sys_info, the object and the list of storage keys, then each listed
storage as an element count and its bytes. The object's pickle comes from the
same generator as test_random_pickles.py's, with legacy persistent ids (a
6-tuple whose last item may make a view of a storage, or a "module" id); the
other four pickles are mostly what torch writes and sometimes anything; the
storage section is mostly right and sometimes miscounted, cut short or followed
by more bytes. Where torch loads a file, tensorplay loads the same object; where
torch refuses it, tensorplay refuses it with a CheckpointError."""
from __future__ import annotations

import io
import pathlib
import pickle
import struct
import tempfile

import pytest
import tensorplay
from hypothesis import given, settings
from hypothesis import strategies as st
from pickle_programs import assemble
from tensorplay import scanner
from weights_only_differential import KEYS, RECORDS, compare, integer, programs, text, torch_load, tuple_of, value_ops

torch = pytest.importorskip("torch")

MAGIC = 0x1950A86A20F9469CFC6C
SYS_INFO = {"protocol_version": 1001, "little_endian": True, "type_sizes": {"short": 2, "int": 4, "long": 4}}

# What a legacy torch.save would declare and write for each key's record.
STORAGES = {"0": (("torch", "FloatStorage"), 8), "1": (("torch", "ByteStorage"), 8), "2": (("torch", "LongStorage"), 0)}
STORAGE_CLASSES = [("torch", "FloatStorage"), ("torch", "LongStorage"), ("torch", "ByteStorage"),
                   ("torch.storage", "UntypedStorage")]
VIEW_KEYS = ["v0", "v1", "0"]


@st.composite
def _persistent_id(draw, values):
    key = draw(KEYS)
    storage_type, numel = STORAGES.get(key, (("torch", "FloatStorage"), 4))
    if draw(st.integers(0, 9)) == 0:
        storage_type = draw(st.sampled_from(STORAGE_CLASSES))
    if draw(st.integers(0, 9)) == 0:
        numel = draw(st.integers(0, 9))
    view = [("NONE",)]
    if draw(st.integers(0, 3)) == 0:  # (view key, offset, numel): how older torch wrote storage views
        view = tuple_of([text(draw(st.sampled_from(VIEW_KEYS))), integer(draw(st.integers(0, 4))),
                         integer(draw(st.integers(0, 4)))])
    typename = "storage" if draw(st.integers(0, 9)) else "module"
    items = [text(typename), [("GLOBAL", storage_type)], text(key), text("cpu"), integer(numel), view]
    if draw(st.integers(0, 9)) == 0:  # anything in any slot
        items[draw(st.integers(0, 5))] = draw(values)
    if draw(st.integers(0, 19)) == 0:
        del items[draw(st.integers(0, 5))]
    return tuple_of(items) + [("BINPERSID",)]


_values = value_ops(_persistent_id)


def _pickled(ops: list) -> bytes:
    return assemble([("PROTO", 2)] + ops + [("STOP",)])


def _list_of(keys: list[str]) -> list:
    return [("EMPTY_LIST",)] + [op for key in keys for op in text(key) + [("APPEND",)]]


def _mostly(canonical, *others):
    """`canonical` nine times in ten, else one of `others`."""
    return st.integers(0, 9).flatmap(lambda i: st.just(canonical) if i else st.one_of(*others))


_magic = _mostly(
    pickle.dumps(MAGIC, protocol=2),
    st.sampled_from([pickle.dumps(MAGIC + 1, protocol=2),
                     pickle.dumps(float(MAGIC), protocol=2), _pickled([("LONG1", MAGIC.to_bytes(12, "little"))])]),
    _values.map(_pickled),
)
_protocol = _mostly(
    pickle.dumps(1001, protocol=2),
    st.sampled_from([_pickled([("BININT", 1001)]), _pickled([("LONG1", (1001).to_bytes(4, "little"))]),
                     pickle.dumps(1001.0, protocol=2), pickle.dumps(1000, protocol=2), pickle.dumps("1001", protocol=2),
                     _pickled([("NEWTRUE",)])]),
    _values.map(_pickled),
)
_sys_info = _mostly(pickle.dumps(SYS_INFO, protocol=2), _values.map(_pickled))


@st.composite
def _legacy_checkpoint(draw) -> bytes:
    program = draw(programs(_persistent_id))
    named = sorted(key for key in STORAGES if ("BINUNICODE", key.encode()) in program)
    keys = draw(_mostly(named, st.lists(st.sampled_from(sorted(STORAGES) + ["3"] + VIEW_KEYS), max_size=4)))
    keys_pickle = draw(_mostly(_pickled(_list_of(keys)), st.just(_pickled(tuple_of([text(key) for key in keys]))),
                               _values.map(_pickled)))
    records = b""
    for key in keys:
        _, numel = STORAGES.get(key, (None, draw(st.integers(0, 4))))
        data = RECORDS.get(key, bytes(range(numel * 4)))
        if draw(st.integers(0, 19)) == 0:
            numel += 1
        records += struct.pack("<q", numel) + data
    tail = draw(st.sampled_from(["whole"] * 8 + ["cut", "more"]))
    if tail == "cut":
        records = records[:-draw(st.integers(1, 9))]
    elif tail == "more":
        records += bytes(draw(st.integers(1, 9)))
    return draw(_magic) + draw(_protocol) + draw(_sys_info) + assemble(program) + keys_pickle + records


# What torch refuses in a legacy file and tensorplay loads: an untyped storage,
# which tensorplay.save writes for the dtypes without a legacy storage class
# (torch.save cannot write those at all), and torch's loader asks for its dtype.
LEGACY_LOADED = ("'torch.storage.UntypedStorage' has no attribute 'dtype'",)
# What torch loads from a legacy file and tensorplay refuses, on purpose.
LEGACY_REFUSED = (
    # A view's key in the key list: torch reads its bytes over the root's.
    "names a view of another storage",
)


def _unmark_empty_storages(obj, seen=None):
    """torch hands every id after the first that names a zero-byte storage a fresh
    empty storage (its data pointer is null), without the mark its loader puts on
    the one it keeps; tensorplay shares the first. The contents are the same
    (none): only that internal mark differs, so it is dropped from empty storages."""
    seen = set() if seen is None else seen
    if id(obj) in seen:
        return obj
    seen.add(id(obj))
    if isinstance(obj, torch.storage.TypedStorage) and obj.nbytes() == 0:
        vars(obj._untyped_storage).pop("_torch_load_uninitialized", None)
    elif isinstance(obj, dict):
        for key, value in obj.items():
            _unmark_empty_storages(key, seen)
            _unmark_empty_storages(value, seen)
    elif isinstance(obj, (list, tuple, set)):
        for item in obj:
            _unmark_empty_storages(item, seen)
    return obj


def _torch_scan(path):
    """The globals in the five pickles that torch's allowlist lacks, as torch's
    own pickle scanner reads them (get_unsafe_globals_in_checkpoint takes zip
    files only), or None where that scanner raises."""
    allowed = set(torch._weights_only_unpickler._get_allowed_globals())
    stream = io.BytesIO(path.read_bytes())
    names = set()
    try:
        for _ in range(5):
            names |= torch._weights_only_unpickler.get_globals_in_pkl(stream)
    except Exception:  # noqa: BLE001 - torch's scanner raising is its verdict
        return None
    return sorted(names - allowed), True


@settings(max_examples=500, deadline=None)
@given(checkpoint=_legacy_checkpoint())
def test_random_legacy_checkpoints_load_as_torch_loads_them_or_are_refused_as_torch_refuses_them(checkpoint):
    with tempfile.TemporaryDirectory() as folder:
        path = pathlib.Path(folder, "ckpt.pt")
        path.write_bytes(checkpoint)
        compare(path, _torch_scan, LEGACY_REFUSED, LEGACY_LOADED, _unmark_empty_storages)


# --- cases the random checkpoints found ---------------------------------------------

def _id(key, numel, view=None, storage_type=("torch", "FloatStorage")):
    metadata = [("NONE",)] if view is None else tuple_of([text(view[0]), integer(view[1]), integer(view[2])])
    return tuple_of([text("storage"), [("GLOBAL", storage_type)], text(key), text("cpu"), integer(numel),
                     metadata]) + [("BINPERSID",)]


def _tensor(storage, size):
    hooks = [("GLOBAL", ("collections", "OrderedDict")), ("EMPTY_TUPLE",), ("REDUCE",)]
    args = [storage, integer(0), tuple_of([integer(size)]), tuple_of([integer(1)]), [("NEWFALSE",)], hooks]
    return [("GLOBAL", ("torch._utils", "_rebuild_tensor_v2"))] + tuple_of(args) + [("REDUCE",)]


def _file(value, keys=("0",), records=None, protocol=None, sys_info=None, keys_pickle=None):
    """A legacy file holding `value` (ops), with storage "0" (four floats, 1 to 4)."""
    if records is None:
        records = b"".join(struct.pack("<q", 4) + struct.pack("<4f", 1, 2, 3, 4) for _ in keys)
    return (pickle.dumps(MAGIC, protocol=2) + (protocol or pickle.dumps(1001, protocol=2))
            + (sys_info or pickle.dumps(SYS_INFO, protocol=2)) + _pickled(value)
            + (keys_pickle or _pickled(_list_of(list(keys)))) + records)


TORCH_LOADS = {
    # The id of a storage seen before still makes a view of it (tensorplay
    # returned the whole storage).
    "a view of a storage named before": _file(tuple_of([_id("0", 4), _id("0", 4, ("v0", 1, 2))])),
    "a view past its storage's end is cut short": _file(_id("0", 4, ("v0", 3, 5))),
    "a view wholly past its storage's end is empty": _file(_id("0", 4, ("v0", 9, 2))),
    "a view's negative offset counts from the end": _file(_id("0", 4, ("v0", -3, 2))),
    "the storage keys as a tuple": _file(_id("0", 4), keys_pickle=_pickled(tuple_of([text("0")]))),
    "a storage key listed twice: the last copy counts": _file(
        _id("0", 4), keys=("0", "0"),
        records=struct.pack("<q4f", 4, 1, 2, 3, 4) + struct.pack("<q4f", 4, 5, 6, 7, 8)),
    "an empty storage the key list leaves out": _file(_id("0", 0), keys=()),
    "an empty storage named by two ids": _file(tuple_of([_id("0", 0), _id("0", 0)]), keys=()),
    "protocol version 1001.0": _file(_id("0", 4), protocol=pickle.dumps(1001.0, protocol=2)),
    # torch hands a later id of a still empty storage a fresh empty storage.
    "an empty tensor on a later id of an empty storage": _file(
        tuple_of([_id("0", 0), _tensor(_id("0", 0), 0)]), records=struct.pack("<q", 0)),
    # torch allocates the storage resizable, and set_ grows it to fit the tensor.
    "a tensor past its storage's end grows it": _file(_tensor(_id("0", 4), 6),
                                                       records=struct.pack("<q6f", 6, 1, 2, 3, 4, 5, 6)),
}

BOTH_REFUSE = {
    "a persistent id in sys_info": _file(_id("0", 4), sys_info=_pickled(_id("0", 4))),
    "a persistent id in the key list": _file(_id("0", 4), keys_pickle=_pickled(_id("0", 4))),
    "a list as a dict key in sys_info": _file(
        _id("0", 4), sys_info=_pickled([("EMPTY_DICT",), ("EMPTY_LIST",), ("NONE",), ("SETITEM",)])),
    "a record of the wrong size": _file(_id("0", 4), records=struct.pack("<q3f", 3, 1, 2, 3)),
    "a key the pickle does not name": _file(_id("0", 4), keys=("0", "1")),
    "a tensor past its storage's end, whose record has the declared size": _file(_tensor(_id("0", 4), 6)),
    "a tensor past the end of a view": _file(_tensor(_id("0", 4, ("v0", 1, 2)), 3)),
}

REFUSED_ON_PURPOSE = {
    "a storage the key list leaves out": (_file(_id("0", 4), keys=()), "uninitialised memory"),
    "bytes after the last storage": (_file(_id("0", 4)) + b"PK\x05\x06", "after the last storage"),
    # That fresh storage, grown to fit a tensor, is never read into.
    "a tensor on a later id of an empty storage": (
        _file(tuple_of([_id("0", 0), _tensor(_id("0", 0), 1)]), records=struct.pack("<q", 0)),
        "uninitialised memory"),
    "a view's key in the key list": (
        _file(tuple_of([_id("0", 4), _id("0", 4, ("v0", 1, 2))]), keys=("0", "v0"),
              records=struct.pack("<q4f", 4, 1, 2, 3, 4) + struct.pack("<q2f", 2, 20, 30)),
        "names a view of another storage"),
}


def _write(tmp_path, data: bytes) -> pathlib.Path:
    path = tmp_path / "ckpt.pt"
    path.write_bytes(data)
    return path


@pytest.mark.parametrize("name", sorted(TORCH_LOADS))
def test_legacy_files_torch_loads_load_the_same(name, tmp_path):
    path = _write(tmp_path, TORCH_LOADS[name])
    assert torch_load(path)[1] is None
    compare(path, _torch_scan, normalize=_unmark_empty_storages)


@pytest.mark.parametrize("name", sorted(BOTH_REFUSE))
def test_legacy_files_torch_refuses_are_refused(name, tmp_path):
    path = _write(tmp_path, BOTH_REFUSE[name])
    assert torch_load(path)[1] is not None
    with pytest.raises(tensorplay.CheckpointError):
        tensorplay.load(path)
    compare(path, _torch_scan)


@pytest.mark.parametrize("name", sorted(REFUSED_ON_PURPOSE))
def test_legacy_files_torch_loads_and_tensorplay_refuses_on_purpose(name, tmp_path):
    data, message = REFUSED_ON_PURPOSE[name]
    path = _write(tmp_path, data)
    assert torch_load(path)[1] is None
    with pytest.raises(tensorplay.MalformedCheckpointError, match=message):
        tensorplay.load(path)
    assert scanner.scan(path).verdict != "clean"


def test_an_untyped_storage_in_a_legacy_file_loads_as_bytes_where_torch_fails(tmp_path):
    path = _write(tmp_path, _file(_id("0", 16, storage_type=("torch.storage", "UntypedStorage")),
                                  records=struct.pack("<q", 16) + bytes(range(16))))
    assert any(message in str(torch_load(path)[1]) for message in LEGACY_LOADED)
    storage = tensorplay.load(path, backend="torch")
    assert bytes(storage) == bytes(range(16))
