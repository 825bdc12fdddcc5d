"""Where a TensorDict tree's bytes come from: a folder opened without
following a symbolic link, or a ``.tdz`` archive (and a folder inside one)."""
from __future__ import annotations

import errno
import mmap
import os
import stat
from typing import Any

from .. import _core, _limits
from .layout import Leaf, is_component, limit_error, malformed, not_an_archive, unsafe, unsupported

O_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)


O_DIRECTORY = getattr(os, "O_DIRECTORY", 0)


O_EXTRA = getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0) | getattr(os, "O_CLOEXEC", 0)


class Folder:
    """One directory of the saved tree, opened relative to its parent's descriptor:
    no component below the prefix is ever a symbolic link, and only regular files
    are opened."""

    def __init__(self, fd: int, where: str, mode: str | None):
        self.fd = fd
        self.where = where
        #: "r", "r+", or None: each file shared when the process can write it.
        self.mode = mode

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def path(self, name: str) -> str:
        return f"{self.where}/{name}"

    def _lstat(self, name: str) -> os.stat_result | None:
        if not is_component(name):
            raise unsafe(self.path(name), "not a single file name")
        try:
            return os.stat(name, dir_fd=self.fd, follow_symlinks=False)
        except FileNotFoundError:
            return None
        except OSError as e:
            raise malformed(self.path(name), f"cannot stat: {e}") from None

    def _check_kind(self, name: str, st: os.stat_result, want_dir: bool) -> None:
        if stat.S_ISLNK(st.st_mode):
            raise unsafe(self.path(name), "a symbolic link; links are never followed")
        if want_dir and not stat.S_ISDIR(st.st_mode):
            raise malformed(self.path(name), "not a directory")
        if not want_dir and not stat.S_ISREG(st.st_mode):
            raise unsafe(self.path(name), "not a regular file")

    def has(self, name: str) -> bool:
        return self._lstat(name) is not None

    def child(self, name: str) -> Folder:
        st = self._lstat(name)
        if st is None:
            raise malformed(self.path(name), "missing folder")
        self._check_kind(name, st, want_dir=True)
        flags = os.O_RDONLY | O_DIRECTORY | O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
        try:
            fd = os.open(name, flags, dir_fd=self.fd)
        except OSError as e:
            raise self._open_error(name, e) from None
        return Folder(fd, self.path(name), self.mode)

    def open_file(self, name: str, write: bool = False) -> tuple[int, int]:
        """A descriptor of the regular file ``name`` and its size."""
        st = self._lstat(name)
        if st is None:
            raise malformed(self.path(name), "missing file")
        self._check_kind(name, st, want_dir=False)
        flags = (os.O_RDWR if write else os.O_RDONLY) | O_NOFOLLOW | O_EXTRA
        try:
            fd = os.open(name, flags, dir_fd=self.fd)
        except OSError as e:
            if write and e.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
                raise PermissionError(e.errno, f"cannot open for writing: {e.strerror}", self.path(name)) from None
            raise self._open_error(name, e) from None
        opened = os.fstat(fd)
        if not stat.S_ISREG(opened.st_mode) or (opened.st_dev, opened.st_ino) != (st.st_dev, st.st_ino):
            os.close(fd)
            raise unsafe(self.path(name), "the file changed while it was being opened")
        return fd, opened.st_size

    def _open_error(self, name: str, e: OSError) -> Exception:
        if e.errno == errno.ELOOP:
            return unsafe(self.path(name), "a symbolic link; links are never followed")
        return malformed(self.path(name), f"cannot open: {e}")

    def read(self, name: str, limit: int) -> bytes | None:
        """The whole small file ``name`` (meta.json, a sidecar), or None if absent."""
        if not self.has(name):
            return None
        fd, size = self.open_file(name)
        try:
            if size > limit:
                raise limit_error(self.path(name), "max_pickle_bytes", limit)
            chunks, got = [], 0
            while got < size:
                chunk = os.pread(fd, size - got, got)
                if not chunk:
                    break
                chunks.append(chunk)
                got += len(chunk)
            return b"".join(chunks)
        finally:
            os.close(fd)

    def leaf(self, leaf: Leaf, name: str, nbytes: int, meta_only: bool) -> None:
        """Check the leaf file's size and map it: shared with "r+" (and, with mode
        None, when the process can write the file), else copy-on-write."""
        shared = not meta_only and self.mode != "r"
        try:
            fd, size = self.open_file(name, write=shared)
        except PermissionError:
            if self.mode == "r+":
                raise
            shared = False
            fd, size = self.open_file(name)
        try:
            if size < nbytes:
                raise malformed(self.path(name), f"the file has {size} bytes, meta.json declares {nbytes}")
            if meta_only or nbytes == 0:
                return
            leaf.buffer = mmap.mmap(fd, nbytes, access=mmap.ACCESS_WRITE if shared else mmap.ACCESS_COPY)
        finally:
            os.close(fd)


class Archive:
    """A zip archive of the tree: one mapping of the whole file, its strict index,
    and the entries still to be decompressed (all at once, in parallel)."""

    def __init__(self, path: str, fd: int, writable: bool, limits: dict[str, int] | None):
        self.where = path
        self.fd = fd
        self.writable = writable
        self.limits = limits
        head = os.pread(fd, 4, 0)
        if head not in (b"PK\x03\x04", b"PK\x05\x06"):
            raise not_an_archive(path)
        self.entries: dict[str, dict] = {}
        self.dirs: set[str] = {""}
        for entry in _core.zip_entries(fd, limits=limits):
            try:
                name = entry["name"].decode("utf-8")
            except UnicodeDecodeError:
                continue  # no key encodes to it
            self.entries[name] = entry
            parts = name.split("/")
            for i in range(1, len(parts)):
                self.dirs.add("/".join(parts[:i]) + "/")
        access = mmap.ACCESS_WRITE if writable else mmap.ACCESS_COPY
        self.map = mmap.mmap(fd, 0, access=access)
        self.pending: list[tuple[Leaf, tuple]] = []

    def request(self, entry: dict, name: str) -> tuple:
        return (entry["data_offset"], entry["compressed_size"], entry["size"], entry["method"], entry["flags"],
                f"{self.where}!{name}")

    def inflate(self, requests: list[tuple], threads: int) -> list[Any]:
        return _core.inflate_entries(self.fd, requests, max(threads, 1), limits=_limits.merged(None))

    def finish(self, threads: int) -> None:
        """Decompress (or copy) every pending leaf, in parallel with the GIL released."""
        if not self.pending:
            return
        buffers = self.inflate([request for _, request in self.pending], threads)
        for (leaf, _), buffer in zip(self.pending, buffers, strict=True):
            leaf.buffer, leaf.offset = buffer, 0
        self.pending.clear()


class ArchiveFolder:
    """A folder inside an archive: the entries under ``prefix``."""

    def __init__(self, archive: Archive, prefix: str):
        self.archive = archive
        self.prefix = prefix
        self.where = f"{archive.where}!{prefix.rstrip('/')}" if prefix else archive.where
        self.writable = archive.writable

    def path(self, name: str) -> str:
        return f"{self.archive.where}!{self.prefix}{name}"

    def has(self, name: str) -> bool:
        return self.prefix + name in self.archive.entries or f"{self.prefix}{name}/" in self.archive.dirs

    def child(self, name: str) -> ArchiveFolder:
        if f"{self.prefix}{name}/" not in self.archive.dirs:
            raise malformed(self.path(name), "missing folder")
        return ArchiveFolder(self.archive, f"{self.prefix}{name}/")

    def close(self) -> None:
        pass

    def read(self, name: str, limit: int) -> bytes | None:
        entry = self.archive.entries.get(self.prefix + name)
        if entry is None:
            return None
        if entry["size"] > limit:
            raise limit_error(self.path(name), "max_pickle_bytes", limit)
        if entry["method"] == 0:
            start = entry["data_offset"]
            return bytes(self.archive.map[start:start + entry["size"]])
        (data,) = self.archive.inflate([self.archive.request(entry, self.prefix + name)], 1)
        return data.tobytes()

    def leaf(self, leaf: Leaf, name: str, nbytes: int, meta_only: bool) -> None:
        """Check the entry's size; view it in the mapping when it is stored and aligned,
        else queue it to be decompressed (or copied)."""
        entry = self.archive.entries.get(self.prefix + name)
        if entry is None:
            raise malformed(self.path(name), "missing entry")
        if entry["size"] != nbytes:
            raise malformed(self.path(name), f"the entry has {entry['size']} bytes, meta.json declares {nbytes}")
        in_place = entry["method"] == 0 and entry["data_offset"] % min(leaf.dtype.itemsize, 16) == 0
        if self.writable and not in_place:
            why = "compressed" if entry["method"] else "not aligned for its dtype"
            raise unsupported(self.path(name), f"mode='r+' needs stored, aligned entries; this one is {why}")
        if meta_only or nbytes == 0:
            return
        if in_place:
            leaf.buffer, leaf.offset = self.archive.map, entry["data_offset"]
        else:
            self.archive.pending.append((leaf, self.archive.request(entry, self.prefix + name)))
