"""A weights-only load, by what the path or file is: a safetensors file, a
folder or file that names others (a shard index, a distributed checkpoint), a
torch.export archive, or one checkpoint file (:mod:`tensorplay._load_file`).
``tensorplay.load`` and the patched ``torch.load`` both come here once their
settings are read."""
from __future__ import annotations

import contextvars
import errno
import os
from typing import Any

from . import _core, _load_file, _refusal, _settings
from ._settings import Backend, Endianness


def weights_only_load(f: Any, map_location: Any, pickle_module: Any, mmap: bool, shared: bool,
                      endianness: Endianness, backend: Backend | None, limits: dict[str, int] | None,
                      pickle_load_args: dict[str, Any], stub: bool = False, api: _refusal.Api = "tensorplay") -> Any:
    """``load`` once the settings are read: tensorplay's own, or under
    ``patch_torch`` torch's (``torch.serialization``'s mmap flags and byte order,
    ``torch.utils.serialization.config``)."""
    if pickle_module is not None:
        raise RuntimeError("Can not safely load weights when explicit pickle_module is specified: tensorplay.load "
                           "is weights-only unless weights_only=False is passed, which hands the file to torch.load "
                           "and its pickle module (that runs code from the file)")
    path = os.fspath(f) if isinstance(f, (str, os.PathLike)) else None

    def many_files() -> Any:
        return _load_many_files(path, map_location, mmap, shared, endianness, backend, limits,
                                dict(pickle_load_args), stub, api)

    if path is not None and _is_safetensors(path):
        return _load_safetensors(path, map_location, _settings.resolve_backend(backend))
    if path is not None and _names_other_files(path):
        return many_files()
    encoding = pickle_load_args.get("encoding", "utf-8")
    unexpected = sorted(set(pickle_load_args) - {"encoding"})
    if unexpected:
        raise TypeError(f"load() got unexpected keyword arguments {unexpected}")
    backend = _settings.resolve_backend(backend)
    read_from, start = _load_file.source(f, mmap)
    try:
        return _load_file.load_source(f, read_from, start, map_location, mmap, shared, endianness, backend, limits,
                                      encoding, stub, api)
    except _core.MalformedCheckpointError:
        from . import _export

        # Asked only of a zip the checkpoint reader refused: a torch.export archive has no data.pkl.
        if start not in (None, 0) or not _export.is_export_archive(read_from, limits):
            raise
        if not stub:
            raise _export.refusal(read_from, limits) from None
        if map_location is not None and str(map_location) != "cpu":
            raise _core.error("unsupported", "a torch.export archive's parts load on the CPU: map_location "
                              f"{map_location!r} is not supported for it") from None
        return _export.contents(read_from, backend, limits)
    except IsADirectoryError:
        # Asked of the core's open, not of every path first: a folder is the rare case.
        if path is None:
            raise
        return many_files()


def _names_other_files(path: str) -> bool:
    """A file that names the files of a checkpoint: a shard index, or a distributed
    checkpoint's ``.metadata``. (A folder of either is found when it fails to open.)"""
    from . import _sharded

    return _sharded.is_index(path) or bool(_core.allowed_in_file(os.path.basename(path)))


def _load_many_files(path: str, map_location: Any, mmap: bool, shared: bool, endianness: Endianness,
                     backend: Backend | None, limits: dict[str, int] | None, pickle_load_args: dict[str, Any],
                     stub: bool, api: _refusal.Api) -> Any:
    """A folder or file that names others: shards load in parallel, each as
    ``load`` loads a file; a distributed checkpoint's folder gives its whole state
    dict (on the CPU), its ``.metadata`` file the ``Metadata``."""
    from . import _sharded, dcp

    index = _sharded.find_index(path) if os.path.isdir(path) and not dcp.is_dcp_folder(path) else path
    if index is not None and _sharded.is_index(index):
        # Shards load on worker threads, each in a copy of this context: a
        # safe_globals block around the load covers them, and their stubs count
        # in the load's one warning.
        context = contextvars.copy_context()

        def load_shard(shard: str) -> Any:
            return context.copy().run(weights_only_load, shard, map_location, None, mmap, shared, endianness,
                                      backend, limits, dict(pickle_load_args), stub, api)

        return _sharded.load(index, load_shard, _settings.copy_threads())
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


def _load_safetensors(path: str, map_location: Any, backend: Backend) -> dict[str, Any]:
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
        raise _core.error("malformed_archive", f"malformed safetensors file {path}: {e}") from e
    except (KeyError, TypeError, AttributeError) as e:  # safetensors' numpy reader has no float8
        raise _core.error("unsupported", f"safetensors' numpy reader cannot hold this file's tensors ({e}); "
                          "load with backend='torch'") from None
