#!/usr/bin/env python3
"""Fail on a `use` in src/ that points up the data path, or sideways into a layer
that is not below: each top-level module of the crate may use only modules of a
lower layer (and itself). The layers, lowest first, are the graph of docs/contributing/layout.md."""
from __future__ import annotations

import re
import sys
from pathlib import Path

SRC = Path(__file__).resolve().parent.parent / "src"

LAYERS: list[set[str]] = [
    {"limits", "parallel"},
    {"error"},
    {"archive", "value"},
    {"pickle"},
    {"torch"},
    {"checkpoint", "save"},
    {"fill", "raw", "scan"},
    {"api"},
    {"fuzzing"},
]
RANK = {module: rank for rank, layer in enumerate(LAYERS) for module in layer}
# `crate::x` anywhere in code: a use or a path in an expression; and each `x` of
# a `crate::{x::.., y}` group.
PATH = re.compile(r"\bcrate::([a-z_]+)")
GROUP = re.compile(r"\bcrate::\{([^}]*)\}")


def module_of(path: Path) -> str:
    parts = path.relative_to(SRC).parts
    return parts[0].removesuffix(".rs")


def uses(text: str):
    """(line number, module) of every `crate::` path in the code, comments left out
    (doc links may name any module)."""
    code = "\n".join(line.split("//", 1)[0] for line in text.splitlines())
    for match in PATH.finditer(code):
        yield code.count("\n", 0, match.start()) + 1, match.group(1)
    for match in GROUP.finditer(code):
        number = code.count("\n", 0, match.start()) + 1
        for item in match.group(1).split(","):
            if item.strip():
                yield number, item.strip().split("::")[0]


def main() -> int:
    problems = []
    for path in sorted(SRC.rglob("*.rs")):
        module = module_of(path)
        if module == "lib":
            continue
        if module not in RANK:
            problems.append(f"{path}: module {module!r} has no layer in .ci/check_layers.py")
            continue
        for number, target in uses(path.read_text()):
            if target == module:
                continue
            if target not in RANK:
                problems.append(f"{path}:{number}: crate::{target} has no layer")
            elif RANK[target] >= RANK[module]:
                problems.append(
                    f"{path}:{number}: {module} (layer {RANK[module]}) uses crate::{target} "
                    f"(layer {RANK[target]}): dependencies must point down"
                )
    for problem in problems:
        print(problem)
    if not problems:
        print(f"layers: every `crate::` path in {SRC.name}/ points down")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
