"""Names that one file of a checkpoint gives for another (a shard index's shards,
a distributed checkpoint's item files): each must be a file beside it. And
names that are no path but a URL, of a file read where it lives."""

from __future__ import annotations

import os

from ._core import MalformedCheckpointError

# What a sharded checkpoint's index is named (``pytorch_model.bin.index.json``,
# ``model.safetensors.index.json``): how loaders, and so readers of its pointers, find it.
INDEX_SUFFIX = ".index.json"


def beside(folder: str, name: str) -> str | None:
    """``folder/name`` when ``name`` is a plain file name, ``None`` when it has a
    folder part or is absolute, empty, ``.`` or ``..``: a name that could reach
    outside ``folder`` (``../../etc/passwd``) is never opened."""
    if not name or name in (".", "..") or os.path.isabs(name) or "/" in name or os.sep in name or "\\" in name:
        return None
    return os.path.join(folder, name)


def held(path: str, pointer: str, name: str) -> str:
    """``path``, the file ``pointer`` (an index, a metadata file) names ``name``,
    when the folder holds it as a file: torch's readers fail on a missing one with
    FileNotFoundError, this names the pointer and the name instead."""
    if not os.path.isfile(path):
        raise MalformedCheckpointError(f"{pointer} names {name!r}, which its folder does not hold as a file")
    return path


# What a file far away is named by: read by ranges (see _remote), never opened as a path.
URL_SCHEMES = ("http://", "https://", "hf://")


def is_url(name: object) -> bool:
    return isinstance(name, str) and name[:8].lower().startswith(URL_SCHEMES)
