"""TensorDict folders written by tensordict's own ``memmap_`` (a tensor leaf, a
non-tensor value pickled to ``other.pickle``, a non-tensor stack pickled to
``pickle.pkl``, a nested level), then edited: a sidecar replaced by the payload,
a deeper level's sidecar, a payload in a ``.memmap`` leaf (no tensordict reader
unpickles it), a stack's ``meta.json`` naming another sidecar."""
from __future__ import annotations

import functools
import os
import random
import shutil
import tempfile
import warnings

from . import payloads
from .cases import Case

NAME = "tensordict"
EDITS = ("other.pickle", "pickle.pkl", "nested other.pickle", "payload in a .memmap leaf",
         "stack meta names another sidecar")


@functools.cache
def base() -> tuple[tuple[str, bytes], ...]:
    import torch
    from tensordict import NonTensorData, NonTensorStack, TensorDict

    folder = tempfile.mkdtemp()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            td = TensorDict({"x": torch.arange(3.0), "tag": NonTensorData({"a", "b"}),
                             "mixed": NonTensorStack(NonTensorData({1}), NonTensorData({2})),
                             "inner": TensorDict({"y": torch.ones(2), "note": NonTensorData(frozenset({3}))}, [])}, [])
            td.memmap_(folder)
        out = []
        for root, _, names in os.walk(folder):
            for n in names:
                full = os.path.join(root, n)
                with open(full, "rb") as f:
                    out.append((os.path.relpath(full, folder), f.read()))
        return tuple(sorted(out))
    finally:
        shutil.rmtree(folder)


def build(edit: str, payload: bytes) -> tuple[dict[str, bytes], bool | None]:
    files = dict(base())
    if edit == "other.pickle":
        files["tag/other.pickle"] = payload
    elif edit == "pickle.pkl":
        files["mixed/pickle.pkl"] = payload
    elif edit == "nested other.pickle":
        files["inner/note/other.pickle"] = payload
    elif edit == "payload in a .memmap leaf":
        # tensordict maps it as float32 bytes; only a reader that unpickles any file runs it.
        files["x.memmap"] = payload
        return files, None
    elif edit == "stack meta names another sidecar":
        files["mixed/meta.json"] = files["mixed/meta.json"].replace(b'"pickle.pkl"', b'"other.pkl"')
        files["mixed/other.pkl"] = payload
        return files, None
    else:
        raise ValueError(edit)
    return files, True


def seeds() -> list[Case]:
    hostile = payloads.hostile_pickle()
    out = []
    for edit in EDITS:
        files, sure = build(edit, hostile)
        out.append(Case(NAME, edit, "tensordict", sure, "td", files=files))
    out.append(Case(NAME, "benign", "tensordict", False, "td", files=dict(base())))
    return out


def generate(rng: random.Random) -> Case:
    if rng.random() < 0.15:
        return Case(NAME, "benign", "tensordict", False, "td", files=dict(base()))
    edit = rng.choice(EDITS)
    files, sure = build(edit, payloads.random_hostile(rng)[0])
    return Case(NAME, edit, "tensordict", sure, "td", files=files)
