"""Sharded checkpoints as the Hugging Face ecosystem writes them: shards
(``pytorch_model-00001-of-00003.bin``, or ``model-...safetensors``) and an index,
``pytorch_model.bin.index.json``, whose ``weight_map`` names the shard of every key.

The index is only JSON, but it decides which files are read: a shard it names
must be a file of the index's own folder. Every shard loads through
``tensorplay.load``'s rules, in parallel (the core releases the GIL).
"""
from __future__ import annotations

import json
import os
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from . import _paths
from ._core import MalformedCheckpointError
from ._paths import INDEX_SUFFIX

# The index a folder is loaded through when it holds several, in this order.
PREFERRED = ("pytorch_model.bin.index.json", "model.safetensors.index.json")


def is_index(path: str) -> bool:
    return path.endswith(INDEX_SUFFIX) and os.path.isfile(path)


def find_index(folder: str) -> str | None:
    """The index of a folder of shards: one of ``PREFERRED``, else the only
    ``*.index.json`` there; None when there is none."""
    names = sorted(n for n in os.listdir(folder) if n.endswith(INDEX_SUFFIX))
    for name in PREFERRED:
        if name in names:
            return os.path.join(folder, name)
    if len(names) > 1:
        raise MalformedCheckpointError(f"{folder} holds several shard indexes ({', '.join(names)}); load one of them")
    return os.path.join(folder, names[0]) if names else None


class Index:
    """A parsed index: its folder, ``weight_map`` and ``metadata``."""

    def __init__(self, path: str):
        self.path = path
        self.folder = os.path.dirname(os.path.abspath(path))
        try:
            with open(path, "rb") as f:
                document = json.load(f)
        except (ValueError, UnicodeDecodeError) as e:
            raise MalformedCheckpointError(f"{path}: not a JSON shard index ({e})") from None
        weight_map = document.get("weight_map") if isinstance(document, dict) else None
        if not isinstance(weight_map, dict) or not all(
                isinstance(k, str) and isinstance(v, str) for k, v in weight_map.items()):
            raise MalformedCheckpointError(f"{path}: a shard index needs a \"weight_map\" of key to shard file name")
        self.weight_map: dict[str, str] = weight_map
        self.metadata: dict[str, Any] = document.get("metadata") or {}
        for shard in set(weight_map.values()):
            self.shard_path(shard)

    @property
    def shards(self) -> list[str]:
        """The shard file names, each once, in the order the index first names them."""
        return list(dict.fromkeys(self.weight_map.values()))

    def shard_path(self, shard: str) -> str:
        path = None if shard.endswith(INDEX_SUFFIX) else _paths.beside(self.folder, shard)
        if path is None:
            raise MalformedCheckpointError(f"{self.path}: the shard {shard!r} is not a file name in the index's folder")
        return _paths.held(path, self.path, shard)

    def problems(self) -> list[str]:
        """What a scan reports about the index itself: shards it names that are missing."""
        return [f"the index names the shard {shard}, which does not exist"
                for shard in self.shards if not os.path.isfile(self.shard_path(shard))]


def load(path: str, load_shard: Callable[[str], Any], threads: int | None = None) -> dict[str, Any]:
    """Every key of every shard, in one dict: the index's keys first, in its order.
    A key the index lists but its shard lacks, or a key two shards hold, is an
    error; a key a shard holds beyond the index is kept, as transformers keeps it."""
    index = Index(path)
    shards = index.shards
    workers = max(1, min(len(shards), threads or os.cpu_count() or 1))
    with ThreadPoolExecutor(max_workers=workers) as pool:
        loaded = list(pool.map(lambda shard: load_shard(index.shard_path(shard)), shards))
    found: dict[str, str] = {}
    values: dict[str, Any] = {}
    for shard, state in zip(shards, loaded):
        if not isinstance(state, dict):
            raise MalformedCheckpointError(f"{shard}: a shard must hold a state dict, not a {type(state).__name__}")
        for key, value in state.items():
            if key in found:
                raise MalformedCheckpointError(f"the key {key!r} is in two shards, {found[key]} and {shard}")
            found[key] = shard
            values[key] = value
    merged: dict[str, Any] = {}
    for key, shard in index.weight_map.items():
        if found.get(key) != shard:
            where = f"it is in {found[key]}" if key in found else "no shard holds it"
            raise MalformedCheckpointError(f"{index.path} lists {key!r} in {shard}, but {where}")
        merged[key] = values[key]
    for key, value in values.items():
        merged.setdefault(key, value)
    return merged
