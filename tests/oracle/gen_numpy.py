"""``.npy`` and ``.npz`` files whose arrays numpy unpickles: the object dtype spelt
every way numpy's header parser (``ast.literal_eval`` of a dict) accepts it —
``'O'``, ``'|O'``, ``'object'``, escapes, implicit string concatenation, a
repeated ``descr`` key (the last wins), structured, nested and subarray fields —
in format versions 1.0, 2.0 and 3.0; benign arrays beside them, one a
structured array with a field named ``O``."""
from __future__ import annotations

import random
import struct

from . import payloads, zipfmt
from .cases import Case

NAME = "numpy"
MAGIC = b"\x93NUMPY"
OBJECT_DESCRS = (
    "'O'", "'|O'", "'object'", "'O8'", "'<O'", "'\\x4f'", "'\\u004f'", "'|' 'O'", "'' 'O'", "\"O\"", "u'O'",
    "[('a', 'O')]", "[('a', '<f4'), ('b', '|O')]", "[('a', [('b', 'O')])]", "[('a', 'O', (2,))]",
    "[('O', 'O')]", "[(('title', 'a'), 'O')]",
)
BENIGN_DESCRS = ("'<f4'", "'|u1'", "[('O', '<f4')]", "[('a', '<i8'), ('O', '|u1')]", "'<U1'", "'|S1'")
NAMES = ("array.npy", "weights.npy", "x.npz", "model.pkl", "data.bin")


def header(descr: str, shape: str = "(1,)", version: tuple[int, int] = (1, 0), extra: str = "") -> bytes:
    text = f"{{'descr': {descr}, 'fortran_order': False, 'shape': {shape}, {extra}}}"
    encoded = text.encode("utf-8" if version[0] >= 3 else "latin1")
    size_len = 2 if version[0] == 1 else 4
    pad = -(len(MAGIC) + 2 + size_len + len(encoded) + 1) % 64
    encoded += b" " * pad + b"\n"
    size = struct.pack("<H" if size_len == 2 else "<I", len(encoded))
    return MAGIC + bytes(version) + size + encoded


def npy(descr: str, body: bytes, version: tuple[int, int] = (1, 0), shape: str = "(1,)", extra: str = "") -> bytes:
    return header(descr, shape, version, extra) + body


def benign_npy(descr: str, version: tuple[int, int] = (1, 0)) -> bytes:
    import numpy

    dtype = numpy.dtype(eval(descr))  # noqa: S307 - our own literal, from BENIGN_DESCRS
    return npy(descr, b"\x00" * dtype.itemsize * 2, version, "(2,)")


def npz(members: list[tuple[str, bytes]], deflated: bool = False) -> bytes:
    return zipfmt.build([zipfmt.Entry(n.encode(), d, method=8 if deflated else 0) for n, d in members])


VERSIONS = ((1, 0), (2, 0), (3, 0))


def seeds() -> list[Case]:
    hostile = payloads.hostile_pickle(protocol=3)
    out = [Case(NAME, f"npy descr {d}", "npy", True, "array.npy", npy(d, hostile, VERSIONS[i % 3]))
           for i, d in enumerate(OBJECT_DESCRS)]
    out.append(Case(NAME, "npy repeated descr key", "npy", True, "array.npy",
                    npy("'<f4'", hostile, extra="'descr': 'O'")))
    out += [Case(NAME, f"benign npy {d}", "npy", False, "array.npy", benign_npy(d)) for d in BENIGN_DESCRS]
    out.append(Case(NAME, "npz object member", "npz", True, "arrays.npz",
                    npz([("a.npy", benign_npy("'<f4'")), ("b.npy", npy("'O'", hostile))])))
    out.append(Case(NAME, "benign npz", "npz", False, "arrays.npz",
                    npz([("a.npy", benign_npy("'<f4'")), ("O.npy", benign_npy("[('O', '<f4')]"))], deflated=True)))
    return out


def generate(rng: random.Random) -> Case:
    version = rng.choice(VERSIONS)
    name = rng.choice(NAMES)
    if rng.random() < 0.2:
        data = benign_npy(rng.choice(BENIGN_DESCRS), version)
        if rng.random() < 0.3:
            return Case(NAME, "benign npz", "npz", False, name, npz([("x.npy", data)], rng.random() < 0.5))
        return Case(NAME, "benign npy", "npy", False, name, data)
    payload, _ = payloads.random_hostile(rng)
    shape = rng.randrange(3)
    if shape == 0:
        descr = rng.choice(OBJECT_DESCRS)
        return Case(NAME, f"npy descr {descr}", "npy", True, name, npy(descr, payload, version))
    if shape == 1:
        return Case(NAME, "npy repeated descr key", "npy", True, name,
                    npy("'<f4'", payload, version, extra=f"'descr': {rng.choice(OBJECT_DESCRS)}"))
    members = [("a.npy", benign_npy("'<f4'")), (rng.choice(["b.npy", "b", "O.npy", "../b.npy"]),
                                                 npy(rng.choice(OBJECT_DESCRS), payload, version))]
    rng.shuffle(members)
    return Case(NAME, "npz object member", "npz", True, name, npz(members, rng.random() < 0.5))
