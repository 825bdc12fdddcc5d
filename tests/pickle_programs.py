"""Pickle programs as lists of ops, assembled to bytes: every opcode of protocols
0 to 5, each argument given raw so that a program can hold what no pickler
writes (non-minimal ints, invalid UTF-8, frames that end mid-opcode)."""
from __future__ import annotations

import struct

NO_ARGUMENT = {
    "STOP": b".", "NONE": b"N", "NEWTRUE": b"\x88", "NEWFALSE": b"\x89", "MARK": b"(",
    "EMPTY_TUPLE": b")", "TUPLE": b"t", "TUPLE1": b"\x85", "TUPLE2": b"\x86", "TUPLE3": b"\x87",
    "EMPTY_LIST": b"]", "APPEND": b"a", "APPENDS": b"e", "LIST": b"l", "EMPTY_DICT": b"}",
    "SETITEM": b"s", "SETITEMS": b"u", "DICT": b"d", "EMPTY_SET": b"\x8f", "ADDITEMS": b"\x90",
    "FROZENSET": b"\x91", "REDUCE": b"R", "NEWOBJ": b"\x81", "NEWOBJ_EX": b"\x92", "BUILD": b"b",
    "OBJ": b"o", "STACK_GLOBAL": b"\x93", "BINPERSID": b"Q", "POP": b"0", "DUP": b"2",
    "POP_MARK": b"1", "MEMOIZE": b"\x94", "NEXT_BUFFER": b"\x97", "READONLY_BUFFER": b"\x98",
}

# Opcodes whose argument is a line of text (the newline is added here).
TEXT_LINE = {"INT": b"I", "LONG": b"L", "FLOAT": b"F", "STRING": b"S", "UNICODE": b"V", "PUT": b"p",
             "GET": b"g", "PERSID": b"P"}

# Opcodes whose argument is a length-prefixed byte string: (code, length format).
COUNTED = {
    "LONG1": (b"\x8a", "<B"), "LONG4": (b"\x8b", "<i"), "SHORT_BINSTRING": (b"U", "<B"),
    "BINSTRING": (b"T", "<i"), "SHORT_BINBYTES": (b"C", "<B"), "BINBYTES": (b"B", "<I"),
    "BINBYTES8": (b"\x8e", "<Q"), "SHORT_BINUNICODE": (b"\x8c", "<B"), "BINUNICODE": (b"X", "<I"),
    "BINUNICODE8": (b"\x8d", "<Q"), "BYTEARRAY8": (b"\x96", "<Q"),
}

# Opcodes with one fixed-size int: (code, format).
FIXED = {
    "PROTO": (b"\x80", "<B"), "BININT1": (b"K", "<B"), "BININT2": (b"M", "<H"), "BININT": (b"J", "<i"),
    "BINPUT": (b"q", "<B"), "LONG_BINPUT": (b"r", "<I"), "BINGET": (b"h", "<B"), "LONG_BINGET": (b"j", "<I"),
    "EXT1": (b"\x82", "<B"), "EXT2": (b"\x83", "<H"), "EXT4": (b"\x84", "<i"), "FRAME": (b"\x95", "<Q"),
}


def encode(op) -> bytes:
    name, *args = op
    if name in NO_ARGUMENT:
        return NO_ARGUMENT[name]
    (arg,) = args
    if name in TEXT_LINE:
        return TEXT_LINE[name] + arg + b"\n"
    if name in COUNTED:
        code, length = COUNTED[name]
        return code + struct.pack(length, len(arg)) + arg
    if name in FIXED:
        code, layout = FIXED[name]
        return code + struct.pack(layout, arg)
    if name == "BINFLOAT":  # raw big-endian bytes: every NaN payload
        return b"G" + arg
    if name in ("GLOBAL", "INST"):
        module, qualname = arg
        return (b"c" if name == "GLOBAL" else b"i") + module.encode() + b"\n" + qualname.encode() + b"\n"
    raise AssertionError(name)


def assemble(ops) -> bytes:
    return b"".join(encode(op) for op in ops)


def mutate(ops: list, mutations) -> list:
    """`ops` with each `(kind, where, op)` applied in turn: "delete", "duplicate" or
    "swap" the op at `where` (modulo the length), or "insert" `op` there."""
    ops = list(ops)
    for kind, where, op in mutations:
        i = where % (len(ops) + 1)
        if kind == "insert":
            ops.insert(i, op)
        elif i < len(ops) and kind == "delete":
            del ops[i]
        elif i < len(ops) and kind == "duplicate":
            ops.insert(i, ops[i])
        elif i + 1 < len(ops) and kind == "swap":
            ops[i], ops[i + 1] = ops[i + 1], ops[i]
    return ops


MUTATIONS = ("delete", "insert", "duplicate", "swap")


def write_checkpoint(torch, path, pickle: bytes, records: dict[str, bytes]) -> None:
    """A checkpoint holding `pickle` as data.pkl and `records` as data/<key>, in
    the order torch.save writes them, through torch's own archive writer."""
    writer = torch._C.PyTorchFileWriter(str(path))
    head = [("data.pkl", pickle), (".format_version", b"1"), (".storage_alignment", b"64"), ("byteorder", b"little")]
    for name, data in head + [(f"data/{key}", data) for key, data in records.items()]:
        writer.write_record(name, data, len(data))
    writer.write_end_of_file()
