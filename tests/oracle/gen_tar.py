"""tar archives, header by header: ustar, GNU and V7 (no magic) headers; PAX
records that override ``size`` and ``path``; GNU long names; base-256 and oddly
spelt octal sizes; every type byte (tarfile reads unknown types as regular files,
and does not skip the data of links and folders, so bytes a scanner takes for
data can be a header to tarfile); signed, unsigned and wrong checksums; gzip,
bzip2 and xz around the tar."""
from __future__ import annotations

import bz2
import gzip
import lzma
import random

from . import payloads, tarfmt
from .cases import Case

NAME = "tar"
TYPES = (b"0", b"\x00", b"7", b"Z", b"X", b"S", b"V", b"M", b"1", b"2", b"3", b"4", b"5", b"6")
TRICKS = ("plain", "v7 header", "gnu header", "pax path override", "pax size override", "gnu long name",
          "base-256 size", "size spelt with spaces", "size with no terminator", "signed checksum",
          "unknown type byte", "data hidden behind a folder header", "data hidden behind a link header",
          "after a bad checksum", "after a global pax header", "second member of two")
NAMES = ("model.tar", "checkpoint.tar", "weights.bin", "x.tar", "model.pt", "data.txt")


def build(trick: str, payload: bytes, rng: random.Random | None = None) -> bytes:
    benign = (b"config.pkl", payloads.benign_pickle(2))
    if trick == "plain":
        body = tarfmt.member(*benign) + tarfmt.member(b"storages", payload)
    elif trick == "v7 header":
        body = tarfmt.member(b"model.pkl", payload, fmt="v7")
    elif trick == "gnu header":
        body = tarfmt.member(b"model.pkl", payload, fmt="gnu")
    elif trick == "pax path override":
        body = tarfmt.pax({"path": b"storages"}) + tarfmt.member(b"README.txt", payload)
    elif trick == "pax size override":
        # The header says 0 bytes; PAX says the payload's length. A reader of the header
        # alone takes the payload for the next header (and finds none).
        body = tarfmt.pax({"size": str(len(payload)).encode()}) + tarfmt.header(b"model.pkl", 0) + tarfmt.pad(payload)
    elif trick == "gnu long name":
        body = tarfmt.gnu_long(b"L", b"a/" * 80 + b"storages") + tarfmt.member(b"short", payload, fmt="gnu")
    elif trick == "base-256 size":
        body = tarfmt.member(b"model.pkl", payload, fmt="gnu", size_spelling="base256")
    elif trick == "size spelt with spaces":
        body = tarfmt.member(b"model.pkl", payload, size_spelling="spaces")
    elif trick == "size with no terminator":
        body = tarfmt.member(b"model.pkl", payload, size_spelling="full")
    elif trick == "signed checksum":
        body = tarfmt.member("modèle.pkl".encode() + b"\xff" * 20, payload, checksum="signed")
    elif trick == "unknown type byte":
        typeflag = rng.choice(TYPES) if rng else b"Z"
        body = tarfmt.member(b"model.pkl", payload, typeflag=typeflag)
    elif trick in ("data hidden behind a folder header", "data hidden behind a link header"):
        # A folder or link whose header claims a size: tarfile reads the next header
        # right after it; a reader that skips "its data" skips the hidden member.
        hidden = tarfmt.member(b"hidden.pkl", payload)
        kind = b"5" if "folder" in trick else b"2"
        body = tarfmt.header(b"dir/", len(hidden), typeflag=kind, linkname=b"x" if kind == b"2" else b"") + hidden
    elif trick == "after a bad checksum":
        body = tarfmt.member(*benign) + tarfmt.member(b"model.pkl", payload, checksum="wrong")
    elif trick == "after a global pax header":
        body = tarfmt.pax({"comment": b"x"}, global_=True) + tarfmt.member(b"model.pkl", payload)
    elif trick == "second member of two":
        body = tarfmt.member(*benign) + tarfmt.member(b"b.pkl", payload)
    else:
        raise ValueError(trick)
    return body + tarfmt.end()


def benign(rng: random.Random | None = None) -> bytes:
    n = rng.randrange(1, 4) if rng else 2
    return tarfmt.archive([(b"part%d.pkl" % i, payloads.benign_pickle(2 + i % 3)) for i in range(n)],
                          fmt=rng.choice(("ustar", "gnu", "v7")) if rng else "ustar")


def _compress(data: bytes, how: str) -> bytes:
    return {"": lambda d: d, "gz": lambda d: gzip.compress(d, mtime=0), "bz2": bz2.compress,
            "xz": lzma.compress}[how](data)


def seeds() -> list[Case]:
    hostile = payloads.hostile_pickle()
    # After a bad checksum tarfile stops: nothing runs (hostile unknown).
    out = [Case(NAME, t, "tar", None if t == "after a bad checksum" else True, "model.tar", build(t, hostile))
           for t in TRICKS]
    out.append(Case(NAME, "benign", "tar", False, "model.tar", benign()))
    out.append(Case(NAME, "plain, gzip", "tar", True, "model.tar.gz", _compress(build("plain", hostile), "gz")))
    return out


def generate(rng: random.Random) -> Case:
    how = rng.choice(("", "", "", "gz", "bz2", "xz"))
    name = rng.choice(NAMES)
    if rng.random() < 0.15:
        return Case(NAME, f"benign {how}".strip(), "tar", False, name, _compress(benign(rng), how))
    trick = rng.choice(TRICKS)
    payload, _ = payloads.random_hostile(rng)
    hostile = None if trick in ("after a bad checksum", "unknown type byte") else True
    return Case(NAME, f"{trick} {how}".strip(), "tar", hostile, name, _compress(build(trick, payload, rng), how))
