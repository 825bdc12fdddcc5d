"""Seeded byte mutation of cases, and planting payloads into existing files."""
from __future__ import annotations

import random
import struct

from . import payloads
from .cases import Case

INTERESTING = [0, 1, 2, 0x7F, 0x80, 0xFF, 0x100, 0x7FFF, 0x8000, 0xFFFF, 0x10000, 0x7FFFFFFF, 0x80000000,
               0xFFFFFFFF, 0x100000000, (1 << 63) - 1, (1 << 64) - 1]


def mutate_bytes(data: bytes, rng: random.Random, others: list[bytes] = (), rounds: int | None = None) -> bytes:
    buf = bytearray(data)
    for _ in range(rounds or rng.choice((1, 1, 2, 3, 5))):
        op = rng.randrange(8)
        n = len(buf)
        if n == 0:
            buf += bytes([rng.randrange(256)])
            continue
        at = rng.randrange(n)
        if op == 0:  # bit flip
            buf[at] ^= 1 << rng.randrange(8)
        elif op == 1:  # an interesting integer, little or big endian, 1-8 bytes
            width = rng.choice((1, 2, 4, 8))
            value = rng.choice(INTERESTING) & ((1 << (8 * width)) - 1)
            buf[at:at + width] = value.to_bytes(width, rng.choice(("little", "big")))
        elif op == 2:  # insert random bytes
            buf[at:at] = bytes(rng.randrange(256) for _ in range(rng.randrange(1, 9)))
        elif op == 3:  # delete a range
            del buf[at:at + rng.randrange(1, max(2, n // 8))]
        elif op == 4:  # duplicate a range
            end = min(n, at + rng.randrange(1, 64))
            buf[at:at] = buf[at:end]
        elif op == 5 and others:  # splice from another input
            other = rng.choice(others)
            if other:
                s = rng.randrange(len(other))
                buf[at:at] = other[s:s + rng.randrange(1, 256)]
        elif op == 6:  # truncate
            del buf[rng.randrange(1, n + 1):]
        else:  # a random byte
            buf[at] = rng.randrange(256)
    return bytes(buf)


def mutate(case: Case, rng: random.Random, others: list[bytes] = ()) -> Case:
    """A mutated copy (one file of a folder); whether it carries a payload is unknown then."""
    if not case.folder:
        return case.with_data(mutate_bytes(case.data or b"", rng, others), variant=case.variant + "+mut")
    files = dict(case.files)
    rel = rng.choice(sorted(files))
    files[rel] = mutate_bytes(files[rel], rng, others)
    return case.with_files(files, variant=case.variant + "+mut")


def plant(data: bytes, rng: random.Random) -> tuple[bytes, str]:
    """A firing pickle put into existing bytes: appended, prepended, or over or
    into the bytes at an offset (one a 4-byte little-endian field may name)."""
    hostile, _ = payloads.random_hostile(rng)
    where = rng.randrange(4)
    if where == 0 or not data:
        return data + hostile, "appended"
    if where == 1:
        return hostile + data, "prepended"
    at = rng.randrange(len(data))
    if where == 2 and len(data) >= 8:
        # An offset some field of the file holds: a pointer into it, when one is there.
        fields = [struct.unpack_from("<I", data, i)[0] for i in range(0, len(data) - 4, 4)]
        inside = [v for v in fields if 0 < v < len(data)]
        if inside:
            at = rng.choice(inside)
        return data[:at] + hostile + data[at + len(hostile):], "over the bytes at an offset"
    return data[:at] + hostile + data[at:], "inserted"
