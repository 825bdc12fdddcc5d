"""``tensorplay.load_memmap``: the reader for tensordict's ``load_memmap``."""
from __future__ import annotations

import os
import stat
from typing import Any, Literal

from .. import _allowlist, _limits, _stub
from .builder import Builder
from .layout import malformed, names_for, subpath_keys, unsupported
from .reader import Reader
from .sources import O_DIRECTORY, O_EXTRA, O_NOFOLLOW, Archive, ArchiveFolder, Folder


def resolve_device(device: Any, backend: str) -> tuple[bool, Any]:
    """(meta_only, device to copy leaves to, or None to keep them mapped)."""
    if device is None:
        return False, None
    if isinstance(device, int) and not isinstance(device, bool):
        if backend == "numpy":
            raise ValueError(f"the numpy backend loads onto the CPU only; device={device!r} needs backend='torch'")
        import torch

        device = torch.device(device)  # a CUDA index, as torch reads one
    name = str(device)
    if name == "meta":
        return True, None
    if name == "cpu":
        return False, None
    if backend == "numpy":
        raise ValueError(f"the numpy backend loads onto the CPU only; device={device!r} needs backend='torch'")
    return False, device


def _open_prefix(prefix: str, writable: bool) -> tuple[int, bool]:
    """A descriptor of the prefix (which may itself be a link: the caller named it),
    and whether it is a folder."""
    st = os.stat(prefix)
    if stat.S_ISDIR(st.st_mode):
        return os.open(prefix, os.O_RDONLY | O_DIRECTORY), True
    if not stat.S_ISREG(st.st_mode):
        raise malformed(prefix, "neither a folder nor a zip archive")
    return os.open(prefix, (os.O_RDWR if writable else os.O_RDONLY) | O_EXTRA), False


def _descend(folder: Any, keys: tuple[str, ...], robust: bool, subpath: Any) -> Any:
    """The folder of the nested key ``keys``, entering a tensorclass's ``_tensordict``
    where the key is one of its fields. Only folders on the way are looked at; each
    is closed once left."""
    for key in keys:
        names = names_for(key, robust, folder.where)
        if not any(folder.has(n) for n in names) and folder.has("_tensordict"):
            inner = folder.child("_tensordict")
            folder.close()
            folder = inner
        found = next((n for n in names if folder.has(n)), None)
        if found is None:
            folder.close()
            raise ValueError(f"subpath {subpath!r} names no saved tensordict in {folder.where}")
        try:
            child = folder.child(found)
        finally:
            folder.close()
        folder = child
    return folder


def load_memmap(
    prefix: str | os.PathLike[str],
    device: Any = None,
    non_blocking: bool = False,
    *,
    out: Any = None,
    robust_key: bool | None = True,
    subpath: Any = None,
    mode: Literal["r", "r+"] | None = None,
    num_threads: int = 0,
    allow_pickle: bool | None = None,
    backend: Literal["torch", "numpy"] | None = None,
    as_tensordict: bool = False,
    unknown_globals: Literal["error", "stub"] = "error",
) -> Any:
    """Load a TensorDict memmap folder or archive (``memmap()``, ``save()``, ``.tdz``)
    without tensordict and without running code from it. The parameters up to
    ``allow_pickle`` are ``TensorDictBase.load_memmap``'s.

    Args:
        prefix: the folder, or the zip / ``.tdz`` archive.
        device: None (or ``"cpu"``) keeps every leaf a lazy view of its file;
            ``"meta"`` reads no payload byte and gives ``TensorSpec`` records (numpy)
            or meta tensors (torch); another device (a ``torch.device``, a string, or
            an int: a CUDA index) copies the leaves there (torch). Under a torch
            ``FakeTensorMode`` the leaves are fake tensors, and no payload is read.
        non_blocking: passed to the copies to ``device``.
        out: a tensordict to load into (torch, with tensordict installed): its
            nested tensordicts are reused, its leaves replaced, its keys absent from
            the saved data removed; a device on ``out`` is used, another ``device``
            raises ``ValueError``. With the numpy backend, a nested dict, filled the
            same way. ``out`` is returned.
        robust_key: True (or None) reads tensordict's percent-encoded file names, and
            the plain names of keys that are safe file names; False the plain names only.
        subpath: ``"a/b"`` or ``("a", "b")``: load only that nested tensordict (or a
            tensorclass's entry, as ``obj.get(key)`` reaches it); only its files are opened.
        mode: ``"r"``: private copy-on-write mappings, writes never reach the files.
            ``"r+"``: shared mappings, in-place writes reach the files (a file the
            process cannot write raises ``PermissionError``; refused for compressed
            or unaligned archive entries). None (the default, as in tensordict): an
            archive as ``"r"``, each file of a folder as ``"r+"`` when the process
            can write it and as ``"r"`` otherwise.
        num_threads: threads that decompress the compressed entries of an archive
            (in Rust, with the GIL released); 0 decompresses them one after another.
        allow_pickle: pickle sidecars (non-tensor data tensordict pickled) are
            decoded by tensorplay's restricted VM with the safe-globals allowlist,
            never by pickle: with True, or with None and a ``FutureWarning`` (as
            tensordict warns: its default becomes False in 0.16). False refuses
            them (``UnsafeCheckpointError``, a ``RuntimeError``).
        backend: ``"numpy"``, ``"torch"``, or None for torch when it is installed.
        as_tensordict: return a ``TensorDict`` (needs tensordict and the torch backend).
        unknown_globals: ``"stub"`` decodes pickle sidecars as ``tensorplay.load``
            does in stub mode: a global outside the allowlist becomes an inert
            ``tensorplay.Stub``; ``"error"`` refuses it.

    Returns nested dicts of arrays or tensors (or ``out``); lazy stacks become
    lists, non-tensor data its value, a jagged tensor a nested tensor (torch) or a
    list of its components (numpy, meta), and a tensorclass its allowlisted class
    or a dict. With ``as_tensordict``, tensordict's own types.

    Raises:
        tensorplay.CheckpointError: a subclass naming the file, for a bad or unsafe tree.
        FileNotFoundError: ``prefix`` does not exist.
        PermissionError: ``mode="r+"`` and a file the process cannot write.
        ValueError: a bad argument, a ``prefix`` that is a file but no archive
            (``NotAnArchiveError``, also a ``MalformedCheckpointError``), a ``subpath``
            that names no saved tensordict, or a ``device`` other than ``out``'s.
    """
    from .. import _settings

    if mode not in (None, "r", "r+"):
        raise ValueError(f"mode must be None, 'r' or 'r+', not {mode!r}")
    if type(num_threads) is not int or num_threads < 0:
        raise ValueError(f"num_threads must be a non-negative int, not {num_threads!r}")
    if allow_pickle is not None and not isinstance(allow_pickle, bool):
        raise TypeError(f"allow_pickle must be a bool or None, not {allow_pickle!r}")
    if unknown_globals not in ("error", "stub"):
        raise ValueError(f"unknown_globals must be 'error' or 'stub', not {unknown_globals!r}")
    backend = _settings.resolve_backend(backend)
    if out is not None and not isinstance(out, dict):
        _require_tensordict()
        from tensordict import is_tensor_collection

        if not is_tensor_collection(out):
            raise TypeError(f"out must be a TensorDict or a tensorclass (a dict with the numpy backend), "
                            f"not {type(out).__name__}")
        as_tensordict = True
        device = _out_device(out, device)
    if as_tensordict:
        _require_tensordict()
        if backend != "torch":
            raise ValueError("as_tensordict=True (or a tensordict as out) needs backend='torch'")
    fake = backend == "torch" and _settings.fake_mode_active()
    meta_only, copy_to = (True, None) if fake else resolve_device(device, backend)
    keys = subpath_keys(subpath)
    robust = robust_key is None or bool(robust_key)
    if not O_NOFOLLOW:
        raise unsupported(os.fspath(prefix), "this platform cannot open files without following links")
    user = _allowlist.resolved()
    reader = Reader(meta_only, robust, allow_pickle, _limits.default_limits(), user,
                     stub=unknown_globals == "stub")
    with _stub.warning():
        tree = _read_tree(reader, prefix, keys, robust, subpath, mode, num_threads)
    if allow_pickle is None and reader.decoded:
        import warnings

        warnings.warn(f"load_memmap decoded pickled non-tensor data ({', '.join(reader.decoded)}) with tensorplay's "
                      "restricted pickle VM: no code ran. tensordict's load_memmap runs pickle there, and its default "
                      "becomes allow_pickle=False in TensorDict 0.16: pass allow_pickle=True to keep loading it.",
                      FutureWarning, stacklevel=2)
    td_device = copy_to if copy_to is not None else ("meta" if meta_only and not fake else None)
    builder = Builder(backend, meta_only, copy_to, as_tensordict, user, fake, non_blocking, td_device)
    loaded = builder.build(tree)
    return loaded if out is None else _fill(out, loaded)


def _out_device(out: Any, device: Any) -> Any:
    """The device a load into ``out`` uses: ``out``'s when it has one (another one
    is a ValueError; a device type without an index matches any index of it)."""
    import torch

    have = getattr(out, "device", None)
    if have is None:
        return device
    if device is not None:
        want = torch.device(device)
        if want.type != have.type or (want.index is not None and have.index is not None and want.index != have.index):
            raise ValueError(f"cannot load a tensordict on device {want} into a tensordict on device {have}")
    return have


def _fill(out: Any, loaded: Any) -> Any:
    """Load ``loaded`` into ``out`` as tensordict does: nested collections reused,
    leaves replaced, keys the saved data lacks removed. ``out`` is returned."""
    if isinstance(out, dict):
        if not isinstance(loaded, dict):
            raise ValueError(f"out is a dict, but the saved data is a {type(loaded).__name__} (a lazy stack loads as "
                             "a list)")
        for key in [k for k in out if k not in loaded]:
            del out[key]
        for key, value in loaded.items():
            current = out.get(key)
            if isinstance(value, dict) and isinstance(current, dict):
                _fill(current, value)
            else:
                out[key] = value
        return out
    from tensordict import is_non_tensor, is_tensor_collection, is_tensorclass

    target = out._tensordict if is_tensorclass(out) else out
    source = loaded._tensordict if is_tensorclass(loaded) else loaded
    for key in [k for k in target.keys() if k not in source.keys()]:
        target.del_(key)
    for key in source.keys():
        value = source._get_str(key, None)
        current = target._get_str(key, None)
        nested = is_tensor_collection(value) and not is_non_tensor(value)
        if nested and current is not None and is_tensor_collection(current) and not is_non_tensor(current):
            _fill(current, value)
        else:
            target._set_str(key, value, inplace=False, validated=True, non_blocking=False)
    return out


def _read_tree(reader: Reader, prefix: Any, keys: Any, robust: bool, subpath: Any, mode: str | None,
               num_threads: int) -> Any:
    path = os.fspath(prefix)
    # An archive maps as "r" unless "r+" is asked for: one mapping of the whole
    # file, whose payloads may be compressed or unaligned.
    fd, is_folder = _open_prefix(path, mode == "r+")
    archive = None
    try:
        if is_folder:
            root: Any = Folder(fd, path, mode)
        else:
            archive = Archive(path, fd, mode == "r+", _limits.merged(None))
            root = ArchiveFolder(archive, "")
        tree = reader.level(_descend(root, keys, robust, subpath), 0)
        if archive is not None:
            archive.finish(num_threads)
    finally:
        if is_folder:
            root.close()
        else:
            os.close(fd)
    return tree


def _require_tensordict() -> None:
    try:
        from tensordict import TensorDict  # noqa: F401
    except ImportError as e:
        raise ImportError("as_tensordict=True needs the tensordict package; without it, load_memmap returns "
                          "nested dicts") from e
