"""pandas pickles: ``DataFrame.to_pickle`` under each compression pandas infers
from a file name (none, gzip, bz2, xz, zip, tar, zstd), and a payload pickle in
the same containers, named to match (pandas runs it) or not (it fails)."""
from __future__ import annotations

import functools
import os
import random
import tempfile

from . import payloads
from .cases import Case

NAME = "pandas"
# The name pandas reads a compression from, and the case kind of that container.
SUFFIXES = {".pkl": "pickle", ".gz": "gzip", ".bz2": "bz2", ".xz": "xz", ".zip": "zip", ".tar": "tar",
            ".tar.gz": "tar", ".zst": "zstd"}


def _with_pandas(write, suffix: str) -> bytes:
    """What pandas writes for this suffix (its own compression writers)."""
    folder = tempfile.mkdtemp()
    path = os.path.join(folder, "frame" + suffix)
    try:
        write(path)
        with open(path, "rb") as f:
            return f.read()
    finally:
        for n in os.listdir(folder):
            os.unlink(os.path.join(folder, n))
        os.rmdir(folder)


@functools.cache
def frame(suffix: str) -> bytes:
    import pandas

    df = pandas.DataFrame({"a": [1.0, 2.0], "b": ["x", "y"]})
    return _with_pandas(df.to_pickle, suffix)


def wrapped(payload: bytes, suffix: str) -> bytes:
    """The payload in the container pandas infers from ``suffix``, written by pandas'
    own compression handles (they take bytes; no pickling happens here)."""
    from pandas.io.common import get_handle

    def write(path: str) -> None:
        with get_handle(path, "wb", compression="infer", is_text=False) as handles:
            handles.handle.write(payload)

    return _with_pandas(write, suffix)


def seeds() -> list[Case]:
    hostile = payloads.hostile_pickle(protocol=5)
    out = [Case(NAME, f"payload as {s}", SUFFIXES[s], True, "frame" + s, wrapped(hostile, s)) for s in SUFFIXES]
    out += [Case(NAME, f"benign DataFrame {s}", SUFFIXES[s], False, "frame" + s, frame(s)) for s in (".pkl", ".gz")]
    return out


def generate(rng: random.Random) -> Case:
    suffix = rng.choice(sorted(SUFFIXES))
    name = "frame" + rng.choice([suffix, suffix, ".pkl", ".bin", ".pt"])
    if rng.random() < 0.2:
        return Case(NAME, f"benign DataFrame {suffix}", SUFFIXES[suffix], False, name, frame(suffix))
    payload, _ = payloads.random_hostile(rng)
    return Case(NAME, f"payload as {suffix}", SUFFIXES[suffix], True, name, wrapped(payload, suffix))
