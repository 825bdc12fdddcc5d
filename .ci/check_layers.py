#!/usr/bin/env python3
"""Fail on a `use` in src/ that points up the data path, or sideways into a layer
that is not below: each top-level module of the crate may use only modules of a
lower layer (and itself). The layers, lowest first, are the graph of docs/contributing/layout.md.

Also fail on a circle between files, in the core (src/) and the bindings crate
(bindings/src/): two files that reach into each other, directly or through
others, are one piece of code in two places. (A file's own submodules and
ancestors are its own: `mod.rs` and the files under it may use each other.)

And in the Python package (python/tensorplay/): on a circle of imports between
modules, whether the import is at module level or inside a function (only
`if TYPE_CHECKING:` imports are left out), and on a module importing another's
underscore name: what modules share is named without one."""
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


ROOTS = [SRC, SRC.parent / "bindings" / "src"]
# `crate::a::b` or `super::a`, then either more path or a `{...}` group.
HEAD = re.compile(r"\b(crate|super)((?:::[A-Za-z_][A-Za-z_0-9]*)*)(::\{)?")


def _group_items(code: str, start: int) -> tuple[list[str], int]:
    """The paths inside the group opening at `start` (just past its `{`), nested
    groups expanded; and where the group ends."""
    items, depth, current, i = [], 1, "", start
    while i < len(code) and depth:
        c = code[i]
        if c == "{":
            inner, i = _group_items(code, i + 1)
            items.extend(current.strip().rstrip(":") + "::" + x for x in inner)
            current = ""
            continue
        if c == "}":
            depth -= 1
        elif c == ",":
            items.append(current.strip())
            current = ""
        else:
            current += c
        i += 1
    items.append(current.strip())
    return [x for x in items if x and not x.endswith("::")], i


def paths(code: str):
    """Every `crate::`/`super::` path of the code (comments left out), groups expanded,
    as (head, segments)."""
    code = "\n".join(line.split("//", 1)[0] for line in code.splitlines())
    for m in HEAD.finditer(code):
        segments = [x for x in m.group(2).split("::") if x]
        if m.group(3):
            inner, _ = _group_items(code, m.end())
            for item in inner:
                yield m.group(1), segments + [x.strip() for x in item.split("::") if x.strip()]
        else:
            yield m.group(1), segments


def file_circles(root: Path) -> list[list[str]]:
    """Strongly connected sets of more than one file, by the paths between them."""
    def module(path: Path) -> tuple[str, ...]:
        parts = path.relative_to(root).with_suffix("").parts
        return parts[:-1] if parts[-1] in ("mod", "lib") else parts

    modules = {module(p): p for p in root.rglob("*.rs")}

    def resolve(parts: list[str]) -> tuple[str, ...] | None:
        for n in range(len(parts), 0, -1):
            if tuple(parts[:n]) in modules:
                return tuple(parts[:n])
        return None

    edges: dict[tuple[str, ...], set[tuple[str, ...]]] = {m: set() for m in modules}
    for me, path in modules.items():
        for head, segments in paths(path.read_text()):
            base = list(me[:-1]) if head == "super" else []
            target = resolve(base + segments)
            # A file's ancestors and descendants are its own module tree.
            if target and target[: len(me)] != me and me[: len(target)] != target:
                edges[me].add(target)
    return circles({"/".join(m) or "lib": {"/".join(t) or "lib" for t in ts} for m, ts in edges.items()})


def circles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected sets of more than one node (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in edges.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in list(edges):
        if v not in index:
            visit(v)
    return found


PACKAGE = SRC.parent / "python" / "tensorplay"


def python_imports(package: Path) -> tuple[dict[str, set[str]], list[str]]:
    """The package's modules and the modules each imports, at module level or in a
    function (imports only type checkers read, under `if TYPE_CHECKING:`, left
    out); and each import of another module's underscore name."""
    import ast

    def name_of(path: Path) -> str:
        parts = path.relative_to(package.parent).with_suffix("").parts
        return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)

    modules = {name_of(p): p for p in package.rglob("*.py")}
    modules.update({f"{package.name}._core": package / "_core.pyi"})
    edges: dict[str, set[str]] = {m: set() for m in modules}
    private: list[str] = []
    for me, path in modules.items():
        if path.suffix == ".pyi":
            continue
        tree = ast.parse(path.read_text())
        type_only = {id(n) for node in ast.walk(tree)
                     if isinstance(node, ast.If) and getattr(node.test, "id", None) == "TYPE_CHECKING"
                     for child in node.body for n in ast.walk(child)}
        here = me if path.name == "__init__.py" else me.rpartition(".")[0]
        for node in ast.walk(tree):
            if id(node) in type_only or not isinstance(node, ast.ImportFrom) or not node.level:
                continue
            base = here.split(".")[: len(here.split(".")) - node.level + 1]
            target = ".".join(base + ([node.module] if node.module else []))
            for alias in node.names:
                if f"{target}.{alias.name}" in modules:
                    edges[me].add(f"{target}.{alias.name}")
                    continue
                edges[me].add(target)
                if alias.name.startswith("_") and not alias.name.startswith("__") and target != me:
                    private.append(f"{path}:{node.lineno}: imports {target}'s private {alias.name}")
    return edges, private


def main() -> int:
    problems = []
    for root in ROOTS:
        for circle in file_circles(root):
            problems.append(f"{root}: a circle between files: {' -> '.join(circle)}")
    imports, private = python_imports(PACKAGE)
    problems += private
    for circle in circles(imports):
        problems.append(f"{PACKAGE}: a circle of imports: {' -> '.join(circle)}")
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
        print(f"layers: every `crate::` path in {SRC.name}/ points down, no files of "
              f"{', '.join(str(r.relative_to(SRC.parent)) for r in ROOTS)} reach into each other in a circle, "
              f"and no module of {PACKAGE.relative_to(SRC.parent)} imports one that imports it back, or "
              "another's underscore name")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
