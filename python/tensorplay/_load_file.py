"""One checkpoint file (zip, legacy or a bare pickle) loaded weights-only by the
core: where its bytes come from (a path to map, a descriptor, or bytes), where
its storages go (``map_location``), and a refusal completed with every global
the file needs.

This is what the formats built on torch checkpoints call for the checkpoints
they hold (a DCP item, a ``.pt2``'s pickled parts, a TorchScript archive, a
whole pickled module). Which reader a path needs (a folder, a shard index, a
safetensors file, a ``.pt2``) is decided above, in :mod:`tensorplay._loading`."""
from __future__ import annotations

import io
import os
import stat
from typing import Any, Literal

from . import _allowlist, _core, _limits, _refusal, _settings, _stub
from ._settings import Backend, Endianness
from .utils.serialization import config


def source(f: Any, mmap: bool) -> tuple[str | int | bytes | memoryview, int | None]:
    """A path to map; for a file object, the descriptor of the regular file it
    reads from its start (mapped, not copied), or else its bytes from its current
    position. With it, where the checkpoint starts in a seekable file object (None
    for a path or a pipe), so the load can leave the object right after it, as
    ``torch.load`` does; meanwhile the object is at its end."""
    if isinstance(f, (str, os.PathLike)):
        return os.fspath(f), None
    if isinstance(f, (bytes, memoryview)):
        return f, None  # the file's bytes, read in place
    if mmap:
        raise ValueError("f must be a file path in order to use the mmap argument")
    read = getattr(f, "read", None)
    if not callable(read):
        raise TypeError(f"f must be a path or a binary file object, not {type(f).__name__}")
    if isinstance(f, io.BytesIO):
        start = f.tell()
        f.seek(0, os.SEEK_END)
        # From its start, the bytes object it was made from, when it was never written to.
        return (f.getvalue() if start == 0 else f.getbuffer()[start:].tobytes()), start
    fd = _whole_file_descriptor(f)
    if fd is not None:
        f.seek(0, os.SEEK_END)
        return fd, 0
    start = _position(f)
    data = _read_into(f) or read()
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise TypeError("f must be opened in binary mode")
    return (data if isinstance(data, memoryview) else bytes(data)), start


def _read_into(f: Any) -> memoryview | None:
    """The rest of a file object read with its ``readinto`` into one buffer of the
    size its ``seek`` tells, as ``torch.load`` reads one that has ``readinto``
    (no copy of each chunk); None when it has no ``readinto`` or cannot tell."""
    readinto = getattr(f, "readinto", None)
    if not callable(readinto):
        return None
    try:
        here = f.tell()
    except (AttributeError, OSError, ValueError):
        return None
    try:
        # tell(), not what seek returns: some file objects' seek returns None.
        f.seek(0, os.SEEK_END)
        size = f.tell() - here
    except (AttributeError, OSError, ValueError, TypeError):
        return None
    finally:
        f.seek(here)
    if not isinstance(size, int) or size <= 0:
        return None
    view = memoryview(bytearray(size))
    filled = 0
    while filled < size:
        n = readinto(view[filled:])
        if not n:
            break
        filled += n
    return view[:filled]


def _position(f: Any) -> int | None:
    """Where a file object reads from, when it can be sought back to."""
    try:
        return f.tell() if f.seekable() else None
    except (AttributeError, OSError, ValueError):
        return None


def _whole_file_descriptor(f: Any) -> int | None:
    """The descriptor of ``f`` when its bytes are exactly those of a regular file it
    has not read from yet: ``open(path, "rb")``, not a wrapper that transforms
    them (a ``GzipFile``'s ``fileno()`` is the compressed file's)."""
    raw = f.raw if isinstance(f, (io.BufferedReader, io.BufferedRandom)) else f
    try:
        if not isinstance(raw, io.FileIO) or not f.readable():
            return None
        fd = f.fileno()
        if f.tell() != 0 or not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
    except (OSError, ValueError):
        return None
    return fd


def _placement(map_location: Any, backend: Backend, data: _core.DataMode) -> _core.Placement:
    """Where ``map_location`` puts the storages, read as ``data`` says (meta
    storages are never read). Storages are always built on the CPU first;
    torch's ``restore_location`` then moves those that must move, exactly as
    ``torch.load`` does."""
    if map_location is None or (isinstance(map_location, str) and map_location == "cpu"):
        cpu = True
    else:
        cpu = str(map_location) == "cpu" and not callable(map_location) and not isinstance(map_location, dict)
    if backend == "numpy":
        if not cpu:
            raise ValueError(f"the numpy backend loads onto the CPU only; map_location={map_location!r} needs "
                             "backend='torch'")
        return _core.Placement(data)
    import torch

    restores_cpu_in_place = _cpu_storages_stay(torch)
    if map_location is None:
        restore = _core.Restore.SAVED if restores_cpu_in_place else _core.Restore.SAVED_AND_CPU
        return _core.Placement(data, restore, torch.serialization.default_restore_location)
    if cpu and restores_cpu_in_place:
        return _core.Placement(data)
    if str(map_location) == "meta" and isinstance(map_location, (str, torch.device)):
        return _core.Placement(_core.DataMode.META)
    return _core.Placement(data, _core.Restore.MAPPED, torch.serialization._get_restore_location(map_location))


def _cpu_storages_stay(torch: Any) -> bool:
    """Whether torch's device registry hands a CPU storage restored to the CPU back
    unchanged, so the load can skip the call: torch's own CPU entry comes first. A
    package registered ahead of it (``register_package`` with a priority below 10)
    sees every storage, as it does in ``torch.load``."""
    registry = getattr(torch.serialization, "_package_registry", None)
    cpu_entry = getattr(torch.serialization, "_cpu_deserialize", None)
    return not registry or cpu_entry is None or registry[0][2] is cpu_entry


def _fake_placement(map_location: Any) -> _core.Placement:
    """Under a FakeTensorMode, as in torch: meta storages tagged with their file
    offset and saved device, and tensors whose fake device is that device mapped."""
    import torch

    def fake_device(tensor: Any) -> None:
        location = tensor.untyped_storage()._fake_device
        tensor.fake_device = torch.device(_mapped_location(map_location, location))

    return _core.Placement(_core.DataMode.META, fake=fake_device)


def _mapped_location(map_location: Any, location: str) -> str:
    """A saved location under a map_location that is not a callable."""
    if map_location is None or callable(map_location):
        return location
    if isinstance(map_location, dict):
        return map_location.get(location, location)
    return str(map_location)


def load_source(f: Any, read_from: str | int | bytes | memoryview, start: int | None, map_location: Any,
                mmap: bool, shared: bool, endianness: Endianness, backend: Backend, limits: dict[str, int] | None,
                encoding: str, stub: bool, api: _refusal.Api) -> Any:
    """The checkpoint ``source`` gave for ``f`` (``read_from``, from ``start``),
    loaded; ``f`` is left right after it, as ``torch.load`` leaves a file object.
    A refusal for a global names every global the file needs, not only the first."""
    if backend == "torch" and _settings.fake_mode_active():
        placement = _fake_placement(map_location)
    else:
        skipping = _settings.skipping() is not None
        placement = _placement(map_location, backend, _core.DataMode.SKIP if skipping else _core.DataMode.READ)
        if placement.data == _core.DataMode.SKIP:
            mmap = False
    if not mmap:
        map_mode = _core.MapMode.READ_ONLY
    else:
        map_mode = _core.MapMode.SHARED if shared else _core.MapMode.PRIVATE
    names, objects = _allowlist.resolved()
    options = _core.LoadOptions(backend=backend, map=map_mode, user_names=names, user_objects=objects,
                                limits=_limits.merged(limits), encoding=encoding, endianness=endianness,
                                threads=_settings.copy_threads(), stub=stub, placement=placement)
    try:
        loaded = _core.load(read_from, options, stream=start is not None)
    except _core.UnsafeCheckpointError as refused:
        raise _refusal.complete(refused, read_from, names, _limits.merged(limits), api) from None
    if stub:
        _refusal.refuse_hostile(read_from, names, _limits.merged(limits), api)
    if start is None:
        return loaded
    obj, taken = loaded
    f.seek(start + taken)
    return obj


def load(f: Any, *, backend: Backend | None = None, limits: dict[str, int] | None = None,
         unknown_globals: Literal["error", "stub"] = "error") -> Any:
    """One checkpoint file (a path, or its bytes) onto the CPU, with the process's
    settings, as ``tensorplay.load`` loads a file that is neither a folder, a
    pointer file nor another format."""
    mmap = bool(config.load.mmap)
    read_from, start = source(f, mmap)

    def loading() -> Any:
        return load_source(f, read_from, start, None, mmap, _settings.shared_mapping(), _settings.endianness(),
                           _settings.resolve_backend(backend), limits, "utf-8", unknown_globals == "stub",
                           "tensorplay")

    if unknown_globals == "error":
        return loading()
    with _stub.warning():
        return loading()
