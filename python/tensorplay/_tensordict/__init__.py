"""TensorDict memmap folders and ``.tdz`` archives, loaded without tensordict and
without running code from them.

The layout (tensordict 0.15, ``_format_version`` 1): every level of the tree has a
``meta.json`` (its ``_type``, batch ``shape``, ``device`` and one entry per key);
a tensor is a ``<key>.memmap`` file of raw C-order little-endian bytes next to it
(plus ``<key>.shape.memmap`` for a jagged nested tensor); a nested tensordict, a
tensorclass (data under ``_tensordict/``), a lazy stack (members ``0/``, ``1/``…)
and non-tensor data (in its ``meta.json``, a ``json_types.json`` or a pickle
sidecar) are sub-folders. An archive is a zip of the same tree.

How this reader differs from tensordict's own ``load_memmap``, for safety:

- pickle sidecars are refused unless ``allow_pickle=True``, and then decoded by
  tensorplay's restricted VM with the safe-globals allowlist, never by pickle;
- no symbolic link inside the folder is ever followed, and only regular files
  are opened;
- a leaf file shorter than ``meta.json`` declares is an error, and one longer is
  read as its declared prefix, as tensordict does (tensordict's own compatibility
  fixtures have leaves a byte or two longer); a file is never grown, truncated or
  written, and an archive's entry must have the declared size exactly;
- a key becomes a file name only through its percent-encoding (or, for a key
  that is already a safe name, itself): no key can name a path outside the folder.
"""
from __future__ import annotations

from .layout import FORMAT_VERSION, MAX_DEPTH, NotAnArchiveError, PickleRefusedError
from .load import load_memmap

__all__ = ["FORMAT_VERSION", "MAX_DEPTH", "NotAnArchiveError", "PickleRefusedError", "load_memmap"]
