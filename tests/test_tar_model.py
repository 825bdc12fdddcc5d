"""The scanner's model of CPython 3.11.7's tarfile (src/archive/tar) held to
tarfile itself: thousands of archives, written by tarfile and GNU tar, built by
hand for every rule the model has, and mutated at random, each read by both.
Any difference is a bug in the model. Then the legacy torch polyglot: a file
torch.load reads as a tar (and runs) while its bytes are also a valid legacy
stream, which tensorplay refuses and the scanner never calls clean."""
from __future__ import annotations

import io
import os
import random
import shutil
import struct
import subprocess
import sys
import tarfile
import textwrap

import pytest
import tensorplay
from conftest import has_torch
from tensorplay import _core

needs_torch = pytest.mark.skipif(not has_torch(), reason="torch not installed")

# The model clamps numbers past any file's size, keeping their remainders
# modulo 16 KiB (copyfileobj's buffer); so does the comparison.
HUGE = 1 << 100
# Bytes either side may make for one member (a sparse file's holes), and members read.
CAP = 1 << 16
MAX_MEMBERS = 64
SUPPORTED = set(tarfile.SUPPORTED_TYPES)


def clamp(n: int) -> int:
    if abs(n) <= HUGE:
        return n
    return (HUGE + abs(n) % 16384) * (1 if n > 0 else -1)


# --- the oracle -------------------------------------------------------------------

class _Capped(Exception):
    """The file extract() writes would pass CAP."""


class _CappedFile:
    """The real file makefile() writes, refusing to seek past CAP (a sparse
    member may seek its target to any offset, and truncate it to any size);
    what it writes is no more than the archive holds."""

    def __init__(self, path: str, mode: str):
        self.file = open(path, mode)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.file.close()

    def seek(self, position: int, whence: int = 0) -> int:
        if position > CAP:
            raise _Capped
        return self.file.seek(position, whence)

    def write(self, data: bytes) -> int:
        return self.file.write(data)

    def truncate(self, size: int | None = None) -> int:
        return self.file.truncate(size)


def _outcome(read) -> bytes | str:
    try:
        return read()
    except _Capped:
        return "limit"
    except Exception as e:  # noqa: BLE001 - the exception's class is the answer
        return type(e).__name__


def _extracted(tar: tarfile.TarFile, member: tarfile.TarInfo, target: str) -> bytes | str:
    """The bytes extract() writes for a member with data (it calls makefile)."""
    def make() -> bytes:
        original = tarfile.bltn_open
        tarfile.bltn_open = _CappedFile
        try:
            tar.makefile(member, target)
        finally:
            tarfile.bltn_open = original
        with open(target, "rb") as f:
            return f.read()
    return _outcome(make)


def tarfile_reading(data: bytes, target: str):
    """What CPython's tarfile gives, in _tar_model's shape: (opens, members, error)."""
    try:
        tar = tarfile.open(fileobj=io.BytesIO(data), mode="r:")
    except Exception as e:  # noqa: BLE001
        return False, [], type(e).__name__
    members, error = [], None
    try:
        while (member := tar.next()) is not None:
            members.append(member)
            if len(members) > MAX_MEMBERS:
                members.pop()
                error = "limit"
                break
    except Exception as e:  # noqa: BLE001
        error = type(e).__name__
    rows = []
    for m in members:
        file = extracted = None
        if m.isreg() or m.type not in SUPPORTED:
            if m.sparse is not None and m.size > CAP:
                file = "limit"
            else:
                file = _outcome(lambda m=m: tar.extractfile(m).read())
            extracted = _extracted(tar, m, target)
        sparse = None if m.sparse is None else [(clamp(o), clamp(n)) for o, n in m.sparse]
        rows.append((m.name.encode("utf-8", "surrogateescape"), m.linkname.encode("utf-8", "surrogateescape"),
                     m.type, m.offset, m.offset_data, clamp(m.size), sparse, file, extracted))
    return True, rows, error


def model_reading(data: bytes):
    opens, members, error = _core._tar_model(data, max_members=MAX_MEMBERS, max_content=CAP)
    return opens, [tuple(m) for m in members], error


def differences(data: bytes, target: str) -> str | None:
    """None when the model reads data as tarfile does, else what differs."""
    model = model_reading(data)
    real = tarfile_reading(data, target)
    m_opens, m_members, m_error = model
    r_opens, r_members, r_error = real
    if m_error is not None and m_error.startswith("limit"):
        # The model stopped where tarfile goes on (or recurses too deep for
        # its caller): what it read must be what tarfile read first.
        if m_members != r_members[:len(m_members)]:
            return f"members before the model's limit differ:\n model {m_members}\n real  {r_members}"
        return None
    if m_opens != r_opens or m_error != r_error:
        return f"open/error differ: model {(m_opens, m_error)}, tarfile {(r_opens, r_error)}"
    if len(m_members) != len(r_members):
        return f"member counts differ:\n model {m_members}\n real  {r_members}"
    for mm, rm in zip(m_members, r_members):
        for field, a, b in zip(("name", "linkname", "type", "offset", "offset_data", "size", "sparse"), mm, rm):
            if a != b:
                return f"{field} differs: model {a!r}, tarfile {b!r}\n model {mm}\n real  {rm}"
        for field, a, b in (("extractfile", mm[7], rm[7]), ("extract", mm[8], rm[8])):
            if a == b:
                continue
            if isinstance(a, str) and a.startswith("limit") and _past_cap(rm, field):
                continue
            return f"{field} differs: model {_short(a)}, tarfile {_short(b)}\n member {mm[:7]}"
    return None


def _past_cap(row, field: str) -> bool:
    """Whether a member could make more than CAP bytes: only then may the model stop."""
    size, sparse = row[5], row[6]
    if sparse is None:
        return False
    if field == "extractfile":
        return size > CAP
    return size > CAP or any(o + (n if n >= 0 else n % 16384) > CAP for o, n in sparse)


def _short(value) -> str:
    if not isinstance(value, bytes) or len(value) <= 64:
        return repr(value)
    return f"{value[:64]!r}... ({len(value)} bytes)"


# --- archives by hand -------------------------------------------------------------

def octal(n: int, width: int) -> bytes:
    return b"%0*o\0" % (width - 1, n)


def checksum(block: bytearray | bytes, signed: bool = False) -> int:
    fmt = "148b8x356b" if signed else "148B8x356B"
    return 256 + sum(struct.unpack_from(fmt, bytes(block)))


def seal(block: bytearray, signed: bool = False, spelling: bytes | None = None) -> bytes:
    """Set the checksum field (as GNU tar writes it unless spelled otherwise)."""
    block[148:156] = b" " * 8
    total = checksum(block, signed)
    block[148:156] = (spelling % total if spelling else b"%06o\0 " % total).ljust(8, b"\0")[:8]
    return bytes(block)


def fit(value: bytes, width: int) -> bytes:
    return value.ljust(width, b"\0")[:width]


def header(name: bytes = b"f", size: int = 0, kind: bytes = b"0", *, size_field: bytes | None = None,
           linkname: bytes = b"", magic: bytes = b"ustar\x0000", prefix: bytes = b"",
           fields: dict[int, bytes] | None = None, signed: bool = False, spelling: bytes | None = None) -> bytes:
    block = bytearray(512)
    block[0:100] = name[:100].ljust(100, b"\0")
    block[100:108] = b"0000644\0"
    block[108:116] = b"0001750\0"
    block[116:124] = b"0001750\0"
    block[124:136] = fit(size_field, 12) if size_field is not None else octal(size, 12)
    block[136:148] = b"14400000000\0"
    block[156:157] = kind
    block[157:257] = linkname[:100].ljust(100, b"\0")
    block[257:265] = magic.ljust(8, b"\0")[:8]
    block[345:500] = prefix[:155].ljust(155, b"\0")
    for at, value in (fields or {}).items():
        block[at:at + len(value)] = value
    assert len(block) == 512
    return seal(block, signed, spelling)


def padded(data: bytes) -> bytes:
    return data + b"\0" * (-len(data) % 512)


def member(name: bytes, body: bytes = b"", kind: bytes = b"0", **kw) -> bytes:
    return header(name, len(body), kind, **kw) + padded(body)


def end(data: bytes) -> bytes:
    return data + b"\0" * 1024


def record(keyword: bytes, value: bytes) -> bytes:
    body = b" " + keyword + b"=" + value + b"\n"
    n = len(body) + 1
    while len(b"%d" % n) + len(body) != n:
        n += 1
    return b"%d" % n + body


def pax(records: bytes, kind: bytes = b"x", name: bytes = b"././@PaxHeader", **kw) -> bytes:
    return header(name, len(records), kind, **kw) + padded(records)


def gnu_long(text: bytes, kind: bytes = b"L", size: int | None = None) -> bytes:
    return header(b"././@LongLink", len(text) if size is None else size, kind) + padded(text)


def sparse_struct(offset: int, numbytes: int) -> bytes:
    return octal(offset, 12) + octal(numbytes, 12)


def old_sparse(name: bytes, pieces: list[tuple[int, int]], real_size: int, data: bytes,
               extension: list[list[tuple[int, int]]] | None = None, cut_extension: int | None = None) -> bytes:
    """An old GNU sparse member: four pieces in its header, more in extension blocks."""
    structs = b"".join(sparse_struct(o, n) for o, n in pieces[:4]).ljust(96, b"\0")
    fields = {386: structs, 482: b"\1" if extension else b"\0", 483: octal(real_size, 12)}
    out = header(name, len(data), b"S", magic=b"ustar  \0", fields=fields)
    for i, block_pieces in enumerate(extension or []):
        block = bytearray(512)
        block[0:24 * len(block_pieces)] = b"".join(sparse_struct(o, n) for o, n in block_pieces)
        block[504] = 1 if i + 1 < len(extension) else 0
        out += bytes(block)
    if cut_extension is not None:
        return out[:len(out) - 512 + cut_extension]
    return out + padded(data)


PAYLOAD = b"cbuiltins\nexec\n(Vopen('tar_payload_ran','w').close()\ntR."

SIZE_SPELLINGS = [b"00000000012\0", b"12\0", b" 12 \0", b"  +12\0", b"0o12\0", b"0O1_2\0", b"1_2\0", b"1__2\0",
                  b"12_\0", b"_12\0", b"\x1c12\x1f\0", b"1\x1c2\0", b"-12\0", b"-0o1000\0", b"18\0", b"12\xff\0",
                  b"12\0\xff", b"\0" * 12, b" " * 12, b"\t\n\x0b12\r\0", b"1 2\0", b"12\0 junk",
                  b"\x80" + b"\0" * 10 + b"\x0c", b"\xff" * 12, b"\xff" * 11 + b"\xfe", b"\x80" + b"\xff" * 11,
                  b"\x80\0\0\0\0\0\0\0\0\0\x04\0", b"077777777777", b"777777777777", b"0o7777777777"]
NUMBER_SPELLINGS = [b"0000644\0", b"644\0", b"+644 \0", b"-1\0", b"9\0", b"\xff" * 8, b"\x80" + b"\0" * 7,
                    b"\x80" * 8, b"6\x0044", b"\0" * 8, b"0o_644\0", b"0x644\0", b"\xe9\0"]
CHECKSUM_SPELLINGS = [b"%06o\0 ", b"%o", b"%07o", b" %o ", b"+%o", b"0o%o", b"%o\0junk", b"\x1c%o\x1f"]
TYPES = b"0\x0012345677LKSxgXAVMDNZ\xff"


def hand_written() -> list[tuple[str, bytes]]:
    cases: list[tuple[str, bytes]] = []
    add = lambda name, data: cases.append((name, data))  # noqa: E731
    body = b"hello, world\n"
    plain = end(member(b"a.txt", body) + member(b"b.txt", b"x" * 513))
    add("plain", plain)
    add("empty file", b"")
    add("short file", plain[:100])
    add("one block of zeros", b"\0" * 512)
    add("zeros then data", b"\0" * 512 + member(b"after", body))
    add("511 bytes", plain[:511])
    add("no end blocks", member(b"a", body))
    add("one end block", member(b"a", body) + b"\0" * 512)
    add("data cut short", plain[:600])
    add("second header cut short", plain[:1024 + 100])
    add("bad checksum first", b"\1" + plain[1:])
    bad_second = bytearray(plain)
    bad_second[1024] ^= 1
    add("bad checksum second", bytes(bad_second))
    add("V7 header", end(member(b"v7", body, magic=b"")))
    add("V7 directory skips no size", end(header(b"dir/", 1024, b"\0", magic=b"")
                                          + member(b"hidden", PAYLOAD) + member(b"after", body)))
    add("AREGTYPE file", end(member(b"areg", body, b"\0")))
    add("prefix joined", end(member(b"name", body, prefix=b"some/prefix")))
    add("prefix of a directory", end(header(b"d///", 0, b"5", prefix=b"p//")))
    add("prefix of a GNU sparse member is not joined", end(old_sparse(b"s", [(0, 4)], 4, b"abcd")))
    add("signed checksum", end(header("é".encode() * 10, len(body), signed=True) + padded(body)))
    add("unsigned checksum with high bytes", end(header(b"\xff" * 90, len(body)) + padded(body)))
    for i, spelling in enumerate(CHECKSUM_SPELLINGS):
        add(f"checksum spelled {i}", end(header(b"c", len(body), spelling=spelling) + padded(body)))
    for i, spelling in enumerate(SIZE_SPELLINGS):
        add(f"size spelled {i}", end(header(b"s", size_field=spelling) + padded(body) + member(b"next", body)))
        add(f"size spelled {i} second", end(member(b"first", body) + header(b"s", size_field=spelling)
                                            + padded(PAYLOAD) + member(b"next", body)))
    for at in (100, 108, 116, 136, 329, 337):
        for i, spelling in enumerate(NUMBER_SPELLINGS):
            add(f"field {at} spelled {i}", end(header(b"n", len(body), fields={at: fit(spelling, 8)}) + padded(body)))
    for kind in TYPES:
        k = bytes([kind])
        add(f"type {k!r} with size", end(header(b"t", 1024, k, linkname=b"target")
                                         + padded(PAYLOAD) + member(b"in data", body) + member(b"after", body)))
    for name in (b"storages", b"tensors", b"pickle"):
        add(f"symlink {name!r}", end(header(name, 0, b"2", linkname=b"/etc/passwd")))
        add(f"hard link {name!r}", end(member(b"real", body) + header(name, 0, b"1", linkname=b"real")))
    add("directory slashes", end(header(b"d///", 0, b"5") + header(b"e/", 0, b"\0")))

    # GNU long names and links.
    long_name = b"n" * 150
    add("long name", end(gnu_long(long_name + b"\0") + member(b"short", body)))
    add("long name with a NUL", end(gnu_long(b"before\0after") + member(b"short", body)))
    add("long name of a directory", end(gnu_long(b"dir//") + header(b"d", 0, b"5")))
    add("long link", end(gnu_long(b"t" * 200, b"K") + header(b"l", 0, b"2", linkname=b"x")))
    add("long name then end", end(gnu_long(long_name)))
    add("long name then garbage", gnu_long(long_name) + b"\1" * 512)
    add("long name at the end of the data", gnu_long(long_name))
    add("long name chain", end(gnu_long(b"one") + gnu_long(b"two", b"K") + gnu_long(b"three") + member(b"f", body)))
    add("long name size 0", end(gnu_long(b"", size=0) + member(b"f", body)))
    add("long name negative size", end(header(b"././@LongLink", 0, b"L", size_field=b"-1\0") + member(b"f", body)))
    add("long name size -1000", end(header(b"././@LongLink", 0, b"L", size_field=b"-1750\0")
                                    + member(b"f", body)))
    add("long name huge size", end(header(b"././@LongLink", 0, b"L", size_field=b"\x80" + b"\xff" * 11)
                                   + member(b"f", body)))
    add("long name after a member", end(member(b"a", body) + gnu_long(long_name) + member(b"short", body)))
    add("long name then zeros after a member", end(member(b"a", body) + gnu_long(long_name)))

    # Old GNU sparse members.
    add("old sparse", end(old_sparse(b"sp", [(0, 4), (1024, 4)], 2048, b"abcdefgh") + member(b"after", body)))
    add("old sparse extended", end(old_sparse(b"sp", [(i * 100, 2) for i in range(4)], 4000, b"x" * 20,
                                              [[(500 + i * 10, 2) for i in range(21)], [(900, 3)]])
                                   + member(b"after", body)))
    add("old sparse extension cut short", old_sparse(b"sp", [(0, 1)] * 4, 10, b"", [[(5, 1)]], cut_extension=100))
    add("old sparse extension missing", old_sparse(b"sp", [(0, 1)] * 4, 10, b"", [[(5, 1)]], cut_extension=0))
    add("old sparse extension bad number", end(old_sparse(b"sp", [(0, 1)] * 4, 10, b"abcd",
                                                          [[(5, 1)]]).replace(octal(5, 12), b"9" * 12)))
    add("old sparse out of order", end(old_sparse(b"sp", [(10, 4), (0, 4), (2, 6), (0, 0)], 20, b"abcdefghijklmn")))
    add("old sparse negative pieces", end(old_sparse(b"sp", [(0, 4)], 20, b"abcdefgh").replace(
        sparse_struct(0, 4), b"\xff" * 12 + octal(4, 12))))
    add("old sparse after a member", end(member(b"a", body) + old_sparse(b"sp", [(0, 4)], 4, b"abcd")))
    add("old sparse as storages", end(old_sparse(b"storages", [(0, len(PAYLOAD))], len(PAYLOAD), PAYLOAD)))

    # PAX headers.
    add("pax path", end(pax(record(b"path", b"from/pax//")) + member(b"header name", body)))
    add("pax linkpath", end(pax(record(b"linkpath", b"pax target")) + header(b"l", 0, b"2", linkname=b"h")))
    for size in (b"0", b"5", b"13", b"600", b"-1", b"-600", b" 13 ", b"1_3", "١٣".encode(), b"\xa013",
                 "\u00a013".encode(), b"13\0", b"0o15", b"x", b"", b"9" * 4300, b"9" * 4301, b"1" * 40,
                 b"-" + b"9" * 40, "\u3000-1\u2003".encode()):
        add(f"pax size {size[:12]!r}", end(pax(record(b"size", size)) + member(b"f", PAYLOAD) + member(b"g", body)))
        add(f"pax size {size[:12]!r} of a directory",
            end(pax(record(b"size", size)) + header(b"d", 512, b"5") + member(b"g", body)))
        add(f"global size {size[:12]!r}", end(pax(record(b"size", size), b"g") + member(b"f", PAYLOAD)
                                              + member(b"g", body)))
    add("pax size and realsize", end(pax(record(b"size", b"3") + record(b"GNU.sparse.realsize", b"600")
                                         + record(b"size", b"5")) + member(b"f", body)))
    add("pax realsize not a number", end(pax(record(b"GNU.sparse.realsize", b"x")) + member(b"f", body)))
    add("pax global path", end(pax(record(b"path", b"everyone"), b"g") + member(b"a", body) + member(b"b", body)))
    add("pax global then local", end(pax(record(b"path", b"g") + record(b"size", b"2"), b"g")
                                     + pax(record(b"path", b"x")) + member(b"a", body) + member(b"b", body)))
    add("solaris header", end(pax(record(b"path", b"solaris"), b"X") + member(b"a", body)))
    add("pax hdrcharset", end(pax(record(b"hdrcharset", b"BINARY") + record(b"path", b"\xff\xfe"))
                              + member(b"a", body)))
    add("pax hdrcharset not utf-8", end(pax(record(b"hdrcharset", b"\xff")) + member(b"a", body)))
    add("pax hdrcharset not utf-8 later", end(member(b"a", body) + pax(record(b"hdrcharset", b"\xff"))
                                              + member(b"b", body)))
    add("pax hdrcharset anywhere", end(pax(b"junk 7 hdrcharset=\xc3\x28\n") + member(b"a", body)))
    add("pax record length 0", end(pax(b"0 path=x\n") + member(b"a", body)))
    add("pax record length 0 later", end(member(b"a", body) + pax(b"0 path=x\n") + member(b"b", body)))
    add("pax record too long", end(pax(b"99 path=long\n") + member(b"a", body)))
    add("pax record too short", end(pax(b"5 path=short\n6 size=3\n") + member(b"a", body)))
    add("pax record without =", end(pax(b"10 path\n" + record(b"path", b"y")) + member(b"a", body)))
    add("pax keyword with spaces", end(pax(record(b"pa th", b"x") + record(b"path", b"y=z")) + member(b"a", body)))
    add("pax length digits", end(pax(b"0" * 4301 + b"1 path=x\n") + member(b"a", body)))
    add("pax length many zeros", end(pax(b"0" * 4000 + b"12 path=x\n") + member(b"a", body)))
    add("pax shared far equals", end(pax(b"2 " * 200 + b"path=x\n") + member(b"a", body)))
    add("pax negative size header", end(header(b"././@PaxHeader", 0, b"x", size_field=b"-1\0")
                                        + member(b"a", body)))
    add("pax reads all", end(header(b"././@PaxHeader", 0, b"x", size_field=b"-1001\0") + member(b"a", body)))
    add("pax huge size", end(header(b"././@PaxHeader", 0, b"x", size_field=b"\x80" + b"\xff" * 11)
                             + member(b"a", body)))
    add("pax then end", end(pax(record(b"path", b"x"))))
    add("pax then garbage", pax(record(b"path", b"x")) + b"\1" * 512)
    add("pax chain", end(pax(record(b"path", b"1")) + pax(record(b"size", b"3"), b"g")
                         + gnu_long(b"long") + pax(record(b"linkpath", b"l")) + member(b"a", body)))
    add("pax sparse name", end(pax(record(b"GNU.sparse.name", b"sparse//name")) + member(b"a", body)))
    add("pax sparse 0.0", end(pax(record(b"GNU.sparse.size", b"100") + record(b"GNU.sparse.numblocks", b"2")
                                  + record(b"GNU.sparse.offset", b"10") + record(b"GNU.sparse.numbytes", b"3")
                                  + record(b"GNU.sparse.offset", b"50") + record(b"GNU.sparse.numbytes", b"4"))
                              + member(b"s", b"abcdefg")))
    add("pax sparse 0.0 any byte for the dots", end(pax(record(b"GNU.sparse.size", b"20")
                                                        + b"99 GNU-sparse-offset=2\n9 GNUxsparsexnumbytes=3\n")
                                                    + member(b"s", b"abc")))
    add("pax sparse 0.1", end(pax(record(b"GNU.sparse.map", b"2,3,10,4") + record(b"GNU.sparse.realsize", b"30"))
                              + member(b"s", b"abcdefg")))
    add("pax sparse 0.1 odd", end(pax(record(b"GNU.sparse.map", b"2,3,10") + record(b"size", b"12"))
                                  + member(b"s", b"abc")))
    add("pax sparse 0.1 bad", end(pax(record(b"GNU.sparse.map", b"2,x")) + member(b"s", b"abc")))
    add("pax sparse 0.1 empty", end(pax(record(b"GNU.sparse.map", b"")) + member(b"s", b"abc")))
    add("pax sparse 0.1 global", end(pax(record(b"GNU.sparse.map", b"0,2"), b"g") + member(b"s", b"abc")
                                     + pax(record(b"path", b"t")) + member(b"t", b"abc")))
    map_10 = padded(b"2\n0\n3\n10\n4\n")
    add("pax sparse 1.0", end(pax(record(b"GNU.sparse.major", b"1") + record(b"GNU.sparse.minor", b"0")
                                  + record(b"GNU.sparse.realsize", b"20") + record(b"GNU.sparse.name", b"s10"))
                              + member(b"s", map_10 + b"abcdefg")))
    add("pax sparse 1.0 long map", end(pax(record(b"GNU.sparse.major", b"1") + record(b"GNU.sparse.minor", b"0")
                                           + record(b"size", str(1024 + 8).encode()))
                                       + member(b"s", padded(b"200\n" + b"1\n" * 400) + b"abcdefgh")))
    add("pax sparse 1.0 no newline", end(pax(record(b"GNU.sparse.major", b"1") + record(b"GNU.sparse.minor", b"0"))
                                         + member(b"s", b"2" * 600)))
    add("pax sparse 1.0 at the end", pax(record(b"GNU.sparse.major", b"1") + record(b"GNU.sparse.minor", b"0"))
        + header(b"s", 0))
    add("pax sparse 1.0 minor 1", end(pax(record(b"GNU.sparse.major", b"1") + record(b"GNU.sparse.minor", b"1"))
                                      + member(b"s", map_10)))

    # Where next() goes after a member.
    add("size points back to the start", end(header(b"back", size_field=b"-1000\0") + padded(body)))
    add("size points before the start", end(header(b"before", size_field=b"-2000\0") + padded(body)))
    add("size points back to itself", end(member(b"a", body) + header(b"loop", size_field=b"-1000\0")))
    add("size past the end", member(b"a", b"x" * 2000)[:1024])
    add("size past 2**63", end(header(b"huge", size_field=b"\x80" + b"\x7f" + b"\xff" * 10)))
    add("truncated header after the first", member(b"a", body) + b"\1" * 100)
    chain = b"".join(pax(record(b"comment", b"%d" % i)) for i in range(120))
    add("chain of 120 pax headers", end(chain + member(b"a", body)))
    add("chain of 90 pax headers", end(chain[:90 * 1024] + member(b"a", body)))

    # extract() and extractfile() disagree.
    add("negative size storages", header(b"storages", size_field=b"-1\0") + PAYLOAD.ljust(20000, b"\0"))
    add("negative size cut short", header(b"storages", size_field=b"-1\0") + PAYLOAD)
    return cases


def tarfile_written() -> list[tuple[str, bytes]]:
    """Archives tarfile itself writes, in each format, of every member type."""
    cases = []
    for fmt, fmt_name in ((tarfile.USTAR_FORMAT, "ustar"), (tarfile.GNU_FORMAT, "gnu"), (tarfile.PAX_FORMAT, "pax")):
        for variant in range(4):
            out = io.BytesIO()
            with tarfile.open(fileobj=out, mode="w", format=fmt, encoding="utf-8") as tar:
                def add(name: str, kind: bytes = tarfile.REGTYPE, data: bytes = b"", **attrs) -> None:
                    info = tarfile.TarInfo(name)
                    info.type = kind
                    info.size = len(data)
                    for k, v in attrs.items():
                        setattr(info, k, v)
                    tar.addfile(info, io.BytesIO(data) if data else None)
                add("plain.txt", data=b"text" * variant)
                add("empty")
                add("block", data=b"b" * 512)
                add("block and one", data=b"c" * 513)
                add("dir", tarfile.DIRTYPE)
                add("dir/inside.pkl", data=PAYLOAD)
                add("link", tarfile.SYMTYPE, linkname="dir/inside.pkl")
                add("hard", tarfile.LNKTYPE, linkname="plain.txt")
                add("fifo", tarfile.FIFOTYPE)
                add("chr", tarfile.CHRTYPE, devmajor=1, devminor=3)
                add("blk", tarfile.BLKTYPE, devmajor=8, devminor=0)
                add("contiguous", tarfile.CONTTYPE, data=b"contiguous")
                if fmt != tarfile.USTAR_FORMAT:
                    add("long/" + "n" * (120 + variant * 60) + ".pkl", data=PAYLOAD)
                    add("longlink", tarfile.SYMTYPE, linkname="t" * 150)
                    add("ünïcödé " * 3, data=b"u")
                    add("big uid", data=b"u", uid=8 ** 8 + variant)
                else:
                    add("p" * 60 + "/" + "q" * 90, data=b"prefix split")
                if fmt == tarfile.PAX_FORMAT:
                    info = tarfile.TarInfo("with pax records")
                    info.pax_headers = {"comment": "x" * (100 * variant), "mtime": "1.5"}
                    tar.addfile(info)
                add("last", data=b"last" * 100)
            cases.append((f"tarfile {fmt_name} {variant}", out.getvalue()))
    return cases


def gnu_tar_written(tmp: str) -> list[tuple[str, bytes]]:
    """Sparse archives GNU tar writes (old GNU headers, PAX 0.0, 0.1 and 1.0)."""
    tar = shutil.which("tar")
    if tar is None or b"GNU tar" not in subprocess.run([tar, "--version"], capture_output=True).stdout:
        return []
    src = os.path.join(tmp, "src")
    os.makedirs(src, exist_ok=True)
    for holes, name in ((3, "few"), (30, "many")):
        with open(os.path.join(src, name), "wb") as f:
            for i in range(holes):
                f.seek(i * 8192)
                f.write(b"data %d " % i * 10)
            f.truncate(holes * 8192 + 4096)
    cases = []
    for options in (["--format=gnu"], ["--format=pax", "--sparse-version=0.0"],
                    ["--format=pax", "--sparse-version=0.1"], ["--format=pax", "--sparse-version=1.0"],
                    ["--format=oldgnu"], ["--format=v7"], ["--format=posix"]):
        out = os.path.join(tmp, "out.tar")
        done = subprocess.run([tar, *options, "--sparse", "-cf", out, "-C", src, "few", "many"],
                              capture_output=True)
        if done.returncode == 0:
            with open(out, "rb") as f:
                cases.append((f"GNU tar {' '.join(options)}", f.read()))
    return cases


# --- mutations --------------------------------------------------------------------

def header_blocks(data: bytes) -> list[int]:
    """Offsets of 512-byte blocks whose checksum tarfile would accept."""
    found = []
    for at in range(0, len(data) - 511, 512):
        block = data[at:at + 512]
        try:
            chk = int(block[148:156].split(b"\0")[0].strip() or b"0", 8)
        except ValueError:
            continue
        if chk in (checksum(block), checksum(block, True)):
            found.append(at)
    return found


def mutate(data: bytes, rng: random.Random) -> bytes:
    out = bytearray(data)
    headers = header_blocks(data) or [0]
    at = rng.choice(headers)
    how = rng.randrange(10)
    if how == 0 and out:
        out[rng.randrange(len(out))] = rng.randrange(256)
    elif how == 1 and len(out) > at + 512:
        field = rng.choice([(100, 108), (124, 136), (124, 136), (148, 156), (329, 337), (483, 495), (386, 398)])
        spelling = rng.choice(SIZE_SPELLINGS if field[1] - field[0] == 12 else NUMBER_SPELLINGS)
        out[at + field[0]:at + field[1]] = fit(spelling, field[1] - field[0])
    elif how == 2 and len(out) > at + 512:
        out[at + 156] = rng.choice(TYPES)
    elif how == 3 and len(out) > at + 512:
        out[at + rng.randrange(512)] = rng.randrange(256)
    elif how == 4:
        return bytes(out[:rng.randrange(len(out) + 1)])
    elif how == 5 and len(out) >= 1024:
        block = rng.randrange(len(out) // 512) * 512
        if rng.random() < 0.5:
            del out[block:block + 512]
        else:
            out[block:block] = out[block:block + 512]
    elif how == 6 and len(out) > at + 512:
        size = rng.choice([0, 1, 511, 512, 513, 1024, 1536, rng.randrange(1 << 14)])
        out[at + 124:at + 136] = octal(size, 12)
    elif how == 7:
        # The text of PAX records and long names: digits, '=', newlines.
        spots = [i for i in range(len(out)) if out[i] in b"0123456789= \n"]
        if spots:
            i = rng.choice(spots)
            out[i] = rng.choice(b"0123456789= \nx\0")
    elif how == 8 and len(out) > at + 512:
        out[at + rng.randrange(100)] = rng.choice(b"/\0a.")
    else:
        out[at + 257:at + 265] = rng.choice([b"ustar\x0000", b"ustar  \0", b"\0" * 8, b"gnu tar!"])
    if len(out) > at + 512 and rng.random() < 0.8:
        out[at:at + 512] = seal(out[at:at + 512], signed=rng.random() < 0.1)
    return bytes(out)


PAX_KEYWORDS = [b"path", b"linkpath", b"size", b"GNU.sparse.size", b"GNU.sparse.realsize", b"GNU.sparse.map",
                b"GNU.sparse.major", b"GNU.sparse.minor", b"GNU.sparse.name", b"GNU.sparse.offset",
                b"GNU.sparse.numbytes", b"GNU.sparse.numblocks", b"hdrcharset", b"comment", b"mtime", b"uid"]
PAX_VALUES = [b"0", b"1", b"3", b"10", b"512", b"600", b"-1", b"-512", b" 7 ", b"1_0", "\u0663".encode(), b"x", b"",
              b"0,3", b"2,3,10,4", b"0,4,2,2", b"-5,3", b"1,x", b"BINARY", b"\xff", b"name/", b"a//", b"9" * 30]


def random_records(rng: random.Random) -> bytes:
    out = b""
    for _ in range(rng.randrange(1, 5)):
        keyword, value = rng.choice(PAX_KEYWORDS), rng.choice(PAX_VALUES)
        rec = record(keyword, value)
        if rng.random() < 0.1:
            # A length a little off.
            n = int(rec.split(b" ", 1)[0]) + rng.choice([-2, -1, 1, 2])
            rec = b"%d" % n + rec[len(rec.split(b" ", 1)[0]):]
        out += rec
    return out


def random_archive(rng: random.Random) -> bytes:
    """Members behind random chains of PAX, global and GNU headers."""
    out = b""
    for i in range(rng.randrange(1, 4)):
        for _ in range(rng.randrange(3)):
            kind = rng.choice([b"x", b"x", b"g", b"X", b"L", b"K"])
            if kind in (b"L", b"K"):
                out += gnu_long(rng.choice([b"long", b"dir//", b"a\0b", b"storages"]), kind)
            else:
                out += pax(random_records(rng), kind)
        kind = rng.choice(b"00000125S7Z")
        body = rng.choice([b"", b"abc", PAYLOAD, padded(b"2\n0\n3\n8\n2\n") + b"abcdefgh", bytes(600)])
        if kind == ord("S"):
            out += old_sparse(b"s%d" % i, [(0, 2), (rng.randrange(20), rng.randrange(4))], rng.randrange(40), body)
        else:
            out += header(b"m%d" % i, len(body), bytes([kind])) + padded(body)
    return end(out)


def all_cases(tmp: str) -> list[tuple[str, bytes]]:
    rng = random.Random(20240611)
    bases = (hand_written() + tarfile_written() + gnu_tar_written(tmp)
             + [(f"random headers {i}", random_archive(rng)) for i in range(400)])
    mutants = []
    for name, data in bases:
        for i in range(12 if not name.startswith("random") else 2):
            mutated = data
            for _ in range(1 + rng.randrange(3)):
                mutated = mutate(mutated, rng)
            mutants.append((f"{name} mutant {i}", mutated))
    return bases + mutants


def test_the_model_reads_every_archive_as_tarfile_does(tmp_path):
    target = str(tmp_path / "extracted")
    cases = all_cases(str(tmp_path))
    assert len(cases) > 3000
    failures = []
    for name, data in cases:
        diff = differences(data, target)
        if diff is not None:
            failures.append(f"{name}: {diff}\n data {data[:2048].hex()}")
    assert not failures, f"{len(failures)} of {len(cases)} cases differ:\n\n" + "\n\n".join(failures[:10])


# --- what torch runs ----------------------------------------------------------------

def legacy_tar_polyglot(storages: bytes) -> bytes:
    """A legacy torch file (one uint8 tensor) whose bytes are also a tar with a
    `storages` member. The second pickle of the stream (the protocol version)
    takes the rest of the tar's first header as a BINUNICODE string (its fields
    are ASCII) and POPs it; the first member's data runs over the rest of the
    stream up to the tensor's bytes, which hold the `storages` member."""
    import torch

    numel = 8192
    out = io.BytesIO()
    torch.save(torch.zeros(numel, dtype=torch.uint8), out, _use_new_zipfile_serialization=False)
    stream = out.getvalue()
    magic, version, rest = stream[:15], stream[15:21], stream[21:]
    assert version == b"\x80\x02M\xe9\x03.", version
    swallow = magic + b"\x80\x02X" + struct.pack("<I", 512 - 22)
    data = bytearray(b"\0" * 512 + b"0M\xe9\x03." + rest)
    tensor_bytes = len(data) - numel
    at = tensor_bytes + (-tensor_bytes % 512)
    inner = member(b"storages", storages) + b"\0" * 1024
    assert at + len(inner) <= len(data)
    data[at:at + len(inner)] = inner
    data[:512] = header(swallow, at - 512)
    return bytes(data)


def torch_load_in(cwd, path, weights_only: bool) -> str:
    """torch.load(path) in a fresh process whose folder is cwd: what it raised."""
    script = textwrap.dedent("""
        import sys, torch
        try:
            torch.load(sys.argv[1], weights_only=sys.argv[2] == "1")
            print("loaded")
        except Exception as e:
            print(type(e).__name__, e)
    """)
    done = subprocess.run([sys.executable, "-c", script, str(path), "1" if weights_only else "0"],
                          cwd=cwd, capture_output=True, text=True, timeout=300)
    return done.stdout + done.stderr


@needs_torch
def test_a_legacy_file_that_is_also_a_tar_runs_the_tar_in_torch_and_is_refused(tmp_path):
    import torch

    data = legacy_tar_polyglot(PAYLOAD)
    # The legacy stream is valid: torch reads it where it does not try a tar
    # (a buffer; its weights-only unpickler knows no POP), and so would
    # tensorplay without the rule.
    assert torch.load(io.BytesIO(data), weights_only=False).shape == (8192,)
    assert _core._tar_model(data)[0]
    path = tmp_path / "polyglot.pt"
    path.write_bytes(data)
    cwd = tmp_path / "torch_cwd"
    cwd.mkdir()
    said = torch_load_in(cwd, path, weights_only=False)
    assert (cwd / "tar_payload_ran").exists(), said
    assert "legacy .tar format" in torch_load_in(cwd, path, weights_only=True)

    for source in (path, data):
        with pytest.raises(tensorplay.UnsafeCheckpointError, match="also a tar archive") as refused:
            tensorplay.load(source, backend="numpy")
        assert refused.value.kind == "unsafe_file"
    report = tensorplay.scanner.scan(path)
    assert report.verdict == "unsafe"
    assert [f.location for f in report.findings] == ["storages"]


@needs_torch
def test_a_legacy_file_whose_tar_holds_nothing_unsafe_is_never_clean(tmp_path):
    data = legacy_tar_polyglot(b"\x80\x02K\x00.")
    path = tmp_path / "polyglot.pt"
    path.write_bytes(data)
    report = tensorplay.scanner.scan(path)
    assert report.verdict == "unreadable"
    assert any(p.kind == "parser_disagreement" for p in report.problems), report.problems
    with pytest.raises(tensorplay.UnsafeCheckpointError):
        tensorplay.load(path, backend="numpy")


@needs_torch
def test_a_storages_member_of_negative_size_is_what_extract_writes(tmp_path):
    """extractfile reads nothing of a member whose size is -1, but extract (which
    torch uses for storages) copies copyfileobj's remainder, 16383 bytes: the
    scanner reads both."""
    data = header(b"storages", size_field=b"-1\0") + PAYLOAD.ljust(16383, b"\0")
    path = tmp_path / "negative.tar"
    path.write_bytes(data)
    cwd = tmp_path / "torch_cwd"
    cwd.mkdir()
    said = torch_load_in(cwd, path, weights_only=False)
    assert (cwd / "tar_payload_ran").exists(), said
    report = tensorplay.scanner.scan(path)
    assert report.verdict == "unsafe"
    assert [f.name for f in report.findings] == ["builtins.exec"]
    assert report.findings[0].location == "storages (as extract writes it)"
    with pytest.raises(tensorplay.UnsupportedCheckpointError, match="tar"):
        tensorplay.load(path, backend="numpy")


def test_links_torch_extracts_are_dangerous_findings():
    data = end(header(b"storages", 0, b"2", linkname=b"/home/user/evil.pkl"))
    report = tensorplay.scanner.scan(data)
    assert report.verdict == "unsafe"
    assert len(report.findings) == 1 and report.findings[0].dangerous
    assert report.findings[0].name.startswith("<tar symbolic link storages -> /home/user/evil.pkl")


def test_a_zip_that_tarfile_also_opens_gets_the_tar_reading(tmp_path):
    """A zip whose first 512 bytes are a tar header (the entry's data descriptor
    leaves no CRC in its local header for the checksum to depend on)."""
    import zipfile

    class Unseekable(io.RawIOBase):
        def __init__(self):
            self.out = bytearray()

        def writable(self):
            return True

        def write(self, b):
            self.out += b
            return len(b)

    def zip_of(content: bytes) -> bytes:
        sink = Unseekable()
        with zipfile.ZipFile(sink, "w") as z, z.open(zipfile.ZipInfo("x", (2000, 1, 1, 0, 0, 0)), "w") as f:
            f.write(content)
        return bytes(sink.out)

    start = zip_of(b"\0" * 2048).index(b"\0" * 512)
    content = bytearray(2048)
    inner = member(b"evil.pkl", PAYLOAD) + b"\0" * 1024
    content[1024 - start:1024 - start + len(inner)] = inner
    head = bytearray(zip_of(bytes(content))[:512])
    head[100:108] = b"0000644\0"
    head[124:136] = octal(512, 12)
    head[156:157] = b"0"
    sealed = seal(head)
    content[100 - start:512 - start] = sealed[100:]
    data = zip_of(bytes(content))
    assert data[:512] == sealed
    names = [m.name for m in tarfile.open(fileobj=io.BytesIO(data), mode="r:").getmembers()]
    assert names[1:] == ["evil.pkl"]
    path = tmp_path / "both.zip"
    path.write_bytes(data)
    for pickles_only in (False, True):
        report = tensorplay.scanner.scan(path, pickles_only=pickles_only)
        assert report.verdict == "unsafe", report
        assert [f.location for f in report.findings] == ["evil.pkl"]
