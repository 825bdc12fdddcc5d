"""`tensorplay scan` reports for programs: one JSON document, and SARIF 2.1.0 for
GitHub code scanning and other SARIF viewers. Both say what the policy in force
(`--fail-on`) makes of each finding."""
from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from . import _core
from ._core import __version__
from .scanner import STDIN, GlobalFinding, Policy, Problem, ScanReport

# Raised when a field changes meaning or goes; new fields keep it.
SCHEMA_VERSION = 1

# The documentation site (pyproject.toml's Documentation URL, mkdocs' site_url):
# each SARIF rule's helpUri is its page there (tests/test_docs.py checks both).
DOCS_URL = "https://tensorplay.github.io/tensorplay-serialization/"


def rule_page(rule_id: str) -> str:
    """The rule's page on the documentation site, relative to it."""
    return f"rules/{rule_id}/"


def json_document(reports: Sequence[ScanReport], policy: Policy, started: str, seconds: float,
                  exit_code: int, passed_over: Sequence[tuple[str, str]] = ()) -> dict[str, Any]:
    """One document: a ``summary`` of the run (with what folder walks passed
    over, and why, and the real readers the scan modelled, each with the version
    it matches), and a record per file."""
    counts = {verdict: sum(r.verdict == verdict for r in reports)
              for verdict in ("clean", "unsafe", "unreadable", "skipped")}
    return {
        "summary": {
            "tool": "tensorplay", "version": __version__, "schema_version": SCHEMA_VERSION,
            "started": started, "duration_seconds": round(seconds, 6), "files": len(reports), **counts,
            "policy": policy.to_json(), "exit_code": exit_code,
            "passed_over": [{"path": path, "reason": why} for path, why in passed_over],
            "readers": [{"name": name, "reader": reader, "version": version, "reads": reads}
                        for name, reader, version, reads in _core.reader_models()],
        },
        "files": [r.to_json() for r in reports],
    }


# One rule per kind of finding, as SARIF viewers group them.
RULES = [
    ("TP001", "dangerous-global", "A global that runs code, touches files or the network, or unpickles nested "
     "data", "The pickle names a global on tensorplay's denylist: loading the file with pickle, or torch.load("
     "weights_only=False), would call it. Treat the file as hostile."),
    ("TP002", "global-not-allowlisted", "A global outside the allowlist",
     "The pickle names a class or function that weights-only loading does not allow. It is not known to run "
     "code, but a load would import and call it: allowlist it if you trust it."),
    ("TP003", "unreadable", "A file that could not be read to its end",
     "The scanner could not read all of the file (malformed, truncated, over a limit, or of an unknown format), "
     "so it cannot say the file is safe."),
    ("TP004", "parser-disagreement", "Readers of the file would read different things",
     "Two readers of the same bytes (zip readers, pickle readers) would find different contents: a way to show "
     "one reader a benign file and another a hostile one."),
    ("TP005", "runs-its-code", "A file whose reader runs code the file carries",
     "The file is an archive of code as well as data (a TorchScript archive, whose code/ torch.jit.load compiles "
     "and runs; a torch.package archive, whose modules PackageImporter imports; mobile bytecode, which torch's "
     "lite interpreter runs; an AOTInductor package, whose compiled code aoti_load_package runs), so whatever "
     "its pickles name, its reader runs what it says. Take the tensors of a TorchScript archive out with "
     "tensorplay (jit_state_dict, unknown_globals='stub') and load those."),
]
_RULE_INDEX = {rule_id: i for i, (rule_id, *_) in enumerate(RULES)}


def _uri(path: str) -> str:
    from urllib.parse import quote

    if path == STDIN:
        return "stdin"
    # `scan .` walks `./models/x.pt`; code scanning matches `models/x.pt` to the repository's file.
    posix = os.path.normpath(path).replace(os.sep, "/")
    return "file://" + quote(posix) if os.path.isabs(path) else quote(posix)


def _result(rule_id: str, failing: bool, text: str, path: str, properties: dict[str, Any]) -> dict[str, Any]:
    return {
        "ruleId": rule_id,
        "ruleIndex": _RULE_INDEX[rule_id],
        "level": "error" if failing else "warning",
        "message": {"text": text},
        "locations": [{"physicalLocation": {"artifactLocation": {"uri": _uri(path)}}}],
        "properties": properties,
    }


def _finding_result(report: ScanReport, f: GlobalFinding, policy: Policy) -> dict[str, Any]:
    where = f"{f.location}, byte {f.offset}" if f.location else f"byte {f.offset}"
    kind = "dangerous global" if f.dangerous else "global outside the allowlist"
    return _result("TP001" if f.dangerous else "TP002", policy.fails(f), f"{kind} {f.name} at {where}", report.path,
                   {"global": f.name, "module": f.module, "entry": f.location, "offset": f.offset,
                    "dangerous": f.dangerous, "wrappers": list(f.wrappers), "format": report.format})


def _problem_result(report: ScanReport, p: Problem, policy: Policy) -> dict[str, Any]:
    rule_id = "TP005" if p.runs_code else "TP004" if p.kind == "parser_disagreement" else "TP003"
    return _result(rule_id, policy.fails(p), str(p), report.path,
                   {"kind": p.kind, "entry": p.location, "format": report.format})


def sarif(reports: Sequence[ScanReport], policy: Policy, exit_code: int) -> dict[str, Any]:
    """A SARIF 2.1.0 log of one run: a result per global found and per problem."""
    results = []
    for report in reports:
        results += [_finding_result(report, f, policy) for f in report.findings]
        results += [_problem_result(report, p, policy) for p in report.problems]
    rules = [{"id": rule_id, "name": name, "shortDescription": {"text": short}, "fullDescription": {"text": full},
              "helpUri": DOCS_URL + rule_page(rule_id), "defaultConfiguration": {"level": "error"}}
             for rule_id, name, short, full in RULES]
    return {
        "$schema": "https://json.schemastore.org/sarif-2.1.0.json",
        "version": "2.1.0",
        "runs": [{
            "tool": {"driver": {"name": "tensorplay", "version": __version__, "rules": rules}},
            "invocations": [{"executionSuccessful": True, "exitCode": exit_code}],
            "artifacts": [{"location": {"uri": _uri(r.path)}} for r in reports],
            "results": results,
            "properties": {"policy": policy.to_json()},
        }],
    }
