"""Where findings go: ``fuzz/oracle_findings/<class>/<signature>/``, one folder per
signature (class, generator and variant, the readers that fired, the scan's
formats and verdicts), holding the smallest case seen with it (``case/``) and
``finding.json`` (what fired, what tensorplay said, how often it was seen)."""
from __future__ import annotations

import json
import os
import shutil

from .cases import Case
from .check import Verdict, Violation

REPOSITORY = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DEFAULT_ROOT = os.path.join(REPOSITORY, "fuzz", "oracle_findings")


def describe(verdict: Verdict) -> dict:
    """Every job's outcome, for the record."""
    return {name: {k: v for k, v in vars(o).items() if v not in ("", None, 0.0)}
            for name, o in verdict.outcomes.items()}


class Store:
    def __init__(self, root: str = DEFAULT_ROOT):
        self.root = root
        self.seen: dict[str, int] = {}  # signature: occurrences in this run

    def folder(self, violation: Violation, case: Case) -> str:
        return os.path.join(self.root, violation.cls, violation.signature(case))

    def record(self, verdict: Verdict, violation: Violation, seed: object = None) -> tuple[str, bool]:
        """Save the finding; whether its signature is new to this run."""
        case = verdict.case
        folder = self.folder(violation, case)
        signature = violation.signature(case)
        new = signature not in self.seen
        self.seen[signature] = self.seen.get(signature, 0) + 1
        info_path = os.path.join(folder, "finding.json")
        previous = None
        try:
            with open(info_path) as f:
                previous = json.load(f)
        except (OSError, ValueError):
            previous = None  # new, or being written by a campaign running beside this one
        count = (previous or {}).get("count", 0) + 1
        smaller = previous is None or case.size() < previous.get("size", 1 << 62)
        if smaller:
            self._write_case(folder, case)
            info = {
                "class": violation.cls, "signature": signature, "detail": violation.detail,
                "generator": case.generator, "variant": case.variant, "kind": case.kind,
                "hostile": case.hostile, "name": case.name, "folder": case.folder, "size": case.size(),
                "fired": verdict.fired, "scan": verdict.scan, "notes": case.notes, "seed": seed,
                "outcomes": describe(verdict),
            }
        else:
            info = previous
        info["count"] = count
        os.makedirs(folder, exist_ok=True)
        # Through a renamed file: two campaigns may record the same signature at once.
        partial = f"{info_path}.{os.getpid()}"
        with open(partial, "w") as f:
            json.dump(info, f, indent=1, default=repr)
        os.replace(partial, info_path)
        return folder, new

    @staticmethod
    def _write_case(folder: str, case: Case) -> None:
        target = os.path.join(folder, "case")
        staging = f"{target}.{os.getpid()}"
        shutil.rmtree(staging, ignore_errors=True)
        os.makedirs(staging)
        case.write(staging)
        shutil.rmtree(target, ignore_errors=True)
        os.replace(staging, target)


def load_case(folder: str) -> Case:
    """A saved finding's case, to replay it."""
    with open(os.path.join(folder, "finding.json")) as f:
        info = json.load(f)
    base = os.path.join(folder, "case")
    common = dict(generator=info["generator"], variant=info["variant"], kind=info["kind"], hostile=info["hostile"],
                  name=info["name"], notes=info.get("notes") or {})
    if not info["folder"]:
        with open(os.path.join(base, info["name"]), "rb") as f:
            return Case(data=f.read(), **common)
    root = os.path.join(base, "root")
    files = {}
    for dirpath, _, names in os.walk(root):
        for n in names:
            full = os.path.join(dirpath, n)
            rel = os.path.relpath(full, os.path.join(root, info["name"]))
            with open(full, "rb") as f:
                files[rel] = f.read()
    return Case(files=files, **common)
