"""tensorplay's serialization API, mirroring ``torch.serialization``.

``load`` reads PyTorch checkpoints without running any code from them: a Rust
pickle VM builds only allowlisted types, and tensors are views of the mapped file
or copies made once, in parallel, with the GIL released.
"""
from __future__ import annotations

import contextlib
import enum
import errno
import importlib.util
import io
import mmap as _mmap
import os
import stat
import sys
import threading
from collections.abc import Iterable
from typing import Any, Literal

from . import _allowlist, _core, _limits, _paths, _refusal, _stub
from .utils.serialization import config

__all__ = [
    "load",
    "save",
    "add_safe_globals",
    "clear_safe_globals",
    "get_safe_globals",
    "get_unsafe_globals_in_checkpoint",
    "LoadEndianness",
    "get_default_load_endianness",
    "set_default_load_endianness",
    "get_default_mmap_options",
    "set_default_mmap_options",
    "get_crc32_options",
    "set_crc32_options",
    "register_package",
    "skip_data",
    "ARGPARSE_PRESET",
    "PATHLIB_PRESET",
    "LIGHTNING_PRESET",
    "OMEGACONF_PRESET",
    "TRANSFORMERS_PRESET",
    "safe_globals",
    "CheckpointError",
    "UnsafeCheckpointError",
    "MalformedCheckpointError",
    "LimitExceededError",
    "UnsupportedCheckpointError",
]

CheckpointError = _core.CheckpointError
UnsafeCheckpointError = _core.UnsafeCheckpointError
MalformedCheckpointError = _core.MalformedCheckpointError
LimitExceededError = _core.LimitExceededError
UnsupportedCheckpointError = _core.UnsupportedCheckpointError

# What ``load`` builds: torch tensors, or numpy arrays (no torch needed).
_Backend = Literal["torch", "numpy"]
# The core's names for a byte order (``LoadEndianness``).
_Endianness = Literal["native", "little", "big"]


class LoadEndianness(enum.Enum):
    """The byte order assumed for files without a ``byteorder`` record (torch's meaning)."""

    NATIVE = 1
    LITTLE = 2
    BIG = 3


def get_default_load_endianness() -> LoadEndianness | None:
    """The byte order ``set_default_load_endianness`` set (None: little-endian)."""
    return config.load.endianness


def set_default_load_endianness(endianness: LoadEndianness | None) -> None:
    """What a file without a ``byteorder`` record is: None or LITTLE (little-endian, the
    default), BIG, or NATIVE (never swap). A ``byteorder`` record always wins."""
    if endianness is not None and not isinstance(endianness, LoadEndianness):
        # torch.serialization.LoadEndianness members are accepted by name.
        if type(endianness).__name__ != "LoadEndianness":
            raise TypeError("Invalid argument type in function set_default_load_endianness")
        endianness = LoadEndianness[endianness.name]
    config.load.endianness = endianness


def _endianness() -> _Endianness:
    return _endianness_name(config.load.endianness)


_ENDIANNESS: dict[str, _Endianness] = {"LITTLE": "little", "BIG": "big", "NATIVE": "native"}


def _endianness_name(setting: Any) -> _Endianness:
    """The core's name for a ``LoadEndianness``, tensorplay's or torch's (None: little)."""
    return "little" if setting is None else _ENDIANNESS[setting.name]


def get_default_mmap_options() -> int | None:
    """The mmap flags ``set_default_mmap_options`` set (None: ``mmap.MAP_PRIVATE``)."""
    return config.load.mmap_flags


class set_default_mmap_options:
    """``mmap.MAP_PRIVATE`` (the default: writes to loaded tensors stay in memory) or
    ``mmap.MAP_SHARED`` (writes reach the file). Works as a call, which persists,
    and as a context manager, which restores the previous flags on exit."""

    def __init__(self, flags: int):
        if sys.platform == "win32":
            raise RuntimeError("Changing the default mmap options is currently not supported for Windows")
        if flags not in (_mmap.MAP_PRIVATE, _mmap.MAP_SHARED):
            raise ValueError("Invalid argument in function set_default_mmap_options, expected mmap.MAP_PRIVATE or "
                             f"mmap.MAP_SHARED, but got {flags}")
        self.previous = config.load.mmap_flags
        config.load.mmap_flags = flags

    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        config.load.mmap_flags = self.previous


def get_crc32_options() -> bool:
    """Whether ``save`` computes each record's CRC-32 (``set_crc32_options``)."""
    return bool(config.save.compute_crc32)


def set_crc32_options(compute_crc32: bool) -> None:
    """Whether ``save`` computes the CRC-32 of every record (zeros otherwise)."""
    config.save.compute_crc32 = bool(compute_crc32)


_skip = threading.local()


class skip_data:
    """Inside this block (per thread), ``load`` gives tensors the right shape, dtype and
    storage sharing without reading their bytes (the memory is uninitialised), and
    ``save`` writes the structure and reserves the space of every storage without
    writing its bytes."""

    def __init__(self, materialize_fake_tensors: bool = False):
        self.materialize_fake_tensors = materialize_fake_tensors
        self._saved: list[Any] = []

    def __enter__(self) -> skip_data:
        self._saved.append(getattr(_skip, "active", None))
        _skip.active = self
        return self

    def __exit__(self, *exc: object) -> None:
        _skip.active = self._saved.pop()


def _skipping() -> Any:
    """The ``skip_data`` block in force in this thread, tensorplay's or torch's
    (``torch.serialization.skip_data`` works here as it does for torch), or None."""
    active = getattr(_skip, "active", None)
    if active is None:
        torch_state = getattr(getattr(sys.modules.get("torch"), "serialization", None), "_serialization_tls", None)
        if getattr(torch_state, "skip_data", False):
            return skip_data(getattr(torch_state, "materialize_fake_tensors", False))
    return active


def _fake_mode_active() -> bool:
    if "torch" not in sys.modules:
        return False
    import torch

    return torch._guards.detect_fake_mode(None) is not None


def _torch_available() -> bool:
    return importlib.util.find_spec("torch") is not None


def _resolve_backend(backend: _Backend | None) -> _Backend:
    if backend is None:
        return "torch" if _torch_available() else "numpy"
    if backend not in ("torch", "numpy"):
        raise ValueError(f"backend must be None, 'torch' or 'numpy', not {backend!r}")
    if backend == "torch" and not _torch_available():
        raise ModuleNotFoundError("backend='torch' needs torch installed; use backend='numpy' without it")
    return backend


def _source(f: Any, mmap: bool) -> tuple[str | int | bytes | memoryview, int | None]:
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


def _placement(map_location: Any, backend: _Backend) -> dict[str, Any]:
    """How ``map_location`` turns into the core's arguments. Storages are always
    built on the CPU first; torch's ``restore_location`` then moves those that
    must move, exactly as ``torch.load`` does."""
    if map_location is None or (isinstance(map_location, str) and map_location == "cpu"):
        cpu = True
    else:
        cpu = str(map_location) == "cpu" and not callable(map_location) and not isinstance(map_location, dict)
    if backend == "numpy":
        if not cpu:
            raise ValueError(f"the numpy backend loads onto the CPU only; map_location={map_location!r} needs "
                             "backend='torch'")
        return {}
    import torch

    restores_cpu_in_place = _cpu_storages_stay(torch)
    if map_location is None:
        return {"restore": torch.serialization.default_restore_location, "restore_cpu": not restores_cpu_in_place}
    if cpu and restores_cpu_in_place:
        return {}
    if str(map_location) == "meta" and isinstance(map_location, (str, torch.device)):
        return {"data": "meta"}
    return {"restore": torch.serialization._get_restore_location(map_location), "restore_all": True}


def _cpu_storages_stay(torch: Any) -> bool:
    """Whether torch's device registry hands a CPU storage restored to the CPU back
    unchanged, so the load can skip the call: torch's own CPU entry comes first. A
    package registered ahead of it (``register_package`` with a priority below 10)
    sees every storage, as it does in ``torch.load``."""
    registry = getattr(torch.serialization, "_package_registry", None)
    cpu_entry = getattr(torch.serialization, "_cpu_deserialize", None)
    return not registry or cpu_entry is None or registry[0][2] is cpu_entry


def register_package(priority: int, tagger: Any, deserializer: Any) -> None:
    """Register how storages of a device are tagged when saved and restored when
    loaded: torch's ``register_package``, on torch's own registry, so that
    ``torch.save``, ``torch.load``, ``tensorplay.save`` and ``tensorplay.load`` all
    follow it.

    Args:
        priority: lower runs first; torch's own entries are 10 (CPU) to 26.
        tagger: ``tagger(storage) -> str | None``, the location ``save`` records for
            a storage; the first one that returns a string wins.
        deserializer: ``deserializer(storage, location) -> storage | None``: a CPU
            storage holding the loaded bytes, and the location it was saved on (or
            the one ``map_location`` maps it to); the first one that returns a
            storage wins.

    Needs torch: taggers and deserializers take torch storages. The numpy backend
    loads every storage onto the CPU and has no devices to register.
    """
    if not _torch_available():
        raise RuntimeError("register_package needs torch: taggers and deserializers take torch storages, and the "
                           "numpy backend loads every storage onto the CPU")
    import torch

    torch.serialization.register_package(priority, tagger, deserializer)


def _fake_placement(map_location: Any) -> dict[str, Any]:
    """Under a FakeTensorMode, as in torch: meta storages tagged with their file
    offset and saved device, and tensors whose fake device is that device mapped."""
    import torch

    def fake_device(tensor: Any) -> None:
        location = tensor.untyped_storage()._fake_device
        tensor.fake_device = torch.device(_mapped_location(map_location, location))

    return {"data": "meta", "fake": fake_device}


def _mapped_location(map_location: Any, location: str) -> str:
    """A saved location under a map_location that is not a callable."""
    if map_location is None or callable(map_location):
        return location
    if isinstance(map_location, dict):
        return map_location.get(location, location)
    return str(map_location)


def _unsafe_load(f, map_location, pickle_module, mmap, pickle_load_args):
    if not _torch_available():
        raise RuntimeError(
            "weights_only=False runs arbitrary code from the file through pickle; tensorplay never does that "
            "itself and delegates it to torch.load, which is not installed."
        )
    import torch

    kwargs = dict(pickle_load_args)
    if pickle_module is not None:
        kwargs["pickle_module"] = pickle_module
    skipping = getattr(_skip, "active", None)
    # tensorplay's skip_data block, handed on as torch's own.
    with torch.serialization.skip_data(skipping.materialize_fake_tensors) if skipping else contextlib.nullcontext():
        return torch.load(f, map_location=map_location, weights_only=False, mmap=mmap, **kwargs)


def load(
    f: Any,
    map_location: Any = None,
    pickle_module: Any = None,
    *,
    weights_only: bool | None = True,
    mmap: bool | None = None,
    backend: Literal["torch", "numpy"] | None = None,
    limits: dict[str, int] | None = None,
    unknown_globals: Literal["error", "stub"] = "error",
    **pickle_load_args: Any,
) -> Any:
    """Load an object saved with ``torch.save`` without running code from the file.

    Args:
        f: a path, a PathLike, or a binary file object (read from its current position).
        map_location: where storages go, with torch's meaning: None (where they were
            saved), a str or ``torch.device``, a dict remapping saved locations, or a
            callable ``(storage, location)``. ``"meta"`` reads no payload byte. The
            numpy backend takes None or ``"cpu"``.
        pickle_module: only with ``weights_only=False``, which delegates to ``torch.load``.
        weights_only: True (the default) builds only allowlisted types. False is an
            explicit opt-in to unsafe pickle, delegated to ``torch.load``.
        mmap: tensors become views of one private copy-on-write mapping of the file
            (only the pages used are read; writes never reach the file). False copies
            each storage once. None uses ``config.load.mmap``.
        backend: ``"torch"`` (tensors, as ``torch.load`` returns them), ``"numpy"``
            (numpy arrays, no torch needed), or None for torch when it is installed.
        limits: resource limits for this call, by name (``tensorplay.default_limits()`` lists
            them; ``tensorplay.set_default_limits`` changes them for the process).
        unknown_globals: ``"error"`` (the default) refuses a global outside the
            allowlist, naming it. ``"stub"`` builds a :class:`tensorplay.Stub` in its
            place, which records how the file used it (call arguments, state,
            items) and is never imported or called; tensors and allowlisted values
            inside it are built as usual. Dangerous globals are refused either way.
            The load then warns once (``tensorplay.StubWarning``) naming them.
        pickle_load_args: ``encoding`` for Python 2 strings (default ``"utf-8"``).

    Raises:
        tensorplay.CheckpointError: a subclass of ``pickle.UnpicklingError`` for a bad,
            unsafe or over-limit file, naming what was wrong and where.
        FileNotFoundError: the path does not exist.
    """
    if weights_only is None:
        weights_only = pickle_module is None
    if unknown_globals not in ("error", "stub"):
        raise ValueError(f"unknown_globals must be 'error' or 'stub', not {unknown_globals!r}")
    mmap = bool(config.load.mmap if mmap is None else mmap)
    if _paths.is_url(f):
        return _load_url(f, map_location, weights_only, backend, limits, unknown_globals, pickle_load_args)
    if not weights_only:
        if unknown_globals == "stub":
            raise ValueError("unknown_globals='stub' is a weights-only load; weights_only=False runs the file's code")
        return _unsafe_load(f, map_location, pickle_module, mmap, pickle_load_args)
    shared = config.load.mmap_flags == _mmap.MAP_SHARED
    if unknown_globals == "error":
        return _weights_only_load(f, map_location, pickle_module, mmap, shared, _endianness(), backend, limits,
                                  pickle_load_args)
    with _stub.warning():
        return _weights_only_load(f, map_location, pickle_module, mmap, shared, _endianness(), backend, limits,
                                  pickle_load_args, stub=True)


def _load_url(url: str, map_location: Any, weights_only: bool, backend: _Backend | None,
              limits: dict[str, int] | None, unknown_globals: Literal["error", "stub"],
              pickle_load_args: dict[str, Any]) -> Any:
    """A checkpoint where it lives: its directory, pickles and local headers by
    ranges, then its storages (none for ``map_location="meta"``), into a sparse
    local copy the weights-only load reads once (see :mod:`tensorplay._remote_mirror`)."""
    if not weights_only:
        raise ValueError(f"{url}: a URL is loaded weights-only; weights_only=False would hand it to torch.load")
    from . import _remote_mirror

    with _remote_mirror.mirrored(url, storages=map_location != "meta") as path:
        return load(path, map_location, weights_only=True, mmap=False, backend=backend, limits=limits,
                    unknown_globals=unknown_globals, **pickle_load_args)


def _weights_only_load(f: Any, map_location: Any, pickle_module: Any, mmap: bool, shared: bool,
                       endianness: _Endianness, backend: _Backend | None, limits: dict[str, int] | None,
                       pickle_load_args: dict[str, Any], stub: bool = False,
                       api: Literal["tensorplay", "torch", "cli"] = "tensorplay") -> Any:
    """``load`` once the settings are read: tensorplay's own, or under
    ``patch_torch`` torch's (``torch.serialization``'s mmap flags and byte order,
    ``torch.utils.serialization.config``)."""
    if pickle_module is not None:
        raise RuntimeError("Can not safely load weights when explicit pickle_module is specified: tensorplay.load "
                           "is weights-only unless weights_only=False is passed, which hands the file to torch.load "
                           "and its pickle module (that runs code from the file)")
    path = os.fspath(f) if isinstance(f, (str, os.PathLike)) else None
    if path is not None and _is_safetensors(path):
        return _load_safetensors(path, map_location, _resolve_backend(backend))
    if path is not None and _names_other_files(path):
        return _load_many_files(path, map_location, mmap, backend, limits, pickle_load_args, stub)
    many_files_args = dict(pickle_load_args)
    encoding = pickle_load_args.pop("encoding", "utf-8")
    if pickle_load_args:
        raise TypeError(f"load() got unexpected keyword arguments {sorted(pickle_load_args)}")
    backend = _resolve_backend(backend)
    if backend == "torch" and _fake_mode_active():
        placement = _fake_placement(map_location)
    else:
        placement = _placement(map_location, backend)
        if _skipping() is not None and placement.get("data") != "meta":
            placement["data"] = "skip"
            mmap = False
    names, objects = _allowlist.resolved()
    source, start = _source(f, mmap)
    try:
        loaded = _core.load(
            source,
            backend=backend,
            mmap=mmap,
            shared=mmap and shared,
            user_names=names,
            user_objects=objects,
            limits=_limits.merged(limits),
            encoding=encoding,
            endianness=endianness,
            threads=_copy_threads(),
            stream=start is not None,
            stub=stub,
            **placement,
        )
    except _core.UnsafeCheckpointError as refused:
        # One error naming every global the file needs, not the first of them.
        raise _refusal.complete(refused, source, names, _limits.merged(limits), api) from None
    except _core.MalformedCheckpointError:
        from . import _export

        # Asked only of a zip the checkpoint reader refused: a torch.export archive has no data.pkl.
        if start not in (None, 0) or not _export.is_export_archive(source, limits):
            raise
        if not stub:
            raise _export.refusal(source, limits) from None
        if map_location is not None and str(map_location) != "cpu":
            raise _core.error("unsupported", "a torch.export archive's parts load on the CPU: map_location "
                              f"{map_location!r} is not supported for it") from None
        return _export.contents(source, backend, limits)
    except IsADirectoryError:
        # Asked of the core's open, not of every path first: a folder is the rare case.
        if path is None:
            raise
        return _load_many_files(path, map_location, mmap, backend, limits, many_files_args, stub)
    if stub:
        _refusal.refuse_hostile(source, names, _limits.merged(limits), api)
    if start is None:
        return loaded
    obj, taken = loaded
    f.seek(start + taken)
    return obj


def _names_other_files(path: str) -> bool:
    """A file that names the files of a checkpoint: a shard index, or a distributed
    checkpoint's ``.metadata``. (A folder of either is found when it fails to open.)"""
    from . import _sharded

    return _sharded.is_index(path) or bool(_core.allowed_in_file(os.path.basename(path)))


def _load_many_files(path: str, map_location: Any, mmap: bool, backend: _Backend | None,
                     limits: dict[str, int] | None, pickle_load_args: dict[str, Any], stub: bool) -> Any:
    """A folder or file that names others: shards load in parallel, each as
    ``load`` loads a file; a distributed checkpoint's folder gives its whole state
    dict (on the CPU), its ``.metadata`` file the ``Metadata``."""
    from . import _sharded, dcp

    index = _sharded.find_index(path) if os.path.isdir(path) and not dcp.is_dcp_folder(path) else path
    if index is not None and _sharded.is_index(index):
        unknown = "stub" if stub else "error"
        return _sharded.load(index, lambda shard: load(shard, map_location, mmap=mmap, backend=backend,
                                                        limits=limits, unknown_globals=unknown,
                                                        **pickle_load_args), _copy_threads())
    if index is None:
        raise IsADirectoryError(errno.EISDIR, "a folder is a checkpoint only when it holds a distributed "
                                "checkpoint's .metadata or a shard index (*.index.json)", path)
    if map_location not in (None, "cpu") and str(map_location) != "cpu":
        raise ValueError(f"a distributed checkpoint loads onto the CPU; map_location={map_location!r} is not "
                         "supported for it (move the tensors after loading, or use dcp.load with "
                         "tensorplay.dcp.FileSystemReader)")
    if not os.path.isdir(path):
        return dcp.read_metadata(path, backend=backend, limits=limits)
    return dcp.load(path, backend=backend, mmap=mmap)


def _is_safetensors(path: str) -> bool:
    """A ``.safetensors`` name on a file that reads as one: its 8-byte header size,
    then the JSON header. A torch checkpoint under that name (as torch.load would
    hand to safetensors, which fails on it) is loaded, and judged, as what it is."""
    if not path.endswith(".safetensors"):
        return False
    try:
        with open(path, "rb") as f:
            head = f.read(9)
    except OSError:
        return False  # the load's own open reports it, errno and file name set
    return len(head) == 9 and head[8:9] == b"{"


def _load_safetensors(path: str, map_location: Any, backend: _Backend) -> dict[str, Any]:
    """A ``.safetensors`` path, as torch.load reads one since 2.13: through the
    safetensors package (a format without code), onto the device map_location
    names (a string or ``torch.device``, as in torch)."""
    if isinstance(map_location, dict) or callable(map_location):
        kind = "dict" if isinstance(map_location, dict) else "callable"
        raise RuntimeError(f"Loading safetensors file with {kind} map_location is not supported. "
                           "Use a device string or torch.device instead.")
    try:
        import safetensors
        if backend == "torch":
            import safetensors.torch
        else:
            import safetensors.numpy
    except ImportError as e:
        raise RuntimeError("Attempting to load a safetensors file but safetensors is not installed "
                           "(pip install safetensors)") from e
    if backend == "numpy" and map_location not in (None, "cpu") and str(map_location) != "cpu":
        raise ValueError(f"the numpy backend loads onto the CPU only; map_location={map_location!r} needs "
                         "backend='torch'")
    try:
        if backend == "torch":
            return safetensors.torch.load_file(path, device="cpu" if map_location is None else str(map_location))
        import ml_dtypes  # noqa: F401 - names bfloat16 for safetensors' numpy reader, as for tensorplay's

        return safetensors.numpy.load_file(path)
    except safetensors.SafetensorError as e:
        raise MalformedCheckpointError(f"malformed safetensors file {path}: {e}") from e
    except (KeyError, TypeError, AttributeError) as e:  # safetensors' numpy reader has no float8
        raise UnsupportedCheckpointError(f"safetensors' numpy reader cannot hold this file's tensors ({e}); load "
                                         "with backend='torch'") from None


def _copy_threads() -> int | None:
    """Threads that copy storages; ``TENSORPLAY_THREADS`` overrides the core count."""
    value = os.environ.get("TENSORPLAY_THREADS")
    return int(value) if value else None


def save(obj: Any, f: Any, pickle_module: Any = None, pickle_protocol: int = 2,
         _use_new_zipfile_serialization: bool = True, _disable_byteorder_record: bool = False) -> None:
    """Save ``obj`` to ``f`` as ``torch.save`` does, record for record.

    torch tensors are written exactly as torch writes them (each storage once, views
    keep sharing it, Parameters, ``requires_grad`` and ``_metadata`` survive); numpy
    arrays are written as the equivalent tensors, so ``torch.load`` opens the file
    without tensorplay, and a view of a larger array keeps sharing its base.
    Objects weights-only loading cannot rebuild are still saved, as torch saves them.

    ``f`` is a path, a PathLike or a writable binary file object. A path is written
    to a temporary file in the same folder, fsynced and renamed over the target, so
    a failed save leaves the old file intact. ``config.save`` (alignment, CRC-32) and
    ``skip_data`` apply; ``_use_new_zipfile_serialization=False`` writes the legacy
    format torch still reads.
    """
    from ._save import save as _save

    _save(obj, f, pickle_module, pickle_protocol, _use_new_zipfile_serialization, _disable_byteorder_record)


def get_unsafe_globals_in_checkpoint(f: Any) -> list[str]:
    """The ``module.name`` of every global in the checkpoint that the allowlist
    (built-in plus yours) does not cover, in order of first appearance, without
    building anything. ``[]`` means ``load`` will not refuse the file for a global.

    Unlike torch's, it reads every pickle protocol, legacy-format files and raw
    pickles, and files where they live (``http(s)://``, ``hf://``, ``s3://`` and
    other fsspec URLs, read by ranges: see ``tensorplay.scanner.scan``). A file
    that cannot be fully read raises ``MalformedCheckpointError`` unless an
    unsafe global was found before the break; a URL that cannot be read as
    asked raises an ``OSError``.
    """
    if _paths.is_url(f):
        from . import _remote

        return _remote.unsafe_globals(f, _allowlist.names())
    # Positional arguments: a scan takes tens of microseconds, and matching
    # keywords is a measurable part of a first call.
    source = f if isinstance(f, str) else _source(f, mmap=False)[0]
    return _core.unsafe_globals(source, _allowlist.names(), _limits.merged(None))


# Opt-in presets, never on by default (see _presets): built on first use, since
# argparse alone is a third of ``import tensorplay``.
ARGPARSE_PRESET: list[type]
PATHLIB_PRESET: list[type]
LIGHTNING_PRESET: list[type]
OMEGACONF_PRESET: list[Any]  # classes, and (stand-in, "omegaconf name") pairs
TRANSFORMERS_PRESET: list[Any]  # classes, and (stand-in, "accelerate name") pairs


def __getattr__(name: str) -> Any:
    # Any other missing name (a `from .serialization import x` probe) imports nothing.
    if name.endswith("_PRESET"):
        from ._presets import PRESETS

        if name in PRESETS:
            globals()[name] = preset = PRESETS[name]()
            return preset
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})


def add_safe_globals(safe_globals: Iterable[Any]) -> None:
    """Allowlist globals for every weights-only load in this process.

    Each entry is an object (matched by ``module.qualname``) or a tuple
    ``(object, "module.qualname")`` for an object importable under another name.
    """
    _allowlist.add(safe_globals)


def clear_safe_globals() -> None:
    """Remove every entry ``add_safe_globals`` made."""
    _allowlist.clear()


def get_safe_globals() -> list[Any]:
    """The entries ``add_safe_globals`` made, as given, then those of the
    ``safe_globals`` blocks in force here. (torch's own list,
    ``torch.serialization.get_safe_globals()``, counts too but is not repeated.)"""
    return _allowlist.current()


class safe_globals:
    """Allowlist globals inside a ``with`` block, for this thread or task only."""

    def __init__(self, safe_globals: Iterable[Any]):
        self.safe_globals = list(safe_globals)
        self._tokens: list[Any] = []

    def __enter__(self) -> None:
        self._tokens.append(_allowlist.push_context(self.safe_globals))

    def __exit__(self, *exc: object) -> None:
        _allowlist.pop_context(self._tokens.pop())
