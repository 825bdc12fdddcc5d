"""torch checkpoints: zip archives rebuilt from the real ones in
``tests/fixtures/torch*/`` with a member replaced or added (names in other case,
with NUL bytes, twice; bytes before the archive; extra end records; stored or
deflated; a local header that disagrees with the directory); legacy streams with
the payload in each of their five pickles; legacy tar checkpoints; and a tar
polyglot whose tar reading has a hostile ``storages`` member while its pickle
reading is a benign legacy stream."""
from __future__ import annotations

import functools
import os
import random
import struct
import zipfile

from . import payloads, tarfmt, zipfmt
from . import pickler as P
from .cases import Case

NAME = "torch"
FIXTURES = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "fixtures")
SMALL = ("torch/seed_tensor_dict.pt", "torch/parameters.pt", "torch/protocol_4.pt", "torch/seed_tensor.pt",
         "torch/python_values.pt", "torch_extra/protocol_1.pt", "torch/seed_batchnorm_state_dict.pt")
NAMES = ("model.pt", "pytorch_model.bin", "model.pth", "model.ckpt", "weights.tar", "model.safetensors", "x.zip",
         "notes.txt")
LEGACY_MAGIC = 0x1950A86A20F9469CFC6C


@functools.cache
def members(fixture: str) -> tuple[tuple[str, bytes], ...]:
    """A fixture's records, read with zipfile (the fixtures are ours, and benign)."""
    with zipfile.ZipFile(os.path.join(FIXTURES, fixture)) as z:
        return tuple((i.filename, z.read(i)) for i in z.infolist())


def rebuild(fixture: str, rng: random.Random | None, edit: str, payload: bytes) -> tuple[bytes, str]:
    """The fixture as a fresh archive, edited as ``edit`` says."""
    records = list(members(fixture))
    prefix = records[0][0].split("/")[0]
    data_pkl = f"{prefix}/data.pkl"
    deflated = rng is not None and rng.random() < 0.3
    entries = [zipfmt.Entry(n.encode(), d, method=8 if deflated and n.endswith(".pkl") else 0, align=64)
               for n, d in records]
    index = next(i for i, (n, _) in enumerate(records) if n == data_pkl)
    kw: dict = {}
    if edit == "benign":
        pass
    elif edit == "replace data.pkl":
        entries[index].data = payload
    elif edit == "extra member":
        entries.insert(index + 1, zipfmt.Entry(f"{prefix}/extra.pkl".encode(), payload))
    elif edit == "replace a storage":
        # A checkpoint of no tensor has no storage: its data.pkl then.
        storage = next((i for i, (n, _) in enumerate(records) if "/data/" in n and "serialization" not in n), index)
        entries[storage].data = payload
    elif edit in ("case: hostile DATA.PKL first", "case: hostile DATA.PKL last"):
        other = zipfmt.Entry(f"{prefix}/DATA.PKL".encode(), payload)
        entries.insert(index if edit.endswith("first") else len(entries), other)
    elif edit in ("duplicate: hostile first", "duplicate: hostile last"):
        other = zipfmt.Entry(data_pkl.encode(), payload)
        entries.insert(index if edit.endswith("first") else len(entries), other)
    elif edit == "NUL in a name":
        entries.insert(index, zipfmt.Entry(data_pkl.encode() + b"\x00.txt", payload))
    elif edit == "hostile pickle before the archive":
        kw["prefix"] = payload
    elif edit == "junk before the archive":
        entries[index].data = payload
        kw["prefix"] = b"\x00" * 16
    elif edit == "local data disagrees":
        entries[index].local_data = payload + b"\x00" * max(0, len(entries[index].data) - len(payload))
    elif edit == "local name disagrees":
        entries[index].local_name = f"{prefix}/other.pkl".encode()
        entries[index].data = payload
    elif edit == "data descriptor":
        entries[index].data, entries[index].descriptor = payload, True
    elif edit == "zip64":
        entries[index].data, entries[index].zip64 = payload, True
    elif edit == "extra end record":
        entries[index].data = payload
        kw["extra_end"] = True
    elif edit == "trailing bytes":
        entries[index].data = payload
        kw["trailing"] = b"\x00" * 100
    else:
        raise ValueError(edit)
    return zipfmt.build(entries, **kw), f"{edit} ({'deflated' if deflated else 'stored'})"


ZIP_EDITS = ("replace data.pkl", "extra member", "replace a storage", "case: hostile DATA.PKL first",
             "case: hostile DATA.PKL last", "duplicate: hostile first", "duplicate: hostile last", "NUL in a name",
             "hostile pickle before the archive", "junk before the archive", "local data disagrees",
             "local name disagrees", "data descriptor", "zip64", "extra end record", "trailing bytes")


def legacy_stream(hostile_at: int | None, payload: bytes, main: bytes | None = None) -> bytes:
    """The pre-1.6 format: magic number, protocol version, sys_info, the object, the
    storage keys, each a pickle (no storages follow: the object holds no tensor)."""
    pickles = [
        P.program(b"\x8a\x0a" + LEGACY_MAGIC.to_bytes(10, "little"), 2),
        P.program(P.integer(1001), 2),
        P.program(P.EMPTY_DICT + P.string("little_endian", "BINUNICODE") + P.NEWTRUE + P.SETITEM, 2),
        main or payloads.benign_pickle(2),
        P.program(P.EMPTY_LIST, 2),
    ]
    if hostile_at is not None:
        pickles[hostile_at] = payload
    return b"".join(pickles)


def legacy_tar(payload: bytes, member_name: bytes = b"storages") -> bytes:
    """A torch<0.4 tar checkpoint; torch reads its ``storages`` member first."""
    return tarfmt.archive([(b"sys_info", payloads.benign_pickle(2)), (b"pickle", payloads.benign_pickle(2)),
                           (b"tensors", P.program(P.integer(0), 2)), (member_name, payload)], fmt="ustar")


def tar_polyglot(payload: bytes) -> bytes:
    """Read as a tar: a first member, then ``storages`` holding the payload. Read as a
    pickle stream from byte 0: a benign legacy checkpoint, whose third pickle's
    BINBYTES swallows the rest of the first tar header."""
    start = (P.program(b"\x8a\x0a" + LEGACY_MAGIC.to_bytes(10, "little"), 2) + P.program(P.integer(1001), 2)
             + b"\x80\x03B")
    swallow_to = tarfmt.BLOCK + 3  # the BINBYTES ends 3 bytes into the member's data
    length = swallow_to - (len(start) + 4)
    name = start + struct.pack("<I", length)
    assert len(name) <= 100
    rest = P.STOP + payloads.benign_pickle(2) + P.program(P.EMPTY_LIST, 2)
    first_data = b"pad" + rest
    block = tarfmt.header(name, len(first_data), fmt="gnu") + tarfmt.pad(first_data)
    return block + tarfmt.member(b"storages", payload) + tarfmt.end()


def _case(variant: str, data: bytes, hostile: bool | None, kind: str, name: str = "model.pt") -> Case:
    return Case(NAME, variant, kind, hostile, name=name, data=data)


def seeds() -> list[Case]:
    hostile = payloads.hostile_pickle()
    out = [_case(f"zip: {edit}", rebuild(SMALL[0], None, edit, hostile)[0], True, "torch")
           for edit in ("replace data.pkl", "extra member", "NUL in a name", "hostile pickle before the archive",
                        "duplicate: hostile last")]
    out += [_case(f"zip: benign {f}", rebuild(f, None, "benign", b"")[0], False, "torch") for f in SMALL[:3]]
    out += [_case(f"legacy: payload in pickle #{i + 1}", legacy_stream(i, hostile), True, "legacy")
            for i in (0, 3)]
    out.append(_case("legacy: benign", legacy_stream(None, hostile), False, "legacy"))
    out.append(_case("legacy tar: hostile storages", legacy_tar(hostile), True, "legacy", "model.tar"))
    out.append(_case("tar polyglot", tar_polyglot(hostile), True, "legacy"))
    return out


def generate(rng: random.Random) -> Case:
    payload, _ = payloads.random_hostile(rng)
    name = rng.choice(NAMES)
    shape = rng.randrange(10)
    if shape < 6:
        edit = rng.choice(ZIP_EDITS)
        data, label = rebuild(rng.choice(SMALL), rng, edit, payload)
        # Bytes that disagree with the directory's CRC (or, deflated, are no DEFLATE
        # stream) make zipfile and torch refuse the member before unpickling it.
        return _case(f"zip: {edit}", data, None if edit == "local data disagrees" else True, "torch", name)
    if shape == 6:
        data, label = rebuild(rng.choice(SMALL), rng, "benign", b"")
        return _case("zip: benign", data, False, "torch", name)
    if shape == 7:
        at = rng.choice([None, 0, 1, 2, 3, 4])
        return _case(f"legacy: payload in pickle #{at + 1}" if at is not None else "legacy: benign",
                     legacy_stream(at, payload), at is not None, "legacy", name)
    if shape == 8:
        return _case("legacy tar: hostile storages", legacy_tar(payload), True, "legacy", name)
    return _case("tar polyglot", tar_polyglot(payload), True, "legacy", name)
