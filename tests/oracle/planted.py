"""A module whose import creates the marker: what a file stands on when it makes
a reader import a module it names (torch.export's pytree contexts name an enum's
or a defaultdict factory's module). It stands for an attacker's module on the
reader's path, or any installed module that acts when imported. Only ever
imported by a reader inside the sandbox (its children work in a fresh folder):
the harness itself never imports it."""
from __future__ import annotations

import enum

from .payloads import MARKER

with open(MARKER, "w"):
    pass


class Color(enum.Enum):
    RED = 1


def factory() -> list:
    return []
