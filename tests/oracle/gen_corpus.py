"""The project's own files as seeds: ``tests/malicious/files/*`` and the
fixtures under ``tests/fixtures/`` (up to 256 KiB), each mutated, or with a
payload planted into it (replacing a zip member, appended, prepended, at an
offset one of its fields names, or inserted)."""
from __future__ import annotations

import functools
import os
import random
import zipfile

from . import mutate, payloads, zipfmt
from .cases import Case

NAME = "corpus"
TESTS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ROOTS = (os.path.join(TESTS, "malicious", "files"), os.path.join(TESTS, "fixtures"))
MAX_SIZE = 256 * 1024


def kind_of(data: bytes) -> str:
    """The case kind, sniffed as the readers would see it."""
    if data.startswith(b"PK\x03\x04"):
        return "torch" if b"data.pkl" in data else "zip"
    if data[257:262] == b"ustar":
        return "tar"
    for magic, kind in ((b"\x1f\x8b", "gzip"), (b"BZh", "bz2"), (b"\xfd7zXZ", "xz"), (b"]\x00\x00", "xz"),
                        (b"(\xb5/\xfd", "zstd"), (b"7z\xbc\xaf", "7z"), (b"\x93NUMPY", "npy"), (b"\x78", "zlib")):
        if data.startswith(magic):
            return kind
    return "pickle" if data[:1] in (b"\x80", b"(", b"c", b"}", b"]") else "unknown"


@functools.cache
def files() -> tuple[tuple[str, bytes], ...]:
    out = []
    for root in ROOTS:
        for dirpath, dirs, names in os.walk(root):
            dirs.sort()
            for n in sorted(names):
                full = os.path.join(dirpath, n)
                if n.endswith((".py", ".json", ".md")) or os.path.getsize(full) > MAX_SIZE:
                    continue
                with open(full, "rb") as f:
                    out.append((os.path.relpath(full, TESTS), f.read()))
    return tuple(out)


def replace_member(data: bytes, payload: bytes) -> bytes | None:
    """The archive rebuilt with its first ``.pkl`` member's bytes replaced."""
    import io

    try:
        with zipfile.ZipFile(io.BytesIO(data)) as z:
            records = [(i.filename, z.read(i)) for i in z.infolist()]
    except Exception:  # noqa: BLE001 - not a readable zip: no member to replace
        return None
    target = next((i for i, (n, _) in enumerate(records) if n.endswith(".pkl")), None)
    if target is None:
        return None
    records[target] = (records[target][0], payload)
    return zipfmt.build([zipfmt.Entry(n.encode(), d, align=64) for n, d in records])


def seeds() -> list[Case]:
    picked = [(rel, data) for rel, data in files() if rel.startswith("fixtures/torch/seed_")][:3]
    out = [Case(NAME, f"fixture {os.path.basename(rel)}", kind_of(data), False, os.path.basename(rel), data)
           for rel, data in picked]
    hostile = payloads.hostile_pickle()
    out += [Case(NAME, "payload prepended", "pickle", True, os.path.basename(rel), hostile + data)
            for rel, data in picked[:2]]
    replaced = replace_member(picked[0][1], hostile)
    out.append(Case(NAME, "zip member replaced", "torch", True, os.path.basename(picked[0][0]), replaced))
    return out


def generate(rng: random.Random) -> Case:
    rel, data = rng.choice(files())
    name = os.path.basename(rel)
    family = rel.split(os.sep)[1] if rel.startswith("fixtures") else "malicious"
    if rng.random() < 0.5:
        return Case(NAME, f"mutated {family}", kind_of(data), None, name,
                    mutate.mutate_bytes(data, rng, [d for _, d in files()[:50]]))
    payload, _ = payloads.random_hostile(rng)
    if data.startswith(b"PK") and rng.random() < 0.5:
        replaced = replace_member(data, payload)
        if replaced is not None:
            return Case(NAME, f"member replaced in {family}", kind_of(replaced), None, name, replaced)
    planted, how = mutate.plant(data, rng)
    return Case(NAME, f"payload {how} in {family}", kind_of(planted), None, name, planted)
