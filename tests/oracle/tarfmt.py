"""A byte-level tar writer, for headers no ordinary tar writer makes: V7 without
magic, GNU and ustar magic, base-256 and oddly spelt octal numbers, any type
byte, signed or wrong checksums, PAX and GNU long-name records."""
from __future__ import annotations

BLOCK = 512
MAGIC = {"ustar": b"ustar\x0000", "gnu": b"ustar  \x00", "v7": b""}


def octal(n: int, width: int, spelling: str = "plain") -> bytes:
    """A number field: ``plain`` (zero-padded, NUL-terminated), ``spaces``
    (leading spaces, space-terminated), ``full`` (every byte a digit: no
    terminator) or ``base256`` (GNU's binary form)."""
    if spelling == "base256":
        return bytes([0x80]) + n.to_bytes(width - 1, "big")
    if spelling == "spaces":
        return (b"%o" % n).rjust(width - 1, b" ") + b" "
    if spelling == "full":
        return (b"%0*o" % (width, n))[-width:]
    return (b"%0*o" % (width - 1, n)) + b"\x00"


def _field(value: bytes, width: int) -> bytes:
    return value[:width].ljust(width, b"\x00")


def header(name: bytes, size: int, *, typeflag: bytes = b"0", fmt: str = "ustar", size_spelling: str = "plain",
           linkname: bytes = b"", prefix: bytes = b"", checksum: str = "unsigned", mode: int = 0o644) -> bytes:
    block = bytearray(BLOCK)
    block[0:100] = _field(name, 100)
    block[100:108] = octal(mode, 8)
    block[108:116] = octal(0, 8)
    block[116:124] = octal(0, 8)
    block[124:136] = octal(size, 12, size_spelling)
    block[136:148] = octal(0, 12)
    block[148:156] = b" " * 8
    block[156:157] = typeflag[:1] or b"\x00"
    block[157:257] = _field(linkname, 100)
    if fmt != "v7":
        block[257:265] = MAGIC[fmt]
        block[265:297] = _field(b"root", 32)
        block[297:329] = _field(b"root", 32)
        if fmt == "ustar":
            block[345:500] = _field(prefix, 155)
    if checksum == "signed":
        total = sum(b - 256 if b > 127 else b for b in block)
    else:
        total = sum(block)
    if checksum == "wrong":
        total += 1
    block[148:156] = b"%06o\x00 " % (total & 0o777777)
    return bytes(block)


def pad(data: bytes) -> bytes:
    return data + b"\x00" * (-len(data) % BLOCK)


def member(name: bytes, data: bytes, **kw) -> bytes:
    return header(name, len(data), **kw) + pad(data)


def pax(records: dict[str, bytes], global_: bool = False, fmt: str = "ustar") -> bytes:
    body = b""
    for key, value in records.items():
        text = b" " + key.encode() + b"=" + value + b"\n"
        n = len(text) + 1
        while len(str(n).encode()) + len(text) != n:
            n = len(str(n).encode()) + len(text)
        body += str(n).encode() + text
    return member(b"././@PaxHeader", body, typeflag=b"g" if global_ else b"x", fmt=fmt)


def gnu_long(kind: bytes, value: bytes) -> bytes:
    """A GNU ``L`` (long name) or ``K`` (long link name) record for the next member."""
    return member(b"././@LongLink", value + b"\x00", typeflag=kind, fmt="gnu")


def end() -> bytes:
    return b"\x00" * (2 * BLOCK)


def archive(members: list[tuple[bytes, bytes]], **kw) -> bytes:
    return b"".join(member(n, d, **kw) for n, d in members) + end()
