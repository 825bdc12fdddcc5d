"""The registry of real readers: each does what an ordinary program does with a
file (or a folder) of its kind, in this process, running whatever the file holds.
Only ever called inside the sandbox's forked children (see sandbox.py).

One ``Reader`` per line in ``READERS``; ``kinds`` are the case kinds the reader is
meant for (a reader still runs on every case: it is how a mislabelled file gets
read), and ``stands_for`` names the tensorplay entry point that replaces it, when
one does (``check.py`` holds the loader to the readers it stands in for).
"""
from __future__ import annotations

import bz2
import gzip
import io
import json
import lzma
import os
import pickle
import platform
import tarfile
import tempfile
import zipfile
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from importlib.metadata import version

PY = f"CPython {platform.python_version()}"
# Readers that need torch run in a fork server of their own: forking a process
# that holds torch costs 15-20 ms, one without it 1-4 ms.
TORCH_GROUP, LIGHT_GROUP = "torch", "light"


@dataclass(frozen=True)
class Reader:
    name: str
    runs: str  # the name and version of what it runs
    read: Callable[[str], None]
    kinds: frozenset[str] = field(default_factory=frozenset)
    folder: bool = False  # reads a folder, not a file
    stands_for: str = ""  # "load" (tensorplay.load of a file), "export", "dcp", "tensordict", "sharded", or ""
    imports: tuple[str, ...] = ()  # imported by the fork server before it forks

    @property
    def group(self) -> str:
        return TORCH_GROUP if any(m.split(".")[0] in ("torch", "tensordict") for m in self.imports) else LIGHT_GROUP


def _each(items: Iterator[Callable[[], None]]) -> None:
    """Run every step, as a program trying each member would; re-raise the first failure."""
    first: BaseException | None = None
    for step in items:
        try:
            step()
        except Exception as e:  # noqa: BLE001 - the next member is still read
            first = first or e
    if first is not None:
        raise first


def _bytes(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def _stream(load: Callable[[io.BufferedReader], object], path: str) -> None:
    """Pickle after pickle until the end, as a reader of a pickle stream does."""
    with open(path, "rb") as f:
        while f.peek(1):
            load(f)


def pickle_c_file(path: str) -> None:
    with open(path, "rb") as f:
        pickle.load(f)


def pickle_c_stream(path: str) -> None:
    _stream(pickle.load, path)


def pickle_py_file(path: str) -> None:
    with open(path, "rb") as f:
        pickle._Unpickler(f).load()


def pickle_py_stream(path: str) -> None:
    _stream(lambda f: pickle._Unpickler(f).load(), path)


def pickle_c_bytes(path: str) -> None:
    pickle.loads(_bytes(path))


def pickle_py_bytes(path: str) -> None:
    pickle._loads(_bytes(path))


def torch_unsafe_path(path: str) -> None:
    import torch

    torch.load(path, weights_only=False)


def torch_unsafe_bytesio(path: str) -> None:
    import torch

    torch.load(io.BytesIO(_bytes(path)), weights_only=False)


def torch_weights_only(path: str) -> None:
    import torch

    torch.load(path)


def numpy_load(path: str) -> None:
    import numpy

    loaded = numpy.load(path, allow_pickle=True)
    if isinstance(loaded, numpy.lib.npyio.NpzFile):
        with loaded:
            _each(lambda key=key: loaded[key] for key in loaded.files)


def joblib_load(path: str) -> None:
    import joblib

    joblib.load(path)


def _pandas(name: str) -> Callable[[str], None]:
    def read(path: str) -> None:
        import pandas

        # The sandbox's working folder is fresh: the link's name is all pandas sees.
        os.symlink(os.path.abspath(path), name)
        try:
            pandas.read_pickle(name)
        finally:
            os.unlink(name)  # the next file of a folder gets the name

    return read


def tar_members(path: str) -> None:
    with tarfile.open(path) as tar:
        def member(m: tarfile.TarInfo) -> Callable[[], None]:
            def run() -> None:
                f = tar.extractfile(m)
                if f is not None:
                    pickle.load(f)
            return run

        _each(member(m) for m in tar.getmembers())


def zip_members(path: str) -> None:
    with zipfile.ZipFile(path) as archive:
        def member(info: zipfile.ZipInfo) -> Callable[[], None]:
            def run() -> None:
                with archive.open(info) as f:
                    pickle.load(f)
            return run

        _each(member(info) for info in archive.infolist())


def _decompressed(decompress: Callable[[bytes], bytes]) -> Callable[[str], None]:
    def read(path: str) -> None:
        pickle.loads(decompress(_bytes(path)))

    return read


def _zstd(data: bytes) -> bytes:
    import zstandard

    reader = zstandard.ZstdDecompressor().stream_reader(io.BytesIO(data), read_across_frames=True)
    return reader.read()


def sevenzip_members(path: str) -> None:
    import py7zr

    out = tempfile.mkdtemp(dir=".")
    with py7zr.SevenZipFile(path) as archive:
        archive.extractall(path=out)
    files = [os.path.join(root, n) for root, _, names in os.walk(out) for n in names]
    _each((lambda p=p: pickle_c_file(p)) for p in sorted(files))


def dcp_to_torch_save(folder: str) -> None:
    from torch.distributed.checkpoint.format_utils import dcp_to_torch_save as convert

    convert(folder, "converted.pt")


def tensordict_load_memmap(folder: str) -> None:
    import tensordict

    tensordict.TensorDict.load_memmap(folder)


def export_load(path: str) -> None:
    import torch

    torch.export.load(path)


def export_module(path: str) -> None:
    """What a program does next with a loaded program: the module it runs (its guards
    and the forward torch generates for it are built here)."""
    import torch

    torch.export.load(path).module()


def hf_sharded(folder: str) -> None:
    import torch

    """Every shard every ``*.index.json`` names, as transformers and accelerate loaded
    ``pytorch_model-*.bin`` shards before torch 2.6 made weights_only the default."""
    indexes = sorted(n for n in os.listdir(folder) if n.endswith(".index.json"))
    if not indexes:
        raise FileNotFoundError("no *.index.json")

    def shards() -> Iterator[Callable[[], None]]:
        for name in indexes:
            with open(os.path.join(folder, name), "rb") as f:
                weight_map = json.load(f)["weight_map"]
            for shard in dict.fromkeys(weight_map.values()):
                yield lambda shard=shard: torch.load(os.path.join(folder, shard), weights_only=False)

    _each(shards())


TORCH = f"torch {version('torch')}"
TORCH_IMPORTS = ("torch",)
EXPORT_IMPORTS = ("torch", "torch.export", "torch._export.serde.serialize", "torch.export.pt2_archive._package",
                  "torch.export._unlift", "sympy")
PANDAS_NAMES = ("x.pkl", "x.gz", "x.bz2", "x.xz", "x.zip", "x.tar", "x.tar.gz", "x.zst")
PANDAS_KINDS = {"x.pkl": "pickle", "x.gz": "gzip", "x.bz2": "bz2", "x.xz": "xz", "x.zip": "zip", "x.tar": "tar",
                "x.tar.gz": "tar", "x.zst": "zstd"}

READERS: list[Reader] = [
    Reader("pickle.load", f"{PY} _pickle (C)", pickle_c_file, frozenset({"pickle"}), stands_for="load"),
    Reader("pickle.load-stream", f"{PY} _pickle (C), to EOF", pickle_c_stream, frozenset({"pickle", "stream"})),
    Reader("pickle._Unpickler", f"{PY} pickle (pure Python)", pickle_py_file, frozenset({"pickle"}),
           stands_for="load"),
    Reader("pickle._Unpickler-stream", f"{PY} pickle (pure Python), to EOF", pickle_py_stream,
           frozenset({"pickle", "stream"})),
    Reader("pickle.loads", f"{PY} _pickle (C), from memory", pickle_c_bytes, frozenset({"pickle"}),
           stands_for="load"),
    Reader("pickle._loads", f"{PY} pickle (pure Python), from memory", pickle_py_bytes, frozenset({"pickle"}),
           stands_for="load"),
    Reader("torch.load", f"{TORCH}, weights_only=False, a path", torch_unsafe_path,
           frozenset({"torch", "legacy"}), stands_for="load", imports=TORCH_IMPORTS),
    Reader("torch.load-bytesio", f"{TORCH}, weights_only=False, io.BytesIO", torch_unsafe_bytesio,
           frozenset({"torch", "legacy"}), stands_for="load", imports=TORCH_IMPORTS),
    Reader("torch.load-weights_only", f"{TORCH}, weights_only=True (the default)", torch_weights_only,
           frozenset({"torch"}), imports=TORCH_IMPORTS),
    Reader("numpy.load", f"numpy {version('numpy')}, allow_pickle=True", numpy_load, frozenset({"npy", "npz"}),
           imports=("numpy",)),
    Reader("joblib.load", f"joblib {version('joblib')}", joblib_load, frozenset({"joblib"}), imports=("joblib",)),
    *(Reader(f"pandas.read_pickle[{n}]", f"pandas {version('pandas')}, compression inferred from {n}",
             _pandas(n), frozenset({PANDAS_KINDS[n]}), imports=("pandas",)) for n in PANDAS_NAMES),
    Reader("tarfile+pickle", f"{PY} tarfile (auto mode), pickle.load of every member", tar_members,
           frozenset({"tar"})),
    Reader("zipfile+pickle", f"{PY} zipfile, pickle.load of every member", zip_members, frozenset({"zip"})),
    Reader("gzip+pickle", f"{PY} gzip.decompress", _decompressed(gzip.decompress), frozenset({"gzip"})),
    Reader("bz2+pickle", f"{PY} bz2.decompress", _decompressed(bz2.decompress), frozenset({"bz2"})),
    Reader("lzma+pickle", f"{PY} lzma.decompress (FORMAT_AUTO)", _decompressed(lzma.decompress),
           frozenset({"xz"})),
    Reader("zlib+pickle", f"{PY} zlib.decompress", _decompressed(zlib.decompress), frozenset({"zlib"})),
    Reader("zstandard+pickle", f"zstandard {version('zstandard')}, across frames", _decompressed(_zstd),
           frozenset({"zstd"}), imports=("zstandard",)),
    Reader("py7zr+pickle", f"py7zr {version('py7zr')}, extractall then pickle.load", sevenzip_members,
           frozenset({"7z"}), imports=("py7zr",)),
    Reader("dcp_to_torch_save", f"{TORCH} torch.distributed.checkpoint.format_utils", dcp_to_torch_save,
           frozenset({"dcp"}), folder=True, stands_for="dcp",
           imports=("torch", "torch.distributed.checkpoint.format_utils")),
    Reader("TensorDict.load_memmap", f"tensordict {version('tensordict')}", tensordict_load_memmap,
           frozenset({"tensordict"}), folder=True, stands_for="tensordict", imports=("torch", "tensordict")),
    Reader("torch.export.load", f"{TORCH} torch.export.load (a .pt2)", export_load, frozenset({"export"}),
           stands_for="export", imports=EXPORT_IMPORTS),
    Reader("torch.export.load().module()", f"{TORCH} torch.export.load, then ExportedProgram.module()",
           export_module, frozenset({"export"}), stands_for="export", imports=EXPORT_IMPORTS),
    Reader("hf-sharded-torch.load", f"{TORCH}, weights_only=False, each shard an *.index.json names", hf_sharded,
           frozenset({"sharded"}), folder=True, stands_for="sharded", imports=TORCH_IMPORTS),
]

BY_NAME = {r.name: r for r in READERS}
BYPASS = "torch.load-weights_only"
