"""zip archives, record by record: names with NUL bytes (CPython's zipfile cuts a
name at the first NUL), the UTF-8 flag or cp437, data descriptors, ZIP64, duplicate
names, local headers that disagree with the directory, members the directory does
not list, bytes before the archive and after it, a second end record; and a
one-member zip of any name, as pandas reads a ``.zip``."""
from __future__ import annotations

import random

from . import payloads, zipfmt
from .cases import Case
from .zipfmt import Entry

NAME = "zip"
TRICKS = ("plain", "deflated", "NUL in the name", "utf-8 flag", "cp437 name", "data descriptor", "zip64",
          "duplicate name, hostile last", "duplicate name, hostile first", "local name disagrees",
          "local data disagrees", "not in the directory", "bytes before", "bytes after", "second end record",
          "single member for pandas", "encrypted flag", "wrong crc", "no PROTO, member not named .pkl")
NAMES = ("model.zip", "x.zip", "model.pt", "archive.npz", "weights.bin", "model.pkl", "notes.txt")


def build(trick: str, payload: bytes) -> bytes:
    good = Entry(b"config.pkl", payloads.benign_pickle(2))
    kw: dict = {}
    if trick == "plain":
        entries = [good, Entry(b"model.pkl", payload)]
    elif trick == "deflated":
        entries = [Entry(b"model.pkl", payload, method=8)]
    elif trick == "NUL in the name":
        entries = [good, Entry(b"model.pkl\x00.txt", payload)]
    elif trick == "utf-8 flag":
        entries = [Entry("modèle.pkl".encode(), payload, flags=zipfmt.UTF8)]
    elif trick == "cp437 name":
        entries = [Entry("modèle.pkl".encode("cp437"), payload)]
    elif trick == "data descriptor":
        entries = [Entry(b"model.pkl", payload, method=8, descriptor=True)]
    elif trick == "zip64":
        entries = [Entry(b"model.pkl", payload, zip64=True)]
    elif trick == "duplicate name, hostile last":
        entries = [good, Entry(b"config.pkl", payload)]
    elif trick == "duplicate name, hostile first":
        entries = [Entry(b"config.pkl", payload), good]
    elif trick == "local name disagrees":
        entries = [Entry(b"config.txt", payload, local_name=b"config.pkl")]
    elif trick == "local data disagrees":
        # The directory's CRC and sizes are those of a benign pickle; the bytes are the payload.
        padded = payload + b"." * max(0, len(good.data) - len(payload))
        entries = [Entry(b"config.pkl", good.data, local_data=padded[:max(len(good.data), len(payload))])]
    elif trick == "not in the directory":
        entries = [Entry(b"hidden.pkl", payload, in_directory=False), good]
    elif trick == "bytes before":
        entries, kw["prefix"] = [Entry(b"model.pkl", payload)], b"#!/bin/sh\nexit 0\n"
    elif trick == "bytes after":
        entries, kw["trailing"] = [Entry(b"model.pkl", payload)], b"\x00" * 64
    elif trick == "second end record":
        entries, kw["extra_end"] = [Entry(b"model.pkl", payload)], True
    elif trick == "single member for pandas":
        entries = [Entry(b"anything.bin", payload)]
    elif trick == "encrypted flag":
        entries = [Entry(b"model.pkl", payload, flags=1)]
    elif trick == "wrong crc":
        entries = [Entry(b"model.pkl", payload, crc=0)]
    elif trick == "no PROTO, member not named .pkl":
        # A protocol 0 or 1 pickle starts with any opcode; pandas names its one member
        # after the archive, without a suffix.
        bare = payload if not payload.startswith(b"\x80") else payloads.hostile_pickle(protocol=None)
        entries = [good, Entry(b"weights", bare, method=8)]
    else:
        raise ValueError(trick)
    return zipfmt.build(entries, **kw)


def benign(rng: random.Random | None = None) -> bytes:
    n = rng.randrange(1, 3) if rng else 1
    return zipfmt.build([Entry(b"part%d.pkl" % i, payloads.benign_pickle(2 + i), method=8 if i % 2 else 0)
                         for i in range(n)])


# Tricks no reader runs: zipfile refuses encrypted members and members it does
# not list, and checks a small member's CRC before handing pickle its first bytes.
UNSURE = {"encrypted flag", "local name disagrees", "local data disagrees", "wrong crc", "not in the directory"}


def seeds() -> list[Case]:
    hostile = payloads.hostile_pickle()
    out = [Case(NAME, t, "zip", None if t in UNSURE else True, "model.zip", build(t, hostile)) for t in TRICKS]
    out.append(Case(NAME, "benign", "zip", False, "model.zip", benign()))
    return out


def generate(rng: random.Random) -> Case:
    name = rng.choice(NAMES)
    if rng.random() < 0.15:
        return Case(NAME, "benign", "zip", False, name, benign(rng))
    trick = rng.choice(TRICKS)
    payload, _ = payloads.random_hostile(rng)
    return Case(NAME, trick, "zip", None if trick in UNSURE else True, name, build(trick, payload))
