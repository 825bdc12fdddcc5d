"""The property check: every reader, then tensorplay, on one case; the
disagreements, each a class of finding.

- ``scan-clean``: a reader created the marker, and the scan's exit code is 0 (or,
  for a torch.export archive, the pickles-only scan's verdict is clean);
- ``load-accepted``: a reader that tensorplay's loader for the case stands in for
  (``readers.Reader.stands_for``) created the marker, and that loader returned;
- ``unsafe-globals-empty``: such a reader created the marker, and
  ``get_unsafe_globals_in_checkpoint`` listed nothing (raising is fine); not for
  torch.export archives, whose programs run code through JSON, not globals;
- ``false-positive``: no reader created the marker, every reader made for the
  case's kind read it without error, tensorplay's loader accepted it, yet the
  scan's exit code is not 0. For kinds no tensorplay loader reads (.npy,
  archives, compressed files) the loader's word is replaced by the scan's own:
  it named no global, so only its failing to read the file can fail it (a
  global outside the allowlist fails a scan by policy, whether or not it runs);
- ``robustness``: tensorplay crashed, hung, or raised what it must not (``scan``
  anything; the loaders and the listing anything but a ``CheckpointError`` or,
  under the sandbox's address-space cap, ``MemoryError``);
- ``torch-bypass``: ``torch.load`` with weights_only=True created the marker;
- ``tensorplay-ran-payload``: the marker appeared while tensorplay ran.
"""
from __future__ import annotations

import hashlib
import shutil
import tempfile
from dataclasses import dataclass, field

from .cases import Case
from .readers import BYPASS
from .sandbox import Outcome, Sandbox
from .subject import LOAD, SCAN, SCAN_PICKLES, UNSAFE_GLOBALS

CLASSES = ("scan-clean", "load-accepted", "unsafe-globals-empty", "false-positive", "robustness", "torch-bypass",
           "tensorplay-ran-payload")
# Kinds a tensorplay loader reads: for the others a scan's verdict is judged without one.
LOADED_KINDS = {"pickle", "stream", "torch", "legacy", "export", "dcp", "tensordict", "sharded"}
# Kinds scanned twice, in full and pickles only: the second reading skips what is no pickle.
TWO_SCANS = {"export"}


@dataclass
class Violation:
    cls: str
    detail: str
    key: tuple  # the signature's part beyond the class

    def signature(self, case: Case) -> str:
        text = repr((self.cls, case.generator, case.variant, self.key))
        return hashlib.sha1(text.encode()).hexdigest()[:12]


@dataclass
class Verdict:
    case: Case
    outcomes: dict[str, Outcome]
    fired: list[str]
    violations: list[Violation] = field(default_factory=list)

    @property
    def scan(self) -> dict:
        outcome = self.outcomes.get(SCAN)
        return outcome.result if outcome is not None and outcome.status == "ok" and outcome.result else {}

    def scan_summary(self) -> str:
        reports = self.scan.get("reports") or []
        return ",".join(sorted({f"{r['format']}/{r['verdict']}" for r in reports})) or "-"


def jobs_for(sandbox: Sandbox, case: Case) -> list[str]:
    readers = [entry["name"] for entry in sandbox.catalog if not entry.get("subject")]
    subject = [SCAN, LOAD] + ([] if case.folder else [UNSAFE_GLOBALS])
    if case.kind in TWO_SCANS and not case.folder:
        subject.insert(1, SCAN_PICKLES)
    return readers + subject


def needs_torch(case: Case) -> bool:
    """Whether reading the case will likely import torch (see sandbox.Sandbox)."""
    return case.folder or b"torch" in (case.data or b"")


def check(sandbox: Sandbox, case: Case, workdir: str, timeout: float | None = None,
          jobs: list[str] | None = None) -> Verdict:
    """Every job on the case (or only ``jobs``: a violation that needs others is then not seen)."""
    where = tempfile.mkdtemp(dir=workdir)
    try:
        path = case.write(where)
        outcomes = sandbox.run(path, case.folder, jobs or jobs_for(sandbox, case), timeout, needs_torch(case))
    finally:
        shutil.rmtree(where, ignore_errors=True)
    return judge(case, outcomes, sandbox.catalog)


def judge(case: Case, outcomes: dict[str, Outcome], catalog: list[dict]) -> Verdict:
    entries = {e["name"]: e for e in catalog}
    readers = {name: o for name, o in outcomes.items() if not name.startswith("tensorplay:")}
    fired = sorted(name for name, o in readers.items() if o.fired)
    verdict = Verdict(case, outcomes, fired)
    add = verdict.violations.append

    for job in (SCAN, SCAN_PICKLES, LOAD, UNSAFE_GLOBALS):
        o = outcomes.get(job)
        if o is not None and o.fired:
            add(Violation("tensorplay-ran-payload", f"the marker appeared during {job}", (job,)))

    scan, load, listing = outcomes.get(SCAN), outcomes.get(LOAD), outcomes.get(UNSAFE_GLOBALS)
    pickles_scan = outcomes.get(SCAN_PICKLES)
    pickles_verdict = None
    if pickles_scan is not None:
        if pickles_scan.status == "ok":
            pickles_verdict = pickles_scan.result["verdict"]
        else:
            what = f"{pickles_scan.status} {pickles_scan.exc}".strip()
            add(Violation("robustness", f"scan(pickles_only=True) {what}: {pickles_scan.message}",
                          (SCAN_PICKLES, pickles_scan.status, pickles_scan.exc)))
    exit_code = None
    if scan is not None:
        if scan.status == "ok":
            exit_code = scan.result["exit_code"]
        else:
            what = f"{scan.status} {scan.exc}".strip()
            add(Violation("robustness", f"scan_paths {what}: {scan.message}", (SCAN, scan.status, scan.exc)))
    for job, o in ((LOAD, load), (UNSAFE_GLOBALS, listing)):
        if o is None:
            continue
        if o.status != "ok":
            add(Violation("robustness", f"{job} {o.status} {o.exc}: {o.message}", (job, o.status, o.exc)))
        elif o.result and "raised" in o.result and not (o.result["checkpoint_error"] or o.result["memory"]):
            add(Violation("robustness", f"{job} raised {o.result['raised']}: {o.result['message']}",
                          (job, "raised", o.result["raised"])))
    load_result = load.result if load is not None and load.status == "ok" and load.result else {}
    loader = load_result.get("loader", "")
    accepted = "returned" in load_result
    counterparts = sorted(n for n in fired if loader and entries.get(n, {}).get("stands_for") == loader)
    fired_where = tuple(f"{n}@{readers[n].where}" if readers[n].where else n for n in fired)

    if BYPASS in fired:
        add(Violation("torch-bypass", "torch.load(weights_only=True) ran the payload", (BYPASS,)))
    if fired and exit_code == 0:
        add(Violation("scan-clean", f"{', '.join(fired_where)} ran the payload; the scan exits 0 "
                      f"({verdict.scan_summary()})", (tuple(fired), verdict.scan_summary())))
    if fired and pickles_verdict == "clean":
        add(Violation("scan-clean", f"{', '.join(fired_where)} ran the payload; the pickles-only scan says clean",
                      (tuple(fired), "pickles_only")))
    if counterparts and accepted:
        add(Violation("load-accepted", f"{', '.join(counterparts)} ran the payload; tensorplay's {loader} loader "
                      f"returned {load_result['returned']}", (tuple(counterparts), loader)))
    if (counterparts and loader != "export" and listing is not None and listing.status == "ok"
            and listing.result.get("listed") == []):
        add(Violation("unsafe-globals-empty", f"{', '.join(counterparts)} ran the payload; "
                      "get_unsafe_globals_in_checkpoint returned []", (tuple(counterparts),)))
    pickles_fail = pickles_verdict not in (None, "clean")
    if not fired and (exit_code not in (None, 0) or pickles_fail):
        applicable = [n for n, o in readers.items() if case.kind in entries.get(n, {}).get("kinds", ())
                      and bool(entries[n]["folder"]) == case.folder]
        readable = applicable and all(readers[n].status == "ok" for n in applicable)
        named = any(r["globals"] for r in verdict.scan.get("reports", []))
        if readable and (accepted or (case.kind not in LOADED_KINDS and not named)):
            problems = sorted({p for r in verdict.scan.get("reports", []) for p in r["problems"]})
            add(Violation("false-positive", f"{', '.join(applicable)} read it without error"
                          f"{'' if not accepted else ', tensorplay loaded it'}; the scan exits {exit_code} "
                          f"({verdict.scan_summary()}; problems: {', '.join(problems) or '-'})"
                          + (f"; the pickles-only scan says {pickles_verdict}" if pickles_fail else ""),
                          (verdict.scan_summary(), tuple(problems))
                          + ((f"pickles_only {pickles_verdict}",) if pickles_fail else ())))
    return verdict
