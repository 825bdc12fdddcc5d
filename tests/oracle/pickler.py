"""A byte-level pickle assembler: the harness writes hostile pickles opcode by
opcode and never asks pickle to serialise a hostile object."""
from __future__ import annotations

import struct

MARK, STOP, POP, DUP = b"(", b".", b"0", b"2"
NONE, NEWTRUE, NEWFALSE = b"N", b"\x88", b"\x89"
REDUCE, BUILD, INST, OBJ, GLOBAL = b"R", b"b", b"i", b"o", b"c"
NEWOBJ, NEWOBJ_EX, STACK_GLOBAL = b"\x81", b"\x92", b"\x93"
TUPLE, EMPTY_TUPLE, TUPLE1, TUPLE2, TUPLE3 = b"t", b")", b"\x85", b"\x86", b"\x87"
LIST, EMPTY_LIST, APPEND, APPENDS = b"l", b"]", b"a", b"e"
DICT, EMPTY_DICT, SETITEM, SETITEMS = b"d", b"}", b"s", b"u"
MEMOIZE = b"\x94"
EXT1 = b"\x82"


def proto(n: int) -> bytes:
    return b"\x80" + bytes([n])


def frame(body: bytes) -> bytes:
    return b"\x95" + struct.pack("<Q", len(body)) + body


def string(s: str, op: str) -> bytes:
    """A str pushed by the opcode named: UNICODE (protocol 0), BINUNICODE,
    SHORT_BINUNICODE, BINUNICODE8, or STRING/BINSTRING/SHORT_BINSTRING (which
    Python 3 decodes with the unpickler's encoding, ASCII by default)."""
    raw = s.encode("utf-8")
    if op == "UNICODE":
        return b"V" + s.encode("raw-unicode-escape") + b"\n"
    if op == "BINUNICODE":
        return b"X" + struct.pack("<I", len(raw)) + raw
    if op == "SHORT_BINUNICODE":
        return b"\x8c" + bytes([len(raw)]) + raw
    if op == "BINUNICODE8":
        return b"\x8d" + struct.pack("<Q", len(raw)) + raw
    if op == "STRING":
        return b"S" + repr(s).encode("ascii") + b"\n"
    if op == "BINSTRING":
        return b"T" + struct.pack("<i", len(raw)) + raw
    if op == "SHORT_BINSTRING":
        return b"U" + bytes([len(raw)]) + raw
    raise ValueError(op)


def binbytes(b: bytes) -> bytes:
    return b"B" + struct.pack("<I", len(b)) + b if len(b) > 255 else b"C" + bytes([len(b)]) + b


def integer(n: int, textual: bool = False) -> bytes:
    if textual:
        return b"I" + str(n).encode() + b"\n"
    if 0 <= n < 256:
        return b"K" + bytes([n])
    if 0 <= n < 65536:
        return b"M" + struct.pack("<H", n)
    return b"J" + struct.pack("<i", n)


def put(index: int, textual: bool = False) -> bytes:
    return b"p" + str(index).encode() + b"\n" if textual else b"q" + bytes([index])


def get(index: int, textual: bool = False) -> bytes:
    return b"g" + str(index).encode() + b"\n" if textual else b"h" + bytes([index])


def global_op(module: str, name: str) -> bytes:
    return GLOBAL + module.encode() + b"\n" + name.encode() + b"\n"


def tuple_of(items: list[bytes], small: bool = True) -> bytes:
    if small and len(items) == 0:
        return EMPTY_TUPLE
    if small and len(items) <= 3:
        return b"".join(items) + (TUPLE1, TUPLE2, TUPLE3)[len(items) - 1]
    return MARK + b"".join(items) + TUPLE


def list_of(items: list[bytes]) -> bytes:
    return MARK + b"".join(items) + LIST


def program(body: bytes, protocol: int | None, framed: bool = False) -> bytes:
    """A whole pickle: PROTO (unless None), the body (in one FRAME if asked), STOP."""
    inner = body + STOP
    if framed:
        inner = frame(inner)
    return (proto(protocol) if protocol is not None else b"") + inner


# --- benign values, for benign variants and the stream pickles of legacy files ---

def benign_value(protocol: int) -> bytes:
    """{'weight': [1, 2, 3], 'name': 'layer', 'ok': True} spelled for the protocol."""
    text = "UNICODE" if protocol < 1 else "BINUNICODE" if protocol < 4 else "SHORT_BINUNICODE"
    ints = [integer(i, textual=protocol < 1) for i in (1, 2, 3)]
    true = b"I01\n" if protocol < 2 else NEWTRUE
    return (MARK + string("weight", text) + list_of(ints) + string("name", text) + string("layer", text)
            + string("ok", text) + true + DICT)
