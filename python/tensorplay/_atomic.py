"""Replacing a file so that no reader ever sees it half-written and a failure
leaves the old file as it was: ``save`` and ``convert`` write through this.

Where a rename cannot stand in for the write ``torch.save`` makes (``open(path,
"wb")``), the write happens in place, as torch's does: a device, FIFO or
``/dev/stdout``, a file in a folder the user may not create files in, a file
bind-mounted on its own. A file the user may not write is refused, as ``open``
refuses it.
"""
from __future__ import annotations

import contextlib
import errno
import os
import shutil
import stat
import tempfile
from collections.abc import Iterator


@contextlib.contextmanager
def replacing(path: str | os.PathLike[str]) -> Iterator[str]:
    """A path to write the new file to: a temporary file in the target's folder
    that is fsynced and renamed over ``path`` when the block ends cleanly, and
    removed, leaving ``path`` untouched, when it raises. Where the write must
    happen in place (see the module), the target itself.

    A symbolic link is followed, as ``open(path, "wb")`` follows it: the file it
    points to gets the new contents and the link stays a link. The file keeps its
    permission bits and, where the process may set it, its owner. Unlike a write
    in place, the rename gives the path a new inode: another hard link to the old
    file keeps the old contents."""
    target = os.path.realpath(path)
    try:
        existing = os.stat(path)
    except FileNotFoundError:
        existing = None
    if existing is not None and not stat.S_ISREG(existing.st_mode):
        yield os.fspath(path)  # a device, FIFO or terminal: written through, as open() writes
        return
    if existing is not None and not os.access(target, os.W_OK):
        raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), os.fspath(path))
    directory = os.path.dirname(target)
    if not os.path.isdir(directory):
        raise RuntimeError(f"Parent directory {os.path.dirname(os.fspath(path)) or '.'} does not exist.")
    try:
        fd, tmp = tempfile.mkstemp(prefix=".tensorplay-", suffix=".partial", dir=directory)
    except PermissionError:
        if existing is None:
            raise
        yield target  # a writable file in a folder we may not add to: in place, as torch writes it
        return
    os.close(fd)
    try:
        yield tmp
        _sync_file(tmp)
        _take_over_metadata(tmp, existing)
        _rename_over(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    _sync_folder(directory)


def _take_over_metadata(tmp: str, existing: os.stat_result | None) -> None:
    """The old file's permission bits and owner (a new one gets what ``open``
    would give it); an owner the process may not set stays the process's."""
    if existing is None:
        os.chmod(tmp, 0o666 & ~_umask())
        return
    os.chmod(tmp, stat.S_IMODE(existing.st_mode))
    if (existing.st_uid, existing.st_gid) != (os.geteuid(), os.getegid()):
        with contextlib.suppress(PermissionError):
            os.chown(tmp, existing.st_uid, existing.st_gid)
            os.chmod(tmp, stat.S_IMODE(existing.st_mode))  # chown clears set-id bits


def _rename_over(tmp: str, target: str) -> None:
    """The rename; a target that is a mount point of its own (a file bind-mounted
    into a container) cannot be renamed over, so it gets the bytes in place."""
    try:
        os.replace(tmp, target)
    except OSError as e:
        if e.errno not in (errno.EBUSY, errno.EXDEV):
            raise
        shutil.copyfile(tmp, target)
        _sync_file(target)
        os.unlink(tmp)


def _sync_file(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _sync_folder(directory: str) -> None:
    """Make the rename durable; not every file system lets a folder be synced."""
    with contextlib.suppress(OSError):
        _sync_file(directory)


def _umask() -> int:
    """The process's umask, read without changing it where Linux reports it:
    ``os.umask`` can only be read by setting it, which for that moment gives
    files other threads create the wrong permissions."""
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask
