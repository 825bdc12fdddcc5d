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


# What a URL's scheme may hold (RFC 3986), before the "://" that ends it.
_SCHEME_CHARACTERS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789+.-")


def is_url(name: object) -> bool:
    """Whether ``name`` is a URL (``https://``, ``hf://``, ``s3://``, any
    ``SCHEME://``): a file far away, read by ranges (see _remote), never opened
    as a path. The scheme is two characters at least, starting with a letter,
    so ``C://x`` stays a drive's path; a relative name, ``C:\\x`` or a name
    with a colon and no ``://`` after a scheme is never taken for one, nor is a
    chained fsspec URL (``simplecache::s3://``: a cache is a download)."""
    if not isinstance(name, str):
        return False
    scheme, sep, _ = name.partition("://")
    return bool(sep) and len(scheme) >= 2 and scheme[0].isascii() and scheme[0].isalpha() \
        and _SCHEME_CHARACTERS.issuperset(scheme)
