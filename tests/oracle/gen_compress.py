"""Compressed pickles: gzip (several members, FEXTRA/FNAME/FCOMMENT/FHCRC, bytes
after the end), bzip2 with several streams, xz with several streams and stream
padding, LZMA-alone, zlib, zstd (several frames, skippable frames), and 7z with
each of py7zr's filters. Payloads split across members and frames too: a reader
of the first member alone sees a truncated or empty pickle."""
from __future__ import annotations

import bz2
import io
import lzma
import random
import struct
import zlib

from . import payloads
from .cases import Case

NAME = "compress"


def _deflate(data: bytes) -> bytes:
    c = zlib.compressobj(6, zlib.DEFLATED, -15)
    return c.compress(data) + c.flush()


def gzip_member(data: bytes, *, extra: bytes | None = None, name: bytes | None = None, comment: bytes | None = None,
                hcrc: bool = False) -> bytes:
    flags = (4 if extra is not None else 0) | (8 if name is not None else 0) | (16 if comment is not None else 0)
    flags |= 2 if hcrc else 0
    head = b"\x1f\x8b\x08" + bytes([flags]) + b"\x00\x00\x00\x00\x00\xff"
    if extra is not None:
        head += struct.pack("<H", len(extra)) + extra
    if name is not None:
        head += name + b"\x00"
    if comment is not None:
        head += comment + b"\x00"
    if hcrc:
        head += struct.pack("<H", zlib.crc32(head) & 0xFFFF)
    return head + _deflate(data) + struct.pack("<II", zlib.crc32(data), len(data) & 0xFFFFFFFF)


def zstd_frames(parts: list[bytes]) -> bytes:
    import zstandard

    return b"".join(zstandard.ZstdCompressor().compress(p) for p in parts)


def zstd_skippable(data: bytes) -> bytes:
    return struct.pack("<II", 0x184D2A53, len(data)) + data


def sevenzip(members: list[tuple[str, bytes]], filters: list[dict] | None) -> bytes:
    import py7zr

    out = io.BytesIO()
    with py7zr.SevenZipFile(out, "w", filters=filters) as archive:
        for name, data in members:
            archive.writestr(data, name)
    return out.getvalue()


def _filters(name: str) -> list[dict] | None:
    import py7zr

    table = {"lzma2": None, "lzma": [{"id": py7zr.FILTER_LZMA}], "bzip2": [{"id": py7zr.FILTER_BZIP2}],
             "deflate": [{"id": py7zr.FILTER_DEFLATE}], "copy": [{"id": py7zr.FILTER_COPY}],
             "zstd": [{"id": py7zr.FILTER_ZSTD}], "bcj+lzma2": [{"id": py7zr.FILTER_X86}, {"id": py7zr.FILTER_LZMA2}]}
    return table[name]


def split(payload: bytes, rng: random.Random | None) -> tuple[bytes, bytes]:
    at = rng.randrange(1, len(payload)) if rng else len(payload) // 2
    return payload[:at], payload[at:]


def build(trick: str, payload: bytes, rng: random.Random | None = None) -> tuple[bytes, str, bool | None]:
    """The bytes, the kind, and whether a reader is sure to run the payload."""
    benign = payloads.benign_pickle(2)
    a, b = split(payload, rng)
    if trick == "gzip":
        return gzip_member(payload), "gzip", True
    if trick == "gzip header fields":
        fields = gzip_member(payload, extra=b"AB\x02\x00hi", name=b"model.pkl", comment=b"weights", hcrc=True)
        return fields, "gzip", True
    if trick == "gzip split across members":
        return gzip_member(a) + gzip_member(b), "gzip", True
    if trick == "gzip empty member first":
        return gzip_member(b"") + gzip_member(payload), "gzip", True
    if trick == "gzip benign member then hostile":
        return gzip_member(benign) + gzip_member(payload), "gzip", None  # pickle.loads stops after the first
    if trick == "gzip trailing zeros":
        return gzip_member(payload) + b"\x00" * 16, "gzip", True
    if trick == "bzip2":
        return bz2.compress(payload), "bz2", True
    if trick == "bzip2 split across streams":
        return bz2.compress(a) + bz2.compress(b), "bz2", True
    if trick == "bzip2 empty stream first":
        return bz2.compress(b"") + bz2.compress(payload), "bz2", True
    if trick == "xz":
        return lzma.compress(payload), "xz", True
    if trick == "xz split across streams":
        return lzma.compress(a) + lzma.compress(b), "xz", True
    if trick == "xz stream padding, then the payload":
        # lzma.decompress stops quietly at data that starts no stream: the padding.
        return lzma.compress(b"") + b"\x00" * 4 + lzma.compress(payload), "xz", None
    if trick == "xz empty stream first":
        return lzma.compress(b"") + lzma.compress(payload), "xz", True
    if trick == "lzma-alone":
        return lzma.compress(payload, format=lzma.FORMAT_ALONE), "xz", True
    if trick == "zlib":
        return zlib.compress(payload), "zlib", True
    if trick == "zlib raw deflate level 0":
        return zlib.compress(payload, 0), "zlib", True
    if trick == "zstd":
        return zstd_frames([payload]), "zstd", True
    if trick == "zstd split across frames":
        return zstd_frames([a, b]), "zstd", True
    if trick == "zstd skippable frame first":
        return zstd_skippable(b"\x00" * 8) + zstd_frames([payload]), "zstd", True
    if trick == "zstd payload in a skippable frame":
        return zstd_frames([benign]) + zstd_skippable(payload), "zstd", None
    if trick.startswith("7z "):
        return sevenzip([("config.json", b"{}"), ("model.pkl", payload)], _filters(trick[3:])), "7z", True
    raise ValueError(trick)


TRICKS = ("gzip", "gzip header fields", "gzip split across members", "gzip empty member first",
          "gzip benign member then hostile", "gzip trailing zeros", "bzip2", "bzip2 split across streams",
          "bzip2 empty stream first", "xz", "xz split across streams", "xz stream padding, then the payload",
          "xz empty stream first", "lzma-alone",
          "zlib", "zlib raw deflate level 0", "zstd", "zstd split across frames", "zstd skippable frame first",
          "zstd payload in a skippable frame", "7z lzma2", "7z lzma", "7z bzip2", "7z deflate", "7z copy", "7z zstd",
          "7z bcj+lzma2")
SUFFIX = {"gzip": ".gz", "bz2": ".bz2", "xz": ".xz", "zlib": ".zlib", "zstd": ".zst", "7z": ".7z"}
NAMES = ("model.pkl", "model.pt", "pytorch_model.bin", "x", "data.txt")


def benign(kind: str) -> bytes:
    data = payloads.benign_pickle(2)
    return {"gzip": gzip_member, "bz2": bz2.compress, "xz": lzma.compress, "zlib": zlib.compress,
            "zstd": lambda d: zstd_frames([d]), "7z": lambda d: sevenzip([("model.pkl", d)], None)}[kind](data)


def seeds() -> list[Case]:
    hostile = payloads.hostile_pickle()
    out = []
    for trick in TRICKS:
        data, kind, sure = build(trick, hostile)
        out.append(Case(NAME, trick, kind, sure, "model.pkl" + SUFFIX[kind], data))
    for kind in SUFFIX:
        out.append(Case(NAME, f"benign {kind}", kind, False, "model.pkl" + SUFFIX[kind], benign(kind)))
    return out


def generate(rng: random.Random) -> Case:
    if rng.random() < 0.15:
        kind = rng.choice(sorted(SUFFIX))
        return Case(NAME, f"benign {kind}", kind, False, rng.choice(NAMES) + rng.choice(["", SUFFIX[kind]]),
                    benign(kind))
    trick = rng.choice(TRICKS)
    payload, _ = payloads.random_hostile(rng)
    data, kind, sure = build(trick, payload, rng)
    # Named to match (pandas infers from the suffix) or not (a scanner must not care).
    name = rng.choice(NAMES) + rng.choice(["", SUFFIX[kind], ".gz", ".zip"])
    return Case(NAME, trick, kind, sure, name, data)
