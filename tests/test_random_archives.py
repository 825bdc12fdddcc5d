"""Random damage to the zip structure of real torch checkpoints, read by torch's
loader and by tensorplay.

test_random_pickles.py varies what a checkpoint's pickle says; this varies the
archive around it. Every field of the local headers, data descriptors, central
directory records, ZIP64 records and end record is set to 0, all ones, one off,
a little off, a random value or another record's; name bytes change case or
character; bits flip; bytes are inserted, deleted, appended or prepended; the
file is cut short; payload bytes change; directory records are swapped or
repeated. Where torch loads the result, tensorplay loads the same tensors or
refuses it for a reason listed below; where torch refuses it, so does
tensorplay, with a CheckpointError; the scan agrees with the load."""
from __future__ import annotations

import dataclasses
import io
import pathlib
import random
import struct
import tempfile
import zipfile
import zlib

import pytest
import tensorplay
from describe import describe
from expectations import assert_same_description, check_numpy_result
from hypothesis import given, settings
from hypothesis import strategies as st
from tensorplay import scanner
from tensorplay.serialization import get_unsafe_globals_in_checkpoint
from weights_only_differential import torch_load

torch = pytest.importorskip("torch")

# --- where the fields are -----------------------------------------------------------

LOCAL_HEADER = [("signature", 4), ("version_needed", 2), ("flags", 2), ("method", 2), ("time", 2),
                ("date", 2), ("crc32", 4), ("compressed_size", 4), ("size", 4), ("name_length", 2),
                ("extra_length", 2)]
DIRECTORY_RECORD = [("signature", 4), ("version_made_by", 2), ("version_needed", 2), ("flags", 2),
                    ("method", 2), ("time", 2), ("date", 2), ("crc32", 4), ("compressed_size", 4),
                    ("size", 4), ("name_length", 2), ("extra_length", 2), ("comment_length", 2),
                    ("disk", 2), ("internal_attributes", 2), ("external_attributes", 4),
                    ("header_offset", 4)]
DESCRIPTOR = [("signature", 4), ("crc32", 4), ("compressed_size", 4), ("size", 4)]
END = [("signature", 4), ("disk", 2), ("directory_disk", 2), ("entries_on_disk", 2), ("entries", 2),
       ("directory_size", 4), ("directory_offset", 4), ("comment_length", 2)]
ZIP64_LOCATOR = [("signature", 4), ("end_disk", 4), ("end_offset", 8), ("disks", 4)]
ZIP64_END = [("signature", 4), ("record_size", 8), ("version_made_by", 2), ("version_needed", 2),
             ("disk", 4), ("directory_disk", 4), ("entries_on_disk", 8), ("entries", 8),
             ("directory_size", 8), ("directory_offset", 8)]


@dataclasses.dataclass
class Field:
    record: str  # "local", "descriptor", "directory", "end", "zip64_locator", "zip64_end"
    index: int  # the entry, for the per-entry records
    name: str
    offset: int
    size: int


@dataclasses.dataclass
class Structure:
    fields: list[Field]
    directory_records: list[tuple[int, int]]  # (start, end) of each, in order
    payloads: list[tuple[int, int]]  # (offset, size) of each entry's bytes


def _fields(record, index, layout, offset, into):
    for name, size in layout:
        into.append(Field(record, index, name, offset, size))
        offset += size
    return offset


def structure(data: bytes) -> Structure:
    """Where every header field of an intact torch archive lies."""
    fields, records, payloads = [], [], []
    end = data.rfind(b"PK\x05\x06")
    _fields("end", 0, END, end, fields)
    entries, _, position = struct.unpack_from("<HII", data, end + 10)
    locator = end - 20
    if data[locator:locator + 4] == b"PK\x06\x07":  # torch always writes one; zipfile when needed
        _fields("zip64_locator", 0, ZIP64_LOCATOR, locator, fields)
        zip64_end = struct.unpack_from("<Q", data, locator + 8)[0]
        _fields("zip64_end", 0, ZIP64_END, zip64_end, fields)
        entries, _, position = struct.unpack_from("<QQQ", data, zip64_end + 32)
    for i in range(entries):
        name_length, extra_length, comment_length = struct.unpack_from("<HHH", data, position + 28)
        compressed_size, = struct.unpack_from("<I", data, position + 20)
        header, = struct.unpack_from("<I", data, position + 42)
        start = position
        position = _fields("directory", i, DIRECTORY_RECORD, position, fields)
        fields.append(Field("directory", i, "name", position, name_length))
        position += name_length + extra_length + comment_length
        records.append((start, position))
        name_length, extra_length = struct.unpack_from("<HH", data, header + 26)
        payload = _fields("local", i, LOCAL_HEADER, header, fields)
        fields.append(Field("local", i, "name", payload, name_length))
        payload += name_length + extra_length
        payloads.append((payload, compressed_size))
        if compressed_size and data[payload + compressed_size:payload + compressed_size + 4] == b"PK\x07\x08":
            _fields("descriptor", i, DESCRIPTOR, payload + compressed_size, fields)
    return Structure(fields, records, payloads)


def field(data: bytes, record: str, name: str, index: int = 0) -> Field:
    return next(f for f in structure(data).fields if (f.record, f.name, f.index) == (record, name, index))


def patched(data: bytes, f: Field, value: int) -> bytes:
    out = bytearray(data)
    out[f.offset:f.offset + f.size] = (value % (1 << 8 * f.size)).to_bytes(f.size, "little")
    return bytes(out)


# --- the damage ---------------------------------------------------------------------

# An entry marked as a directory (DOS attribute 0x10, or a name ending in "/")
# makes torch's reader skip its bytes and hand back the uninitialised buffer it
# allocated for them: such a file has no reference, and the attribute is left
# alone (test_an_entry_marked_as_a_directory_loads_its_bytes pins it).
UNTOUCHED = {"name", "external_attributes"}


def _in_file(data: bytearray, fields) -> list[Field]:
    """The fields still wholly in a file earlier damage may have cut short."""
    return [f for f in fields if f.offset + f.size <= len(data)]


def _set_field(data: bytearray, s: Structure, rng: random.Random) -> str:
    candidates = _in_file(data, [f for f in s.fields if f.name not in UNTOUCHED])
    if not candidates:
        return "no field left to set"
    f = rng.choice(candidates)
    value = int.from_bytes(data[f.offset:f.offset + f.size], "little")
    twins = _in_file(data, [g for g in s.fields if (g.record, g.name) == (f.record, f.name) and g is not f])
    how = rng.choice(["zero", "ones", "plus one", "minus one", "a little off", "random", "another record's"])
    new = {
        "zero": 0, "ones": -1, "plus one": value + 1, "minus one": value - 1,
        "a little off": value + rng.choice([-1, 1]) * rng.randint(2, 80),
        "random": rng.getrandbits(8 * f.size),
        "another record's": int.from_bytes(data[twins[0].offset:twins[0].offset + f.size], "little")
        if twins else value ^ 1,
    }[how]
    data[f.offset:f.offset + f.size] = (new % (1 << 8 * f.size)).to_bytes(f.size, "little")
    return f"{f.record}[{f.index}].{f.name} = {how}"


def _rename(data: bytearray, s: Structure, rng: random.Random) -> str:
    candidates = _in_file(data, [f for f in s.fields if f.name == "name" and f.size])
    if not candidates:
        return "no name left to change"
    f = rng.choice(candidates)
    at = f.offset + rng.randrange(f.size)
    how = rng.choice(["case", "character", "slash"])
    byte = data[at]
    data[at] = {"case": ord(chr(byte).swapcase()) if chr(byte).isalpha() else byte ^ 0x20,
                "character": rng.randrange(33, 127), "slash": ord("/")}[how]
    return f"{f.record}[{f.index}].name[{at - f.offset}]: {how}"


def _recase(data: bytearray, s: Structure, rng: random.Random) -> str:
    """One letter of an entry's name in the other case, in both its headers: torch
    looks records up ignoring case."""
    index = rng.randrange(len(s.payloads))
    names = [f for f in s.fields if f.name == "name" and f.index == index and f.offset + f.size <= len(data)]
    letters = [i for i in range(min(f.size for f in names)) if chr(data[names[0].offset + i]).isalpha()] \
        if len(names) == 2 else []
    if not letters:
        return "no name left to change the case of"
    at = rng.choice(letters)
    for f in names:
        data[f.offset + at] ^= 0x20
    return f"entry {index}'s name[{at}] in the other case"


def _flip(data: bytearray, s: Structure, rng: random.Random) -> str:
    candidates = _in_file(data, [f for f in s.fields if f.name not in UNTOUCHED])
    if not candidates:
        return "no field left to flip a bit of"
    f = rng.choice(candidates)
    at = f.offset + rng.randrange(f.size)
    data[at] ^= 1 << rng.randrange(8)
    return f"bit flipped in {f.record}[{f.index}].{f.name}"


def _cut(data: bytearray, s: Structure, rng: random.Random) -> str:
    n = rng.randrange(len(data) + 1)
    del data[n:]
    return f"cut at {n}"


def _insert_or_delete(data: bytearray, s: Structure, rng: random.Random) -> str:
    f = rng.choice(s.fields)
    at, n = min(f.offset, len(data)), rng.randint(1, 8)
    if rng.random() < 0.5:
        data[at:at] = rng.randbytes(n)
        return f"{n} bytes inserted at {f.record}[{f.index}].{f.name}"
    del data[at:at + n]
    return f"{n} bytes deleted at {f.record}[{f.index}].{f.name}"


def _append(data: bytearray, s: Structure, rng: random.Random) -> str:
    data += rng.randbytes(rng.randint(1, 40)) if rng.random() < 0.5 else bytes(data[:rng.randint(4, 200)])
    return "bytes appended"


def _prepend(data: bytearray, s: Structure, rng: random.Random) -> str:
    data[0:0] = b"X" * rng.randint(1, 16)
    return "bytes prepended"


def _payload(data: bytearray, s: Structure, rng: random.Random) -> str:
    offset, size = rng.choice(s.payloads)
    if size and offset + size <= len(data):
        data[offset + rng.randrange(size)] ^= 0xFF
    return "a payload byte changed"


def _reorder_directory(data: bytearray, s: Structure, rng: random.Random) -> str:
    start, end = s.directory_records[0][0], s.directory_records[-1][1]
    if end > len(data):
        return "directory reordered past the end: nothing"
    records = [bytes(data[a:b]) for a, b in s.directory_records]
    i, j = rng.sample(range(len(records)), 2)
    if rng.random() < 0.5:
        records[i], records[j] = records[j], records[i]
        how = f"directory records {i} and {j} swapped"
    else:
        records[j] = records[i]
        how = f"directory record {i} repeated over {j}"
    new = b"".join(records)
    if len(new) != end - start:
        return "directory reordered with another length: nothing"
    data[start:end] = new
    return how


DAMAGE = [_set_field, _set_field, _set_field, _set_field, _rename, _recase, _flip, _cut, _insert_or_delete,
          _append, _prepend, _payload, _reorder_directory]


def damaged(base: bytes, damage: list[tuple[int, int]]) -> tuple[bytes, list[str]]:
    data, done = bytearray(base), []
    s = structure(base)  # later damage aims where the intact file had its fields
    for kind, seed in damage:
        done.append(DAMAGE[kind](data, s, random.Random(seed)))
    return bytes(data), done


# --- the checks ---------------------------------------------------------------------

# What torch's loader accepts and tensorplay's refuses, by the message it gives.
REFUSED_ON_PURPOSE = (
    # torch finds a payload through the local header's name and extra lengths but
    # takes its size and method from the directory: a header that says otherwise
    # shows other readers another file (how scanners were fooled).
    "the local header and the central directory disagree",
    # Every local header is checked, including those of records torch never
    # reads (an empty storage's).
    "bad local header signature",
    # torch falls back on the classic end record when the ZIP64 one is missing or
    # broken: two directories that can disagree.
    "ZIP64 end of central directory",
    # Entries sharing bytes with each other or with the directory, or reaching
    # past the file (where torch reads them, it reads whatever lies there).
    "overlaps entry",
    "overlaps the central directory",
    "runs past the end of the file",
    "lies outside the file",
    # Readings that differ: a classic end record that says otherwise than the
    # ZIP64 one, a directory with room for more records than counted, an end
    # record inside another's comment, local headers no directory lists.
    "zip readers would read this archive apart",
    # torch's reader takes disk 1 as well as disk 0 in the ZIP64 record.
    "multi-disk zip archives are not supported",
    # A name torch's case-insensitive lookup would resolve to either of two entries.
    "duplicate entry name",
    "two records whose names differ only in case",
    # A local header whose extra field grew shifts data.pkl: torch then runs what
    # starts there and ignores the bytes its STOP leaves over, as it would a second
    # pickle hidden after the first.
    "follow the pickle's STOP",
)


# What torch's loader accepts, and tensorplay refuses, where torch is wrong: for a
# DEFLATE stream that is corrupt or inflates to another size than the directory
# declares, torch's reader returns what its inflater left in the buffer. Each
# such refusal is checked against zlib.
INFLATE_ERRORS = ("corrupt deflate stream", "inflated to", "inflates to more than", "more than DEFLATE can produce")


def _inflates_as_declared(path: pathlib.Path, error) -> bool | None:
    """Whether zlib inflates the entry `error` names to its declared size; None
    where zipfile cannot read the directory."""
    name = str(error).split("[entry '", 1)[1].split("'", 1)[0]
    data = path.read_bytes()
    try:
        info = zipfile.ZipFile(path).getinfo(name)
    except Exception:  # noqa: BLE001 - a directory zipfile cannot read: no second opinion
        return None
    name_length, extra_length = struct.unpack_from("<HH", data, info.header_offset + 26)
    start = info.header_offset + 30 + name_length + extra_length
    inflater = zlib.decompressobj(-15)
    try:
        out = inflater.decompress(data[start:start + info.compress_size], info.file_size + 1)
    except zlib.error:
        return False
    return inflater.eof and len(out) == info.file_size


def _marks_a_directory(path: pathlib.Path) -> bool:
    try:
        entries = zipfile.ZipFile(path).infolist()
    except Exception:  # noqa: BLE001 - a directory zipfile cannot read holds no such mark it sees
        return False
    return any(e.external_attr & 0x10 or e.filename.endswith("/") for e in entries)


def _tensorplay_load(path, mmap):
    try:
        return tensorplay.load(path, backend="torch", mmap=mmap), None
    except tensorplay.CheckpointError as error:
        return None, error


def check(path: pathlib.Path, damage=()) -> None:
    expected, torch_error = torch_load(path)
    loaded, error = _tensorplay_load(path, mmap=False)
    mapped, mapped_error = _tensorplay_load(path, mmap=True)
    try:
        arrays, numpy_error = tensorplay.load(path, backend="numpy"), None
    except tensorplay.CheckpointError as e:
        arrays, numpy_error = None, e
    # One reader, whether it maps the file or not, for either backend.
    assert str(error) == str(mapped_error) == str(numpy_error), damage
    if error is None:
        assert_same_description(describe(mapped), describe(loaded))
        check_numpy_result(arrays, describe(loaded))
    if _marks_a_directory(path):
        pass  # torch returned uninitialised memory for that entry: no reference
    elif torch_error is None:
        if error is None:
            assert_same_description(describe(loaded), describe(expected))
        elif any(reason in str(error) for reason in INFLATE_ERRORS):
            assert _inflates_as_declared(path, error) is not True, (damage, error)
        else:
            assert any(reason in str(error) for reason in REFUSED_ON_PURPOSE), (damage, error)
    else:
        assert error is not None, (damage, torch_error)

    try:  # reads no payload, so it may accept what a load refuses, never the reverse
        tensorplay.inspect(path)
    except tensorplay.CheckpointError:
        assert error is not None, damage

    report = scanner.scan(path)
    if error is None or (report.format == "torch-zip" and report.verdict == "clean"):
        assert (report.format, report.verdict, error) == ("torch-zip", "clean", None), (damage, report)
        # The gate alone checks less than a load: what loads passes it.
        assert scanner.scan(path, pickles_only=True).verdict == "clean", damage
    try:
        names = get_unsafe_globals_in_checkpoint(path)
    except tensorplay.MalformedCheckpointError:
        assert error is not None, damage
    else:
        if error is None:
            assert names == []


def _objects():
    weight = torch.arange(24, dtype=torch.float32).reshape(4, 6)
    return {
        "state_dict": {"weight": weight, "bias": torch.arange(5), "empty": torch.empty(0), "view": weight[1:, 2:]},
        "nested": {"model": {"a": torch.ones(3, dtype=torch.bfloat16), "steps": 7},
                   "optimizer": [torch.zeros(2, 2), 1.5]},
        "one_tensor": torch.tensor([1.0, 2.0]),
    }


def _deflated(data: bytes) -> bytes:
    """The archive rewritten by Python's zipfile with every entry deflated: torch's
    reader inflates them (its mmap path does not, and reads the deflated bytes)."""
    source, out = zipfile.ZipFile(io.BytesIO(data)), io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as target:
        for info in source.infolist():
            fixed = zipfile.ZipInfo(info.filename, date_time=(2020, 1, 1, 0, 0, 0))  # the same bytes every run
            target.writestr(fixed, source.read(info), zipfile.ZIP_DEFLATED)
    return out.getvalue()


@pytest.fixture(scope="module")
def bases(tmp_path_factory) -> list[bytes]:
    """Checkpoints written by torch.save, one also without CRCs, and two rewritten
    with deflated entries."""
    folder = tmp_path_factory.mktemp("bases")
    paths = []
    for name, obj in _objects().items():
        torch.save(obj, folder / f"{name}.pt")
        paths.append(folder / f"{name}.pt")
    crc = torch.serialization.get_crc32_options()
    torch.serialization.set_crc32_options(False)
    try:
        torch.save(_objects()["state_dict"], folder / "without_crc.pt")
    finally:
        torch.serialization.set_crc32_options(crc)
    paths.append(folder / "without_crc.pt")
    written = [p.read_bytes() for p in paths]
    return written + [_deflated(written[0]), _deflated(written[1])]


_damage = st.lists(st.tuples(st.integers(0, len(DAMAGE) - 1), st.integers(0, 2**32)), min_size=1, max_size=3)


@settings(max_examples=500, deadline=None)
@given(which=st.integers(0, 5), damage=_damage)
def test_damaged_archives_load_as_torch_loads_them_or_are_refused(bases, which, damage):
    data, done = damaged(bases[which], damage)
    with tempfile.TemporaryDirectory() as folder:
        path = pathlib.Path(folder, "ckpt.pt")
        path.write_bytes(data)
        check(path, done)


# --- cases the random damage found ----------------------------------------------------


def _rewritten(base: bytes, record: str, content: bytes) -> bytes:
    """The archive with one record's bytes replaced, written by Python's zipfile."""
    source, out = zipfile.ZipFile(io.BytesIO(base)), io.BytesIO()
    with zipfile.ZipFile(out, "w") as target:
        for info in source.infolist():
            target.writestr(info, content if info.filename.endswith("/" + record) else source.read(info))
    return out.getvalue()


def _with_field(record, name, value, index=0):
    return lambda data: patched(data, field(data, record, name, index), value)


def _grown_extra(by, index=0):
    """The local header's extra field declared `by` bytes longer: the payload then
    starts that much later, in torch and here."""
    def patch(data):
        f = field(data, "local", "extra_length", index)
        return patched(data, f, int.from_bytes(data[f.offset:f.offset + 2], "little") + by)
    return patch


def _with_flag(bit, index):
    def patch(data):
        f = field(data, "directory", "flags", index)
        return patched(data, f, int.from_bytes(data[f.offset:f.offset + 2], "little") | bit)
    return patch


# name: (how the file is changed, whether torch loads it)
PINNED = {
    "storage alignment ' +6_4\\n'": (lambda data: _rewritten(data, ".storage_alignment", b" +6_4\n"), True),
    "storage alignment '6__4'": (lambda data: _rewritten(data, ".storage_alignment", b"6__4"), False),
    "storage alignment '0x40'": (lambda data: _rewritten(data, ".storage_alignment", b"0x40"), False),
    "storage alignment ''": (lambda data: _rewritten(data, ".storage_alignment", b""), False),
    "serialization id not UTF-8": (lambda data: _rewritten(data, ".data/serialization_id", b"\xff" * 40), False),
    "patch data flag on data.pkl": (_with_flag(0x0020, 0), False),
    "patch data flag on .format_version": (_with_flag(0x0020, 1), False),
    "masked local headers flag": (_with_flag(0x2000, 4), False),
    "an entry on disk 1": (_with_field("directory", "disk", 1, 4), True),
    "an entry on disk 2": (_with_field("directory", "disk", 2, 4), False),
    "classic end record's disks, under a ZIP64 one": (_with_field("end", "disk", 3), True),
    "classic end record's entry count on this disk, under a ZIP64 one": (_with_field("end", "entries_on_disk", 0),
                                                                         True),
    "ZIP64 locator counting 0 disks": (_with_field("zip64_locator", "disks", 0), False),
    "ZIP64 locator counting 2 disks": (_with_field("zip64_locator", "disks", 2), False),
    "ZIP64 entry count on this disk other than the total": (_with_field("zip64_end", "entries_on_disk", 0), False),
    "ZIP64 end record of 43 bytes": (_with_field("zip64_end", "record_size", 43), False),
    "ZIP64 end record of 45 bytes": (_with_field("zip64_end", "record_size", 45), True),
    "data.pkl spelled DATA.PKL": (lambda data: data.replace(b"/data.pkl", b"/DATA.PKL"), True),
    "a storage record spelled DATA/0": (lambda data: data.replace(b"/data/0", b"/DATA/0"), True),
    "version spelled VERSION": (lambda data: data.replace(b"/version", b"/VERSION"), True),
    "byteorder spelled ByteOrder": (lambda data: data.replace(b"/byteorder", b"/ByteOrder"), True),
    # torch tells TorchScript by "constants.pkl" in its list of names, where case counts.
    "a CONSTANTS.PKL record": (lambda data: _with_record(data, "CONSTANTS.PKL", b"N."), True),
}


def _with_record(data: bytes, record: str, content: bytes) -> bytes:
    """The archive with one more record, written by Python's zipfile."""
    source, out = zipfile.ZipFile(io.BytesIO(data)), io.BytesIO()
    with zipfile.ZipFile(out, "w") as target:
        for info in source.infolist():
            target.writestr(info, source.read(info))
        target.writestr(source.infolist()[0].filename.split("/")[0] + "/" + record, content)
    return out.getvalue()



@pytest.mark.parametrize("name", sorted(PINNED))
def test_damage_torch_loads_or_refuses_is_read_the_same(bases, name, tmp_path):
    change, torch_loads = PINNED[name]
    path = tmp_path / "ckpt.pt"
    path.write_bytes(change(bases[0]))
    assert (torch_load(path)[1] is None) == torch_loads
    assert (_tensorplay_load(path, mmap=False)[1] is None) == torch_loads
    check(path, [name])


def test_a_shifted_pickle_with_bytes_after_its_stop_is_refused_where_torch_runs_it(bases, tmp_path):
    """data.pkl's local extra field two bytes longer: the pickle is read from past
    PROTO, and ends two bytes before its record does (the data descriptor's "PK").
    torch runs it and ignores what follows STOP; tensorplay refuses that on purpose."""
    path = tmp_path / "ckpt.pt"
    path.write_bytes(_grown_extra(2)(bases[0]))
    assert torch_load(path)[1] is None
    error = _tensorplay_load(path, mmap=False)[1]
    assert "2 bytes follow the pickle's STOP" in str(error)
    check(path)


def test_a_pickle_protocol_torch_does_not_know_loads_as_torch_loads_it(bases, tmp_path):
    """torch's unpickler reads past PROTO's number (with a warning); what a later
    protocol adds would be new opcodes."""
    data = bytearray(bases[0])
    payload = structure(bases[0]).payloads[0][0]
    assert data[payload:payload + 2] == b"\x80\x02"
    data[payload + 1] = 253
    path = tmp_path / "ckpt.pt"
    path.write_bytes(bytes(data))
    with pytest.warns(UserWarning, match="Detected pickle protocol 253"):
        expected = torch.load(path, weights_only=True)
    assert_same_description(describe(tensorplay.load(path, backend="torch")), describe(expected))
    check(path)


def test_an_entry_marked_as_a_directory_loads_its_bytes(bases, tmp_path):
    """torch's reader skips the bytes of an entry with the DOS directory attribute
    and returns the buffer it allocated for them as it found it; with mmap=True it
    reads storages by offset, and gets them right."""
    entries = zipfile.ZipFile(io.BytesIO(bases[0])).infolist()
    weight = next(i for i, e in enumerate(entries) if e.filename.endswith("/data/0"))
    path = tmp_path / "ckpt.pt"
    path.write_bytes(patched(bases[0], field(bases[0], "directory", "external_attributes", weight), 0x10))
    expected = describe(torch.load(path, weights_only=True, mmap=True))
    for mmap in (False, True):
        assert_same_description(describe(tensorplay.load(path, backend="torch", mmap=mmap)), expected)
    assert torch.equal(tensorplay.load(path)["weight"], _objects()["state_dict"]["weight"])


def _with_corrupt_stream(data: bytes, record: str) -> bytes:
    """`data` with the DEFLATE stream of `record` starting with a reserved block type."""
    entries = zipfile.ZipFile(io.BytesIO(data)).infolist()
    index = next(i for i, e in enumerate(entries) if e.filename.endswith("/" + record))
    out = bytearray(data)
    out[structure(data).payloads[index][0]] = 0xFF
    return bytes(out)


def test_a_storage_whose_deflate_stream_is_corrupt_is_refused_where_torch_returns_garbage(bases, tmp_path):
    path = tmp_path / "ckpt.pt"
    path.write_bytes(_with_corrupt_stream(_deflated(bases[0]), "data/0"))
    assert torch_load(path)[1] is None  # and its "weight" is whatever the buffer held
    with pytest.raises(tensorplay.MalformedCheckpointError, match=r"corrupt deflate stream .*data/0"):
        tensorplay.load(path)
    assert scanner.scan(path).verdict == "unreadable"
    check(path)


def test_a_corrupt_deflate_stream_in_a_record_no_load_reads_leaves_the_file_clean(bases, tmp_path):
    """Neither loader reads .format_version's bytes for anything (torch only
    compares them with b"1"), so the scan, which calls clean what a load accepts,
    does not inflate them either."""
    path = tmp_path / "ckpt.pt"
    path.write_bytes(_with_corrupt_stream(_deflated(bases[0]), ".format_version"))
    assert torch_load(path)[1] is None
    tensorplay.load(path)
    assert scanner.scan(path).verdict == "clean"
    check(path)


def test_a_byteorder_record_in_capitals_still_swaps_big_endian_payloads(tmp_path):
    """torch finds `BYTEORDER` as it finds `byteorder`: missing it would read a
    big-endian file's values unswapped."""
    import numpy as np

    path = tmp_path / "ckpt.pt"
    torch.save({"w": torch.arange(4.0)}, path)
    source, out = zipfile.ZipFile(path), io.BytesIO()
    with zipfile.ZipFile(out, "w") as target:
        for info in source.infolist():
            name, data = info.filename, source.read(info)
            if name.endswith("/byteorder"):
                name, data = name[:-len("byteorder")] + "BYTEORDER", b"big"
            elif name.endswith("/data/0"):
                data = np.arange(4, dtype=">f4").tobytes()
            target.writestr(name, data)
    path.write_bytes(out.getvalue())
    assert torch.equal(torch.load(path, weights_only=True)["w"], torch.arange(4.0))
    for mmap in (False, True):
        assert torch.equal(tensorplay.load(path, mmap=mmap)["w"], torch.arange(4.0))
    check(path)
