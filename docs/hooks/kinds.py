"""The kinds the code names, read from their single sources, and the pages the
site must have for them: a page per error kind (an exception's ``.kind``), per
problem kind only a scan reports (a problem's ``kind``), and per SARIF rule.

mkdocs runs this as a hook (mkdocs.yml): a kind added in code without its page,
or a page left for a kind the code no longer has, fails the build;
tests/test_docs.py imports it for the same lists."""
from __future__ import annotations

import ast
import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "python" / "tensorplay"


def _rust_consts(text: str) -> dict[str, str]:
    return dict(re.findall(r'pub const ([A-Z_]+): &str = "([a-z_]+)";', text))


def error_kinds() -> list[str]:
    """Every ``.kind`` an exception of the core carries: the rows of the table
    ``error_kinds!`` in src/error.rs."""
    text = (ROOT / "src" / "error.rs").read_text()
    table = text[text.index("error_kinds! {"):]
    table = table[:table.index("\n}\n")]
    return sorted(re.findall(r'^\s+[A-Z_]+ = "([a-z_]+)", ', table, flags=re.M))


def _python_problem_kinds() -> set[str]:
    """Kinds the Python side gives problems: ``Problem("kind", ...)``, a kind
    chosen by an expression (``kind = "network" if ... else "io"``) then passed
    to ``Problem(kind, ...)``, and a pointer reading's ``(kind, reason)``."""
    kinds: set[str] = set()
    for path in PACKAGE.rglob("*.py"):
        tree = ast.parse(path.read_text())
        for func in ast.walk(tree):
            if not isinstance(func, (ast.FunctionDef, ast.Module)):
                continue
            assigned: dict[str, ast.expr] = {}
            for node in ast.walk(func):
                if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
                    assigned[node.targets[0].id] = node.value
            for node in ast.walk(func):
                if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Name):
                    continue
                if node.func.id == "Problem" and node.args:
                    first = node.args[0]
                    if isinstance(first, ast.Name) and first.id in assigned:
                        first = assigned[first.id]
                    kinds |= {c.value for c in ast.walk(first)
                              if isinstance(c, ast.Constant) and isinstance(c.value, str)}
                if node.func.id == "Reading" and len(node.args) == 5 and isinstance(node.args[4], ast.Tuple):
                    kind = node.args[4].elts[0]
                    kinds |= {c.value for c in ast.walk(kind)
                              if isinstance(c, ast.Constant) and isinstance(c.value, str) and c.value != "kind"}
    return kinds


def problem_kinds() -> list[str]:
    """The kinds only a scan reports (src/scan/report.rs ``problem_kind``, and
    the Python scanner's): the others are error kinds, with their pages."""
    rust = set(_rust_consts((ROOT / "src" / "scan" / "report.rs").read_text()).values())
    return sorted((rust | _python_problem_kinds()) - set(error_kinds()))


def rules() -> list[tuple[str, str, str, str]]:
    """The SARIF rules (``_reports.RULES``): id, name, short and full description."""
    tree = ast.parse((PACKAGE / "_reports.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", None) == "RULES":
            return [tuple(rule) for rule in ast.literal_eval(node.value)]
    raise LookupError("no RULES in _reports.py")


def docs_url() -> str:
    """pyproject.toml's Documentation URL: the site's base URL."""
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["urls"]["Documentation"]


def required_pages() -> dict[str, str]:
    """Each page the kinds need (path under docs/) and what it is for."""
    pages = {f"errors/{k}.md": f"error kind {k}" for k in error_kinds()}
    pages |= {f"problems/{k}.md": f"problem kind {k}" for k in problem_kinds()}
    pages |= {f"rules/{rule_id}.md": f"scanner rule {rule_id}" for rule_id, *_ in rules()}
    return pages


def missing_and_stale(docs: Path) -> tuple[list[str], list[str]]:
    """Pages the kinds need that do not exist; pages under errors/, problems/
    and rules/ (beside their index) that no kind needs."""
    needed = required_pages()
    missing = sorted(p for p in needed if not (docs / p).is_file())
    present = {str(p.relative_to(docs)) for folder in ("errors", "problems", "rules")
               for p in (docs / folder).glob("*.md") if p.name != "index.md"}
    return missing, sorted(present - set(needed))


def on_config(config, **kwargs):
    # site_url is pyproject's Documentation URL, one fact in one place.
    url = docs_url()
    if config.site_url and config.site_url != url:
        from mkdocs.exceptions import PluginError

        raise PluginError(f"mkdocs.yml site_url {config.site_url} is not pyproject's Documentation URL {url}")
    config.site_url = url
    return config


def on_pre_build(config, **kwargs):
    missing, stale = missing_and_stale(Path(config.docs_dir))
    if missing or stale:
        from mkdocs.exceptions import PluginError

        raise PluginError(f"docs pages for the code's kinds: missing {missing}, for no kind {stale}")
