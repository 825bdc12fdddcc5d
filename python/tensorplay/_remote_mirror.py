"""A remote checkpoint held locally as a sparse file: the object's size, with
only the bytes a reader needs written at their offsets (the rest are holes,
which take no disk and read as zeros). ``tensorplay.inspect(url)`` needs the
zip's directory, its pickles and every entry's local header; ``tensorplay.load(url)``
the storages' records too. Every range comes from the same object (the reader
pins it: an object that changes meanwhile is a RemoteError), and the local
readers then judge the mirror as they judge any file: what was not fetched is
never read as data, only zeros where a reader would find nothing it needs.

A file ranges cannot settle (not a zip) is fetched whole, within ``max_file_size``.
"""
from __future__ import annotations

import contextlib
import os
import struct
import tempfile
import zipfile

from . import _core, _http, _limits, _remote

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterator

_LOCAL_HEADER = 30
_LOCAL_SIGNATURE = b"PK\x03\x04"


@contextlib.contextmanager
def mirrored(url: str, *, storages: bool, max_file_size: int | None = None,
             client: _http.Client | None = None) -> Iterator[str]:
    """The path of a sparse local copy of the file at ``url`` holding what
    ``inspect`` reads (and, with ``storages``, what ``load`` reads), for the
    life of the context; RemoteError when it cannot be read as asked."""
    from . import _remote_folders

    if _remote_folders.is_folder(url):
        raise ValueError(f"{url} names a folder: a URL is loaded or inspected one file at a time")
    own = client is None
    readers = _remote.Readers(client or _http.Client())
    try:
        with tempfile.TemporaryDirectory(prefix="tensorplay-remote-") as folder:
            path = os.path.join(folder, _remote.name_of(url) or "checkpoint")
            _fill(url, readers, path, storages, max_file_size)
            yield path
    finally:
        if own:
            readers.client.close()


# Storages are fetched in waves of at most this many bytes: what a wave holds
# in memory before it is written out.
_WAVE_BYTES = 256 << 20


def _fill(url: str, readers: _remote.Readers, path: str, storages: bool, max_file_size: int | None) -> None:
    read = _remote.RemoteRead(None)
    limits = _limits.merged(None)
    name = _remote.name_of(url)
    reader, target, also_allowed = readers.reader_for(url)
    identity, held = reader.open(target, tail=_core.FIRST_TAIL, head=_core.FIRST_BLOCK, also_allowed=also_allowed)
    with open(path, "wb") as f:
        f.truncate(identity.size)
        f.seek(0)

        def fetch(ranges: list[tuple[int, int]]) -> list[tuple[int, bytes]]:
            ranges = [(offset, n) for offset, n in ranges if n > 0]
            if not ranges:
                return []
            if max_file_size is not None and read.bytes_read + sum(n for _, n in ranges) > max_file_size:
                raise _http.RemoteError(f"{url}: reading it takes over the {max_file_size}-byte limit on a "
                                        "download")
            bodies = reader.read(identity, ranges)
            read.took(bodies)
            for (offset, _), body in zip(ranges, bodies):
                f.seek(offset)
                f.write(body)
            return [(offset, body) for (offset, _), body in zip(ranges, bodies)]

        for offset, body in held:
            f.seek(offset)
            f.write(body)
        # The directory and the pickles, as the pickles-only scan finds them.
        for _ in range(_remote.MAX_WAVES):
            kind, value = _core.scan_waves(identity.size, held, name, [], limits, False)
            if kind != "fetch":
                break
            held += fetch(value)
        else:
            kind = "whole"
        if kind == "whole":
            fetch([(0, identity.size)])
            return
        f.flush()
        with zipfile.ZipFile(path) as archive:
            entries = archive.infolist()
        # Every entry's local header: its fixed part, then its name and extra field.
        fixed = dict(fetch([(e.header_offset, _LOCAL_HEADER) for e in entries]))
        lengths = []
        for e in entries:
            header = fixed.get(e.header_offset, b"")
            if len(header) < _LOCAL_HEADER or header[:4] != _LOCAL_SIGNATURE:
                raise _core.error("malformed_archive", f"{url}: entry {e.filename!r} has no local header",
                                  offset=e.header_offset)
            name_len, extra_len = struct.unpack_from("<HH", header, 26)
            lengths.append(name_len + extra_len)
        fetch([(e.header_offset + _LOCAL_HEADER, n) for e, n in zip(entries, lengths)])
        first = entries[0].filename.encode() if entries else b""
        # The records a load reads besides the storages (version, byteorder...),
        # and with ``storages``, those too.
        records = [(e.header_offset + _LOCAL_HEADER + n, e.compress_size) for e, n in zip(entries, lengths)
                   if storages or not _core.is_storage_record(first, e.filename.encode())]
        while records:
            wave, total = [], 0
            while records and (not wave or total + records[0][1] <= _WAVE_BYTES):
                wave.append(records.pop(0))
                total += wave[-1][1]
            fetch(wave)
