"""Raw pickles: every payload spelling in every protocol it fits, with and
without PROTO and FRAME; streams of several pickles with the payload in any of
them; benign pickles of every protocol. File names vary, since scanners and
pandas read names."""
from __future__ import annotations

import random

from . import payloads
from . import pickler as P
from .cases import Case

NAME = "pickle"
NAMES = ("model.pkl", "model.pt", "pytorch_model.bin", "model.ckpt", "weights.npy", "model.joblib", "data.txt",
         "README.md", "config.json", "image.png", "x.memmap", "model.safetensors", "archive.tar", "noext")


def _case(variant: str, data: bytes, hostile: bool | None, name: str = "model.pkl", kind: str = "pickle") -> Case:
    return Case(NAME, variant, kind, hostile, name=name, data=data)


def seeds() -> list[Case]:
    out = []
    for i, s in enumerate(payloads.SPELLINGS):
        fitting = [p for p in payloads.PROTOCOLS if s.fits(p)]
        protocol = fitting[i % len(fitting)]
        out.append(_case(f"single {s.name}", payloads.hostile_pickle(s, protocol, framed=i % 2 == 0),
                         True if s.fires else None))
    for p in (None, 2, 5):
        out.append(_case(f"benign p{p}", payloads.benign_pickle(p, framed=True), False))
    out.append(_case("stream: benign then hostile", payloads.benign_pickle(2) + payloads.hostile_pickle(), True,
                     kind="stream"))
    out.append(_case("stream: two benign", payloads.benign_pickle(2) + payloads.benign_pickle(4), False,
                     kind="stream"))
    return out


def frame_lie(hostile_body: bytes, delta: int) -> bytes:
    """A protocol-4 pickle whose FRAME declares ``delta`` bytes more (or fewer) than it
    holds: CPython reads frames from a file and from memory differently."""
    declared = max(0, len(hostile_body) + delta)
    return P.proto(4) + b"\x95" + declared.to_bytes(8, "little") + hostile_body


def generate(rng: random.Random) -> Case:
    shape = rng.randrange(7)
    if shape == 6:
        spelling = rng.choice([s for s in payloads.FIRING if s.fits(4)])
        body = payloads.fragment(spelling, 4) + P.STOP
        delta = rng.choice((-len(body), -9, -1, 1, 9, 1 << 20))
        return _case(f"frame length off by {'much' if abs(delta) > 9 else delta}", frame_lie(body, delta), None,
                     rng.choice(NAMES))
    name = rng.choice(NAMES)
    if shape == 0:
        protocol = rng.choice(payloads.PROTOCOLS)
        return _case(f"benign p{protocol}", payloads.benign_pickle(protocol, rng.random() < 0.5), False, name)
    hostile, label = payloads.random_hostile(rng)
    if shape in (1, 2):
        return _case("single", hostile, True, name)
    if shape == 3:
        # A stream: the payload is the k-th pickle; only readers of the whole stream reach it.
        before = [payloads.benign_pickle(rng.choice(payloads.PROTOCOLS)) for _ in range(rng.randrange(1, 4))]
        return _case(f"stream, payload #{len(before) + 1}", b"".join(before) + hostile, True, name, "stream")
    if shape == 4:
        # Bytes after STOP: unpicklers stop there, a stream reader goes on.
        junk = rng.choice([b"\x00" * 8, b"garbage", b"PK\x03\x04", b"\n", P.STOP])
        return _case("junk after STOP", hostile + junk, True, name)
    # The payload nested inside a benign container value.
    protocol = rng.choice([2, 3, 4, 5])
    spelling = rng.choice([s for s in payloads.FIRING if s.fits(protocol)])
    body = (P.EMPTY_DICT + P.string("weights", "BINUNICODE") + P.list_of([P.integer(1), P.integer(2)])
            + P.SETITEM + P.string("hook", "BINUNICODE") + payloads.fragment(spelling, protocol) + P.SETITEM)
    return _case("payload inside a dict", P.program(body, protocol), True, name)
