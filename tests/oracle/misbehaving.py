"""Readers that misbehave on purpose, for the sandbox's own tests
(tests/test_oracle.py): each stands for what a hostile file can make a real
reader do."""
from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import time

from .payloads import MARKER
from .readers import Reader


def hang(path: str) -> None:
    time.sleep(3600)


def spin(path: str) -> None:
    while True:
        pass


def allocate(path: str) -> None:
    hoard = []
    while True:
        hoard.append(bytearray(1 << 26))


def segfault(path: str) -> None:
    ctypes.string_at(0)


def abort(path: str) -> None:
    os.abort()


def touch(path: str) -> None:
    with open(MARKER, "w"):
        pass


def touch_later(path: str) -> None:
    """The marker made by a process the reader leaves running, as ``Popen`` does."""
    subprocess.Popen(["sh", "-c", f"sleep 0.2; touch {MARKER}"])


def kill_server(path: str) -> None:
    os.kill(os.getppid(), signal.SIGKILL)


def quiet(path: str) -> None:
    with open(path, "rb") as f:
        f.read()


READERS = [Reader(fn.__name__, "a misbehaving test reader", fn, frozenset({"test"}))
           for fn in (hang, spin, allocate, segfault, abort, touch, touch_later, kill_server, quiet)]
