"""Hugging Face sharded folders: ``pytorch_model.bin.index.json`` whose
``weight_map`` names shards with any name: ``.bin``, ``.txt``, a file under
``.git/``, a TensorDict ``.memmap`` leaf, a file in a subfolder, one outside the
folder, a second index. Shards are real torch archives (rebuilt fixtures);
the hostile one's ``data.pkl`` is the payload."""
from __future__ import annotations

import json
import random

from . import gen_torch, payloads
from .cases import Case

NAME = "sharded"
SHARD_NAMES = ("pytorch_model-00002-of-00002.bin", "notes.txt", ".git/objects/12/3456", "leaves/x.memmap",
               "sub/pytorch_model-00002.bin", "../outside.bin", "README.md", "model.safetensors", "x.npy")
INDEX_NAMES = ("pytorch_model.bin.index.json", "model.safetensors.index.json", "other.index.json")


def shard(payload: bytes | None, fixture: str) -> bytes:
    edit = "benign" if payload is None else "replace data.pkl"
    return gen_torch.rebuild(fixture, None, edit, payload or b"")[0]


def folder(second: str, payload: bytes | None, index_name: str = INDEX_NAMES[0],
           fixture: str = gen_torch.SMALL[0]) -> dict[str, bytes]:
    first = "pytorch_model-00001-of-00002.bin"
    weight_map = {"a.weight": first, "b.weight": second}
    files = {
        index_name: json.dumps({"metadata": {"total_size": 64}, "weight_map": weight_map}).encode(),
        first: shard(None, fixture),
        second: shard(payload, fixture),
        "config.json": b'{"model_type": "toy"}',
    }
    if second.endswith(".memmap"):
        files[second.rsplit("/", 1)[0] + "/meta.json"] = (b'{"x": {"device": "cpu", "shape": [1], "dtype": '
                                                         b'"torch.uint8", "is_nested": false}, "shape": [], '
                                                         b'"device": "cpu", "_format_version": 1}')
    return files


def seeds() -> list[Case]:
    hostile = payloads.hostile_pickle()
    out = [Case(NAME, f"shard named {s}", "sharded", True, "model", files=folder(s, hostile)) for s in SHARD_NAMES]
    out.append(Case(NAME, "benign", "sharded", False, "model", files=folder(SHARD_NAMES[0], None)))
    return out


def generate(rng: random.Random) -> Case:
    index_name = rng.choice(INDEX_NAMES)
    fixture = rng.choice(gen_torch.SMALL)
    second = rng.choice(SHARD_NAMES)
    if rng.random() < 0.15:
        return Case(NAME, "benign", "sharded", False, "model", files=folder(second, None, index_name, fixture))
    payload, _ = payloads.random_hostile(rng)
    return Case(NAME, f"shard named {second}", "sharded", True, "model",
                files=folder(second, payload, index_name, fixture))
