"""The order in which the linker lays out the extension's hot functions
(bindings/hot_code_order.txt, applied by bindings/build_script.rs).

A fresh process pays a page fault for every 64 KiB window of extension code its
first call reaches that the import did not: on this machine that was a quarter of
a first `get_unsafe_globals_in_checkpoint`. Laid out in the order below (the
import's functions, then each public operation's, most latency-sensitive first),
the code of a first call sits in the windows the import already faulted in.

    python benches/link_order.py           # record the functions each operation runs, write the file
    python benches/link_order.py --check   # fail when the file no longer names what runs

Needs valgrind (callgrind lists the functions executed) and the extension
installed in the running interpreter. Symbol names carry hashes that change with
the compiler version, the dependencies and the features, so a toolchain bump
makes the file stale: the build still works, only the layout is lost, and
`--check` (run by CI) says so.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ORDER_FILE = ROOT / "bindings" / "hot_code_order.txt"
FIXTURES = ROOT / "tests" / "fixtures" / "torch"
EXTENSION = "_core.abi3.so"

_ZIP = repr(str(FIXTURES / "training_checkpoint.pt"))
_LEGACY = repr(str(FIXTURES / "legacy_format.pt"))


def _after_import(*lines: str) -> str:
    return "\n".join(["import tensorplay, tensorplay.serialization, tensorplay.scanner", *lines])


# Each operation runs in its own process after the import; its functions that no
# earlier entry ran follow theirs.
OPERATIONS = [
    ("import", _after_import()),
    (
        "get_unsafe_globals_in_checkpoint",
        _after_import(f"tensorplay.serialization.get_unsafe_globals_in_checkpoint({_ZIP})"),
    ),
    ("scanner.scan, pickles only", _after_import(f"tensorplay.scanner.scan({_ZIP}, pickles_only=True)")),
    ("scanner.scan", _after_import(f"tensorplay.scanner.scan({_ZIP})")),
    (
        "load, numpy backend",
        _after_import(*(f"tensorplay.load({_ZIP}, backend='numpy', mmap={m})" for m in (False, True))),
    ),
    (
        "load, torch backend",
        _after_import("import torch", *(f"tensorplay.load({_ZIP}, mmap={m})" for m in (False, True))),
    ),
    (
        "legacy files",
        _after_import(
            f"tensorplay.serialization.get_unsafe_globals_in_checkpoint({_LEGACY})",
            f"tensorplay.scanner.scan({_LEGACY})",
            f"tensorplay.load({_LEGACY}, backend='numpy')",
        ),
    ),
]

# `--check` tolerates this share of hot functions missing from the file: a new
# helper or two should not fail CI, a toolchain bump (every hash changes) does.
MISSING_TOLERANCE = 0.05


def functions_run(code: str) -> list[str]:
    """The extension's functions, by mangled name, that `code` executes."""
    with tempfile.TemporaryDirectory() as tmp:
        out_file = os.path.join(tmp, "callgrind.out")
        subprocess.run(
            ["valgrind", "--tool=callgrind", "--demangle=no", f"--callgrind-out-file={out_file}",
             sys.executable, "-c", code],
            check=True,
            capture_output=True,
            cwd=tmp,
        )
        return _extension_functions(Path(out_file).read_text())


def _extension_functions(callgrind_out: str) -> list[str]:
    # callgrind compresses repeated names: "(7) name" defines id 7, "(7)" reuses it.
    names: dict[str, dict[str, str]] = {"ob": {}, "fn": {}}
    current_object = ""
    found: dict[str, None] = {}
    for line in callgrind_out.splitlines():
        key, sep, value = line.partition("=")
        if not sep or key not in ("ob", "cob", "fn", "cfn"):
            continue
        table = names["ob" if key in ("ob", "cob") else "fn"]
        match = re.fullmatch(r"\((\d+)\)(?: (.*))?", value)
        if match is None:
            name = value
        else:
            ident, name = match.groups()
            if name is None:
                name = table.get(ident, "")
            else:
                table[ident] = name
        if key == "ob":
            current_object = name
        elif key == "fn" and current_object.endswith(EXTENSION) and not name.startswith("0x"):
            found[name] = None
    return list(found)


def hot_order() -> list[tuple[str, list[str]]]:
    seen: set[str] = set()
    groups = []
    for operation, code in OPERATIONS:
        new = [name for name in functions_run(code) if name not in seen]
        seen.update(new)
        groups.append((operation, new))
    return groups


def write(groups: list[tuple[str, list[str]]]) -> None:
    lines = [
        "# Written by benches/link_order.py: the extension's functions in the order the",
        "# linker lays them out. Regenerate after a toolchain or dependency bump.",
    ]
    for operation, names in groups:
        lines.append(f"# {operation}")
        lines.extend(names)
    ORDER_FILE.write_text("\n".join(lines) + "\n")


def committed() -> set[str]:
    return {line.strip() for line in ORDER_FILE.read_text().splitlines() if line.strip() and not line.startswith("#")}


def check(groups: list[tuple[str, list[str]]]) -> int:
    listed = committed()
    hot = [name for _, names in groups for name in names]
    missing = [name for name in hot if name not in listed]
    share = len(missing) / max(len(hot), 1)
    print(f"{len(hot) - len(missing)} of {len(hot)} hot functions are in {ORDER_FILE.relative_to(ROOT)}")
    if share > MISSING_TOLERANCE:
        print(f"{share:.0%} are missing (tolerance {MISSING_TOLERANCE:.0%}), e.g. {missing[:3]}: "
              "run python benches/link_order.py", file=sys.stderr)
        return 1
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true", help="compare with the committed file instead of writing it")
    args = parser.parse_args()
    groups = hot_order()
    if args.check:
        return check(groups)
    write(groups)
    for operation, names in groups:
        print(f"{operation}: {len(names)} functions")
    return 0


if __name__ == "__main__":
    sys.exit(main())
