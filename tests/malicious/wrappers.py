"""Byte-exact writers of the compressed and archive formats the malicious corpus wraps
its payloads in: gzip, zlib, xz, LZMA-alone, zstd and 7z, for make_corpus.py.

Every encoder here is written out rather than borrowed from zlib or liblzma, so that
the files do not change with the library build (bzip2 is the exception: its output
has not changed since 1.0.6, and a hand-written BWT would be most of this file). The
encoders only need to produce *valid* streams, not small ones: DEFLATE comes from
make_corpus's own encoder, LZMA is coded literal by literal (no matches), and zstd
uses raw blocks. Nothing here decompresses or unpickles anything.
"""
from __future__ import annotations

import bz2
import struct
import zlib

# --------------------------------------------------------------------------------------
# LZMA: a range coder that codes every byte as a literal. lc=3, lp=0, pb=2 (the 0x5D
# properties byte every LZMA tool writes by default), no end marker: the decoder stops
# at the size the container declares.

LZMA_PROPS = 0x5D  # (pb * 5 + lp) * 9 + lc
_LC, _PB = 3, 2


class _RangeEncoder:
    """xz's rc_encode/rc_shift_low, for bits of adaptive 11-bit probabilities."""

    def __init__(self):
        self.low, self.range, self.cache, self.cache_size = 0, 0xFFFFFFFF, 0, 1
        self.out = bytearray()

    def bit(self, probs: list[int], i: int, bit: int) -> None:
        bound = (self.range >> 11) * probs[i]
        if bit:
            self.low += bound
            self.range -= bound
            probs[i] -= probs[i] >> 5
        else:
            self.range = bound
            probs[i] += (2048 - probs[i]) >> 5
        while self.range < 1 << 24:
            self.range = (self.range << 8) & 0xFFFFFFFF
            self._shift_low()

    def _shift_low(self) -> None:
        if self.low < 0xFF000000 or self.low >= 1 << 32:
            carry = self.low >> 32
            temp = self.cache
            while True:
                self.out.append((temp + carry) & 0xFF)
                temp = 0xFF
                self.cache_size -= 1
                if not self.cache_size:
                    break
            self.cache = (self.low >> 24) & 0xFF
        self.cache_size += 1
        self.low = (self.low & 0x00FFFFFF) << 8

    def finish(self) -> bytes:
        for _ in range(5):
            self._shift_low()
        return bytes(self.out)


def lzma_literals(data: bytes) -> bytes:
    """The range-coded LZMA stream of `data` (no header): every byte a literal, so the
    coder's state stays 0 and no match is ever coded."""
    rc = _RangeEncoder()
    is_match = [1024] * (12 << 4)
    literal = [1024] * (0x300 << _LC)
    prev = 0
    for pos, byte in enumerate(data):
        rc.bit(is_match, pos & ((1 << _PB) - 1), 0)  # state 0: is_match[0][pos_state]
        base = 0x300 * (prev >> (8 - _LC))
        sym = 1
        for shift in range(7, -1, -1):
            b = (byte >> shift) & 1
            rc.bit(literal, base + sym, b)
            sym = (sym << 1) | b
        prev = byte
    return rc.finish()


def lzma_alone(data: bytes, dict_size: int = 1 << 16) -> bytes:
    """The .lzma ("LZMA-alone", lzma.FORMAT_ALONE) format: properties, dictionary size,
    the uncompressed size (known, so no end marker), then the stream."""
    return bytes([LZMA_PROPS]) + struct.pack("<IQ", dict_size, len(data)) + lzma_literals(data)


def lzma2_chunks(data: bytes) -> bytes:
    """An LZMA2 stream: one LZMA chunk that resets the dictionary, the state and the
    properties (control 0xE0), then the end byte. One chunk holds up to 2 MiB of input
    and 64 KiB of coded bytes, far more than any corpus file needs."""
    coded = lzma_literals(data)
    assert 0 < len(data) <= 1 << 21 and len(coded) <= 1 << 16
    u, c = len(data) - 1, len(coded) - 1
    return bytes([0xE0 | (u >> 16)]) + struct.pack(">HH", u & 0xFFFF, c) + bytes([LZMA_PROPS]) + coded + b"\x00"


LZMA2_DICT_PROP = 16  # 7z's and xz's one-byte LZMA2 dictionary size: 2 << (16 // 2 + 11) = 1 MiB


def _xz_varint(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append(0x80 | (n & 0x7F))
        n >>= 7
    out.append(n)
    return bytes(out)


def _pad4(n: int) -> bytes:
    return b"\x00" * (-n % 4)


def xz(data: bytes) -> bytes:
    """An .xz stream (lzma.FORMAT_XZ): one block with the LZMA2 filter, CRC32 check."""
    flags = b"\x00\x01"  # check type 1: CRC32
    header = b"\xfd7zXZ\x00" + flags + struct.pack("<I", zlib.crc32(flags))
    filters = b"\x00" + b"\x21\x01" + bytes([LZMA2_DICT_PROP])  # block flags: 1 filter; LZMA2, 1 property byte
    size = 1 + len(filters)
    block_header = bytes([(size + len(_pad4(size)) + 4) // 4 - 1]) + filters + _pad4(size)
    block_header += struct.pack("<I", zlib.crc32(block_header))
    coded = lzma2_chunks(data)
    check = struct.pack("<I", zlib.crc32(data))
    block = block_header + coded + _pad4(len(coded)) + check
    unpadded = len(block_header) + len(coded) + len(check)
    index = b"\x00" + _xz_varint(1) + _xz_varint(unpadded) + _xz_varint(len(data))
    index += _pad4(len(index))
    index += struct.pack("<I", zlib.crc32(index))
    backward = struct.pack("<I", len(index) // 4 - 1) + flags
    footer = struct.pack("<I", zlib.crc32(backward)) + backward + b"YZ"
    return header + block + index + footer


# --------------------------------------------------------------------------------------
# DEFLATE containers. `raw_deflate` is make_corpus's deterministic encoder, passed in.

def gzip_member(raw_deflate: bytes, data: bytes, *, name: bytes | None = None, comment: bytes | None = None,
                extra: bytes | None = None) -> bytes:
    """One gzip member (RFC 1952), mtime 0, OS 255 (unknown), with optional FEXTRA,
    FNAME and FCOMMENT header fields."""
    flags = 0x04 if extra is not None else 0
    flags |= (0x08 if name is not None else 0) | (0x10 if comment is not None else 0)
    out = bytearray(b"\x1f\x8b\x08" + bytes([flags]) + struct.pack("<I", 0) + b"\x00\xff")
    if extra is not None:
        out += struct.pack("<H", len(extra)) + extra
    if name is not None:
        out += name + b"\x00"
    if comment is not None:
        out += comment + b"\x00"
    out += raw_deflate + struct.pack("<II", zlib.crc32(data), len(data) & 0xFFFFFFFF)
    return bytes(out)


def zlib_stream(raw_deflate: bytes, data: bytes, cmf: int = 0x78, level: int = 1) -> bytes:
    """A zlib stream (RFC 1950). CMF 0x78 is a 32 KiB window; FLEVEL 1 is what zlib
    writes for levels 2 to 5 (joblib's compress='zlib' uses 3). FCHECK makes the
    header a multiple of 31."""
    flg = level << 6
    flg += (31 - (cmf * 256 + flg) % 31) % 31
    return bytes([cmf, flg]) + raw_deflate + struct.pack(">I", zlib.adler32(data))


def stored_deflate(data: bytes) -> bytes:
    """Raw DEFLATE of stored blocks only (BTYPE 00): the input stays readable as is."""
    out = bytearray()
    chunks = [data[i:i + 0xFFFF] for i in range(0, len(data), 0xFFFF)] or [b""]
    for k, chunk in enumerate(chunks):
        out += bytes([1 if k == len(chunks) - 1 else 0]) + struct.pack("<HH", len(chunk), len(chunk) ^ 0xFFFF) + chunk
    return bytes(out)


def bzip2(data: bytes) -> bytes:
    """bzip2 at level 9 (libbzip2's output is fixed for a given input and level)."""
    return bz2.compress(data, 9)


# --------------------------------------------------------------------------------------
# zstd (RFC 8878) without a compressor: raw blocks hold the data as is.

ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"


def zstd_frame(data: bytes) -> bytes:
    """One frame: single segment, 4-byte content size, no checksum, raw blocks of at
    most 128 KiB (the format's block size limit)."""
    assert len(data) < 1 << 32
    out = bytearray(ZSTD_MAGIC + bytes([0xA0]) + struct.pack("<I", len(data)))  # FCS 4 bytes, single segment
    blocks = [data[i:i + (128 << 10)] for i in range(0, len(data), 128 << 10)] or [b""]
    for k, block in enumerate(blocks):
        last = 1 if k == len(blocks) - 1 else 0
        out += struct.pack("<I", last | (0 << 1) | (len(block) << 3))[:3] + block  # block type 0: raw
    return bytes(out)


def zstd_skippable(payload: bytes, nibble: int = 0) -> bytes:
    """A skippable frame (magic 0x184D2A5?): every decoder skips its bytes unread."""
    return struct.pack("<II", 0x184D2A50 | nibble, len(payload)) + payload


# --------------------------------------------------------------------------------------
# 7z: a writer for the format's plain (unencoded) header, one folder of one coder per
# file, as 7-Zip writes a non-solid archive.

SEVENZ_COPY = b"\x00"
SEVENZ_LZMA = b"\x03\x01\x01"
SEVENZ_LZMA2 = b"\x21"
SEVENZ_BZIP2 = b"\x04\x02\x02"
SEVENZ_DEFLATE = b"\x04\x01\x08"


def _7z_number(n: int) -> bytes:
    """7z's variable-length number: the leading one bits of the first byte count the
    little-endian bytes that follow; its remaining bits are the value's top bits."""
    for extra in range(9):
        if extra == 8:
            return b"\xff" + n.to_bytes(8, "little")
        if n < 1 << (8 * extra + 7 - extra):
            first = (0xFF00 >> extra) & 0xFF | (n >> (8 * extra))
            return bytes([first]) + (n & ((1 << (8 * extra)) - 1)).to_bytes(extra, "little")
    raise AssertionError(n)


def sevenz_coder(method: bytes, data: bytes, raw_deflate=None) -> tuple[bytes, bytes]:
    """(coded bytes, coder properties) of `data` under one of the methods above."""
    if method == SEVENZ_COPY:
        return data, b""
    if method == SEVENZ_LZMA:
        return lzma_literals(data), bytes([LZMA_PROPS]) + struct.pack("<I", 1 << 16)
    if method == SEVENZ_LZMA2:
        return lzma2_chunks(data), bytes([LZMA2_DICT_PROP])
    if method == SEVENZ_BZIP2:
        return bzip2(data), b""
    if method == SEVENZ_DEFLATE:
        return raw_deflate(data), b""
    raise ValueError(method)


def sevenz(members: list[tuple[str, bytes]], method: bytes, raw_deflate=None) -> bytes:
    """A 7z archive of `members` (name, bytes), each file its own folder coded with
    `method`, the CRC of every file, and a plain header."""
    packed, folders = bytearray(), []
    for _, data in members:
        coded, props = sevenz_coder(method, data, raw_deflate)
        packed += coded
        folders.append((len(coded), props, len(data), zlib.crc32(data)))
    n = _7z_number
    h = bytearray(b"\x01\x04")  # Header, MainStreamsInfo
    h += b"\x06" + n(0) + n(len(folders)) + b"\x09" + b"".join(n(f[0]) for f in folders) + b"\x00"  # PackInfo
    h += b"\x07\x0b" + n(len(folders)) + b"\x00"  # UnpackInfo, Folder, not external
    for _, props, _, _ in folders:
        flags = len(method) | (0x20 if props else 0)
        h += n(1) + bytes([flags]) + method + (n(len(props)) + props if props else b"")
    h += b"\x0c" + b"".join(n(f[2]) for f in folders) + b"\x00"  # CodersUnpackSize; end
    # SubStreamsInfo, as 7-Zip writes it: one stream a folder (so no counts), the CRCs.
    h += b"\x08\x0a\x01" + b"".join(struct.pack("<I", f[3]) for f in folders) + b"\x00"
    h += b"\x00"  # end of MainStreamsInfo
    names = b"".join(name.encode("utf-16-le") + b"\x00\x00" for name, _ in members)
    h += b"\x05" + n(len(members)) + b"\x11" + n(len(names) + 1) + b"\x00" + names + b"\x00"  # FilesInfo: names
    h += b"\x00"  # end of Header
    start = struct.pack("<QQI", len(packed), len(h), zlib.crc32(h))
    signature = b"7z\xbc\xaf\x27\x1c\x00\x04" + struct.pack("<I", zlib.crc32(start)) + start
    return signature + bytes(packed) + bytes(h)
