"""A byte-level zip writer, for archives ordinary writers never make: names with
NUL bytes, duplicate names, local headers that disagree with the directory,
data descriptors, ZIP64 records, bytes before the first header, extra end records."""
from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass

LOCAL, CENTRAL, END, END64, LOCATOR64, DESCRIPTOR = (b"PK\x03\x04", b"PK\x01\x02", b"PK\x05\x06", b"PK\x06\x06",
                                                     b"PK\x06\x07", b"PK\x07\x08")
UTF8 = 0x800


def deflate(data: bytes) -> bytes:
    c = zlib.compressobj(6, zlib.DEFLATED, -15)
    return c.compress(data) + c.flush()


@dataclass
class Entry:
    name: bytes
    data: bytes
    method: int = 0  # 0 stored, 8 deflated
    flags: int = 0
    local_name: bytes | None = None  # what the local header says, when it disagrees
    local_data: bytes | None = None  # what sits after the local header, when it disagrees
    extra: bytes = b""
    descriptor: bool = False
    zip64: bool = False
    crc: int | None = None
    in_directory: bool = True
    align: int = 0  # pad the local extra field so the data starts on this boundary (torch: 64)


def _payload(entry: Entry) -> tuple[bytes, int, int]:
    raw = entry.data
    stored = deflate(raw) if entry.method == 8 else raw
    crc = zlib.crc32(raw) if entry.crc is None else entry.crc
    return stored, crc, len(raw)


def build(entries: list[Entry], prefix: bytes = b"", comment: bytes = b"", trailing: bytes = b"",
          extra_end: bool = False) -> bytes:
    out = bytearray(prefix)
    directory = bytearray()
    count = 0
    for e in entries:
        stored, crc, size = _payload(e)
        if e.local_data is not None:
            stored = e.local_data
        offset = len(out)
        flags = e.flags | (0x08 if e.descriptor else 0)
        lname = e.name if e.local_name is None else e.local_name
        extra = e.extra
        if e.zip64:
            extra = struct.pack("<HHQQ", 1, 16, size, len(stored)) + extra
        if e.align:
            head = 30 + len(lname) + len(extra)
            padding = -(len(out) + head + 4) % e.align
            extra = extra + struct.pack("<HH", 0x4246, padding) + b"Z" * padding
        csize, usize = (0xFFFFFFFF, 0xFFFFFFFF) if e.zip64 else (len(stored), size)
        lcrc, lcs, lus = (0, 0, 0) if e.descriptor else (crc, csize, usize)
        out += LOCAL + struct.pack("<HHHHHIIIHH", 45 if e.zip64 else 20, flags, e.method, 0, 0x21, lcrc, lcs, lus,
                                   len(lname), len(extra)) + lname + extra + stored
        if e.descriptor:
            out += DESCRIPTOR + struct.pack("<III", crc, len(stored), size)
        if not e.in_directory:
            continue
        count += 1
        cextra = struct.pack("<HHQQQ", 1, 24, size, len(stored), offset) if e.zip64 else b""
        coffset = 0xFFFFFFFF if e.zip64 else offset
        directory += CENTRAL + struct.pack("<HHHHHHIIIHHHHHII", 45 if e.zip64 else 20, 45 if e.zip64 else 20, flags,
                                           e.method, 0, 0x21, crc, csize, usize, len(e.name), len(cextra), 0, 0, 0,
                                           0, coffset) + e.name + cextra
    if extra_end:
        # An end record that names nothing, before the directory: readers that
        # search from the front (or stop at the first signature) see it.
        out += END + struct.pack("<HHHHIIH", 0, 0, 0, 0, 0, 0, 0)
    start = len(out)
    out += directory
    if any(e.zip64 for e in entries):
        end64 = len(out)
        out += END64 + struct.pack("<QHHIIQQQQ", 44, 45, 45, 0, 0, count, count, len(directory), start)
        out += LOCATOR64 + struct.pack("<IQI", 0, end64, 1)
    record = END + struct.pack("<HHHHIIH", 0, 0, count, count, len(directory), start, len(comment)) + comment
    out += record + trailing
    return bytes(out)
