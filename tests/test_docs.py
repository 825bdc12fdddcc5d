"""The documentation site (mkdocs.yml, docs/): it builds in strict mode, every
kind the code names has its page and every SARIF helpUri is a built page, every
public name has a docstring, and the Python examples on the pages run."""
from __future__ import annotations

import importlib
import inspect
import io
import os
import re
import subprocess
import sys
import tokenize
from pathlib import Path

import griffe
import pytest
import tensorplay
from tensorplay import _reports, scanner

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
sys.path.insert(0, str(DOCS / "hooks"))
import kinds  # noqa: E402  (docs/hooks/kinds.py: the kinds, read from the code)

PUBLIC_MODULES = ["tensorplay", "tensorplay.serialization", "tensorplay.scanner", "tensorplay.scanner.ray",
                  "tensorplay.pickle", "tensorplay.dcp", "tensorplay.utils", "tensorplay.utils.serialization"]
# The package the examples must import: the one under test, not another installed copy.
PACKAGE_PARENT = str(Path(tensorplay.__file__).resolve().parents[1])


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("site")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(out)], cwd=ROOT,
                          capture_output=True, text=True, env=env, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    return out


def test_site_url_is_the_documentation_url(site: Path) -> None:
    assert _reports.DOCS_URL == kinds.docs_url()
    sitemap = (site / "sitemap.xml").read_text()
    assert f"<loc>{_reports.DOCS_URL}rules/TP001/</loc>" in sitemap


def test_every_sarif_help_uri_is_a_built_page(site: Path) -> None:
    log = _reports.sarif([], scanner.Policy(), 0)
    rules = log["runs"][0]["tool"]["driver"]["rules"]
    assert [r["id"] for r in rules] == [rule_id for rule_id, *_ in _reports.RULES]
    for rule in rules:
        uri = rule["helpUri"]
        assert uri.startswith(_reports.DOCS_URL), uri
        page = site / uri[len(_reports.DOCS_URL):] / "index.html"
        assert page.is_file(), f"{rule['id']}: {uri} is no page of the built site"
        assert rule["id"] in page.read_text()


def test_every_kind_in_the_code_has_its_page() -> None:
    # The lists are read from the code; known members show the reading works.
    assert {"unsafe_global", "malformed_archive", "limit", "io"} <= set(kinds.error_kinds())
    assert {"torchscript", "parser_disagreement", "too_large", "nothing_to_scan"} <= set(kinds.problem_kinds())
    assert "TP005" in [rule_id for rule_id, *_ in kinds.rules()]
    assert kinds.missing_and_stale(DOCS) == ([], [])


def test_a_kind_without_a_page_fails_the_check(tmp_path: Path) -> None:
    for folder in ("errors", "problems", "rules"):
        (tmp_path / folder).mkdir()
    for page in kinds.required_pages():
        (tmp_path / page).write_text("#\n")
    (tmp_path / "rules" / "TP005.md").unlink()
    (tmp_path / "problems" / "gone.md").write_text("#\n")
    assert kinds.missing_and_stale(tmp_path) == (["rules/TP005.md"], ["problems/gone.md"])


def _own_docstring(obj: object) -> str | None:
    if inspect.isclass(obj):
        return obj.__dict__.get("__doc__")
    return getattr(obj, "__doc__", None)


def _public_names() -> list[tuple[str, str]]:
    return [(module, name) for module in PUBLIC_MODULES for name in importlib.import_module(module).__all__]


@pytest.mark.parametrize(("module", "name"), _public_names(), ids=lambda v: v)
def test_public_name_is_documented(module: str, name: str) -> None:
    obj = getattr(importlib.import_module(module), name)
    if inspect.isclass(obj) or inspect.isroutine(obj) or inspect.ismodule(obj):
        assert (_own_docstring(obj) or "").strip(), f"{module}.{name} has no docstring"
        return
    # Data (a constant, a preset list): an attribute docstring in the source, or
    # its own entry on the module's API page.
    package = griffe.load(module, search_paths=[PACKAGE_PARENT], allow_inspection=False)
    member = package.members.get(name)
    documented = member is not None and not member.is_alias and member.docstring is not None
    page = (DOCS / "api" / _API_PAGES[module]).read_text()
    assert documented or re.search(rf"^- `{re.escape(name)}`: ", page, re.M), \
        f"{module}.{name} has no docstring and no entry on docs/api/{_API_PAGES[module]}"


_API_PAGES = {"tensorplay": "tensorplay.md", "tensorplay.serialization": "serialization.md",
              "tensorplay.scanner": "scanner.md", "tensorplay.scanner.ray": "ray.md", "tensorplay.pickle": "pickle.md",
              "tensorplay.dcp": "dcp.md", "tensorplay.utils": "utils.md", "tensorplay.utils.serialization": "utils.md"}


def test_the_benchmark_chart_is_drawn_from_the_committed_results() -> None:
    done = subprocess.run([sys.executable, str(ROOT / "benches" / "chart.py"), "--check"], capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    svg = (DOCS / "assets" / "bench_ratios.svg").read_text()
    assert svg.count("<rect") >= 4 * 5 and "CPU:" in svg


# --- the examples on the pages -------------------------------------------------------

_SETUP = re.compile(r"^<!-- test-setup\n(.*?)^-->$", re.M | re.S)
_BLOCK = re.compile(r"^(?:<!-- test: skip \((?P<skip>[^)]*(?:\([^)]*\)[^)]*)*)\) -->\n)?```python\n(?P<code>.*?)^```$",
                    re.M | re.S)


def _examples() -> tuple[list[Path], list[tuple[str, str]]]:
    runnable, skipped = [], []
    for page in sorted(DOCS.rglob("*.md")):
        for n, block in enumerate(_BLOCK.finditer(page.read_text())):
            if block["skip"]:
                skipped.append((f"{page.relative_to(DOCS)}#{n}", block["skip"]))
            elif page not in runnable:
                runnable.append(page)
    return runnable, skipped


_RUNNABLE, _SKIPPED = _examples()


def test_the_extractor_finds_the_examples() -> None:
    names = {str(p.relative_to(DOCS)) for p in _RUNNABLE}
    assert {"getting-started.md", "loading.md", "refused.md", "formats/dcp.md", "api/tensorplay.md"} <= names


@pytest.mark.parametrize("page", _RUNNABLE, ids=lambda p: str(p.relative_to(DOCS)))
def test_page_examples_run(page: Path, tmp_path: Path) -> None:
    """A page's blocks run in order, as one script in a fresh process (patches and
    allowlists are process-wide), in an empty folder its setup block fills."""
    text = page.read_text()
    setup = "\n".join(m[1] for m in _SETUP.finditer(text))
    blocks = [m["code"] for m in _BLOCK.finditer(text) if not m["skip"]]
    script = tmp_path / "example.py"
    script.write_text(setup + "\n" + "\n".join(blocks))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([PACKAGE_PARENT, os.environ.get("PYTHONPATH", "")]),
           "RAY_USAGE_STATS_ENABLED": "0", "PYTHONWARNINGS": "ignore"}
    done = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, env=env,
                          timeout=600)
    assert done.returncode == 0, f"{page.relative_to(DOCS)}:\n{done.stdout}\n{done.stderr}"


def _names_in_examples(page: Path) -> set[tuple[str | None, str]]:
    """The names the runnable blocks of a page use as code (not in a comment or a
    string): ``(None, name)`` for a bare name (imported with ``from ... import``),
    ``(owner, name)`` for ``owner.name``."""
    code = "\n".join(m["code"] for m in _BLOCK.finditer(page.read_text()) if not m["skip"])
    tokens = [t for t in tokenize.generate_tokens(io.StringIO(code).readline)
              if t.type in (tokenize.NAME, tokenize.OP)]
    used = set()
    for i, token in enumerate(tokens):
        if token.type != tokenize.NAME:
            continue
        dotted = i >= 2 and tokens[i - 1].string == "." and tokens[i - 2].type == tokenize.NAME
        used.add((tokens[i - 2].string if dotted else None, token.string))
    return used


def _has_an_example(module: str, name: str, api: Path) -> bool:
    """Whether ``module.name`` is used in a runnable example of its module's API
    page (bare, or as an attribute of the module: ``serialization.load``, not
    ``json.load``), or of the page of a public module that exports the same
    object under that name (the error classes and the allowlist are
    ``tensorplay``'s and ``tensorplay.serialization``'s)."""
    obj = getattr(importlib.import_module(module), name)
    homes = {(_API_PAGES[other], other.rsplit(".", 1)[-1]) for other, same in _public_names()
             if same == name and getattr(importlib.import_module(other), same) is obj}
    return any({(None, name), (owner, name)} & _names_in_examples(api / page) for page, owner in homes)


@pytest.mark.parametrize(("module", "name"), _public_names(), ids=lambda v: v)
def test_public_name_has_an_example(module: str, name: str) -> None:
    assert _has_an_example(module, name, DOCS / "api"), \
        f"{module}.{name} is used in no runnable example of docs/api/{_API_PAGES[module]}"


def test_a_name_without_a_runnable_example_fails_the_check(tmp_path: Path) -> None:
    for page in set(_API_PAGES.values()):
        (tmp_path / page).write_text("#\n")
    (tmp_path / "tensorplay.md").write_text(
        "`inspect` in prose.\n\n"
        "<!-- test: skip (tests/test_docs.py) -->\n```python\ntensorplay.inspect('model.pt')\n```\n\n"
        "```python\ninspected = tensorplay.load('model.pt')  # inspect\nprint('inspect')\n```\n")
    (tmp_path / "serialization.md").write_text("```python\nserialization.add_safe_globals([])\n```\n")
    (tmp_path / "pickle.md").write_text("```python\nimport json\njson.load(open('x.json'))\n```\n")
    assert _has_an_example("tensorplay", "load", tmp_path)
    # In prose, a skipped block, a comment, a string, or as part of a longer name: no example.
    assert not _has_an_example("tensorplay", "inspect", tmp_path)
    # A re-export may have its example on the page of the module it comes from...
    assert _has_an_example("tensorplay", "add_safe_globals", tmp_path)
    # ...but another object of the same name may not: tensorplay.pickle.load is not
    # tensorplay.load, nor is json.load.
    assert not _has_an_example("tensorplay.pickle", "load", tmp_path)


@pytest.mark.parametrize(("block", "reason"), _SKIPPED, ids=[b for b, _ in _SKIPPED])
def test_an_example_not_run_here_names_the_test_that_runs_its_code(block: str, reason: str) -> None:
    """A block the page test cannot run says which test of the suite runs what it shows."""
    import re

    named = re.findall(r"tests/test_\w+\.py", reason)
    assert named, f"{block}: the reason names no test file: {reason}"
    for test in named:
        assert (DOCS.parent / test).is_file(), f"{block}: {test} does not exist"
