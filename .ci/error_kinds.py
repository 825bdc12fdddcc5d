"""Write, or with --check compare, what is made from the core's table of error
kinds (src/error.rs `error_kinds!`, given to Python as `_core.ERROR_KINDS`):

- the `Literal` types of `_core.pyi` (every kind; the kinds `_core.error` makes, by class),
- the table of kinds and the table of classes in docs/errors/index.md,
- the "Raised as" line of each kind's page, docs/errors/<kind>.md.

Run it after changing the table: `python .ci/error_kinds.py`. tests/test_error_kinds.py
runs `--check`, so a table and its copies that differ fail the tests.
"""
from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
STUB = ROOT / "python" / "tensorplay" / "_core.pyi"
ERRORS = ROOT / "docs" / "errors"
SOURCE = "src/error.rs `error_kinds!`, by .ci/error_kinds.py"


def _kinds() -> list[tuple[str, str, str, bool]]:
    from tensorplay import _core

    return [tuple(k) for k in _core.ERROR_KINDS]  # type: ignore[misc]


def _class_doc(name: str) -> str:
    from tensorplay import _core

    return " ".join((getattr(_core, name).__doc__ or "").split())


def _literal(codes: list[str]) -> str:
    one_line = "Literal[" + ", ".join(f'"{c}"' for c in codes) + "]"
    if len(one_line) <= 80:
        return one_line
    return "Literal[\n" + "".join(f'    "{c}",\n' for c in codes) + "]"


def stub_block(kinds: list[tuple[str, str, str, bool]]) -> str:
    lines = [f"# Made from the core's table of error kinds ({SOURCE}): do not edit.",
             f"_ErrorKind: TypeAlias = {_literal([k[0] for k in kinds])}"]
    short = {"MalformedCheckpointError": "_MalformedKind", "UnsafeCheckpointError": "_UnsafeKind",
             "UnsupportedCheckpointError": "_UnsupportedKind", "LimitExceededError": "_LimitKind"}
    lines.append("# The kinds `error` makes, by the class each becomes.")
    for cls, alias in short.items():
        made = [code for code, of, _, makes in kinds if of == cls and makes]
        if made:
            lines.append(f"{alias}: TypeAlias = {_literal(made)}")
    return "\n".join(lines)


def index_block(kinds: list[tuple[str, str, str, bool]]) -> str:
    classes = ["CheckpointError"] + sorted({cls for _, cls, _, _ in kinds if cls != "OSError"},
                                           key=[k[1] for k in kinds].index)
    lines = [f"<!-- Made from the core's table of error kinds ({SOURCE}): do not edit. -->", "",
             "| class | meaning |", "| --- | --- |"]
    lines += [f"| `{'tensorplay.' if cls == 'CheckpointError' else ''}{cls}` | {_class_doc(cls)} |" for cls in classes]
    lines += ["", "Each `.kind` an exception carries (and a scan's problem of that kind), with what it means; "
              "each page gives an example message and what to do:", "",
              "| kind | raised as | meaning |", "| --- | --- | --- |"]
    lines += [f"| [`{code}`]({code}.md) | `{cls}` | {summary} |" for code, cls, summary, _ in kinds]
    return "\n".join(lines)


def raised_as(code: str, cls: str) -> str:
    if cls == "OSError":
        return (f"Raised as: `OSError` or its subclass for the error (`FileNotFoundError`, `PermissionError`, "
                f"`IsADirectoryError`...); in a scan, a problem of kind `{code}`.")
    return f'Raised as: `{cls}` (`.kind == "{code}"`); in a scan, a problem of this kind.'


def _between(text: str, start: str, end: str, block: str, where: Path) -> str:
    if start not in text or end not in text:
        raise SystemExit(f"{where}: no {start} ... {end} markers")
    head, rest = text.split(start, 1)
    _, tail = rest.split(end, 1)
    return f"{head}{start}\n{block}\n{end}{tail}"


def expected() -> dict[Path, str]:
    """Each file made from the table, as it should read."""
    kinds = _kinds()
    files = {STUB: _between(STUB.read_text(), "# <error-kinds>", "# </error-kinds>", stub_block(kinds), STUB)}
    index = ERRORS / "index.md"
    files[index] = _between(index.read_text(), "<!-- <error-kinds> -->", "<!-- </error-kinds> -->",
                            index_block(kinds), index)
    for code, cls, _, _ in kinds:
        page = ERRORS / f"{code}.md"
        text = page.read_text() if page.exists() else f"# `{code}`\n\nRaised as:\n"
        line = raised_as(code, cls)
        files[page] = re.sub(r"^Raised as:.*$", lambda _, line=line: line, text, count=1, flags=re.M)
    return files


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="fail when a file differs from the table")
    args = parser.parse_args(argv)
    stale = []
    for path, text in expected().items():
        if not path.exists() or path.read_text() != text:
            stale.append(path.relative_to(ROOT))
            if not args.check:
                path.write_text(text)
    if args.check and stale:
        print(f"made from the table of error kinds, and out of date: {', '.join(map(str, stale))}; "
              "run python .ci/error_kinds.py", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
