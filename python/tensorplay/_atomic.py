"""Replacing a file so that no reader ever sees it half-written and a failure
leaves the old file as it was: ``save`` and ``convert`` write through this."""
from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator


@contextlib.contextmanager
def replacing(path: str | os.PathLike[str]) -> Iterator[str]:
    """A temporary path in the target's folder to write the new file to. When the
    block ends cleanly the file is fsynced and renamed over ``path``; when it
    raises, the temporary file is removed and ``path`` is untouched.

    A symbolic link is followed, as ``open(path, "wb")`` follows it: the file it
    points to gets the new contents and the link stays a link. The file keeps
    its permission bits (a new one gets what ``open`` would give it). Unlike a
    write in place, the rename gives the path a new inode: another hard link to
    the old file keeps the old contents."""
    target = os.path.realpath(path)
    directory = os.path.dirname(target)
    if not os.path.isdir(directory):
        raise RuntimeError(f"Parent directory {os.path.dirname(os.fspath(path)) or '.'} does not exist.")
    fd, tmp = tempfile.mkstemp(prefix=".tensorplay-", suffix=".partial", dir=directory)
    os.close(fd)
    try:
        yield tmp
        fd = os.open(tmp, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        os.chmod(tmp, os.stat(target).st_mode & 0o7777 if os.path.exists(target) else 0o666 & ~_umask())
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    _fsync_folder(directory)


def _fsync_folder(directory: str) -> None:
    """Make the rename itself durable; not every file system lets a folder be synced."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


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
