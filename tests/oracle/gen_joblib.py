"""joblib files: ``joblib.dump`` of a benign dict of arrays, raw and in each of
joblib's compressions (zlib, gzip, bz2, xz, lzma), and the same file with the
pickle of its object array (which joblib reads with plain ``pickle.load`` after
the wrapper) replaced by the payload; a payload pickle in each compression."""
from __future__ import annotations

import bz2
import functools
import gzip
import io
import lzma
import pickle
import random
import zlib

from . import payloads
from .cases import Case

NAME = "joblib"
COMPRESSIONS = {"": lambda d: d, "zlib": zlib.compress, "gzip": lambda d: gzip.compress(d, mtime=0),
                "bz2": bz2.compress, "xz": lzma.compress, "lzma": lambda d: lzma.compress(d, format=lzma.FORMAT_ALONE)}
NAMES = ("model.joblib", "model.pkl", "clf.joblib.gz", "x.z", "model.bin")


@functools.cache
def _benign_dump() -> tuple[bytes, bytes]:
    """A joblib file of a dict with a float array and an object array, and the
    bytes of the object array's own pickle inside it. Benign values, pickled by joblib."""
    import joblib
    import numpy

    objects = numpy.array([None, 1], dtype=object)
    out = io.BytesIO()
    joblib.dump({"weights": numpy.arange(4.0), "labels": objects}, out)
    data = out.getvalue()
    for protocol in range(pickle.HIGHEST_PROTOCOL, 1, -1):
        inner = pickle.dumps(objects, protocol=protocol)
        if inner in data:
            return data, inner
    raise RuntimeError("the object array's pickle is not in joblib's output")


def object_array_payload(payload: bytes) -> bytes:
    data, inner = _benign_dump()
    return data.replace(inner, payload, 1)


def seeds() -> list[Case]:
    hostile = payloads.hostile_pickle(protocol=4)
    out = [Case(NAME, f"object array payload {c or 'raw'}", "joblib", True, "model.joblib",
                COMPRESSIONS[c](object_array_payload(hostile))) for c in COMPRESSIONS]
    out += [Case(NAME, f"benign {c or 'raw'}", "joblib", False, "model.joblib", COMPRESSIONS[c](_benign_dump()[0]))
            for c in ("", "zlib", "xz")]
    return out


def generate(rng: random.Random) -> Case:
    compression = rng.choice(sorted(COMPRESSIONS))
    name = rng.choice(NAMES)
    label = compression or "raw"
    if rng.random() < 0.2:
        return Case(NAME, f"benign {label}", "joblib", False, name, COMPRESSIONS[compression](_benign_dump()[0]))
    payload, label = payloads.random_hostile(rng)
    while label.startswith("__builtin__"):
        # joblib reads an object array's pickle on with its own unpickler, whose
        # protocol is the outer pickle's (4): Python 2 names are not mapped there.
        payload, label = payloads.random_hostile(rng)
    if rng.random() < 0.6:
        return Case(NAME, f"object array payload {label}", "joblib", True, name,
                    COMPRESSIONS[compression](object_array_payload(payload)))
    return Case(NAME, f"payload pickle {label}", "joblib", True, name, COMPRESSIONS[compression](payload))
