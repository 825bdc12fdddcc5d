"""A greedy minimiser for single-file findings: cut ranges of bytes, largest
first, keeping each cut while the same violation (class and signature key)
still holds."""
from __future__ import annotations

from .cases import Case
from .check import Verdict, Violation, check, jobs_for
from .sandbox import Sandbox
from .subject import LOAD, SCAN, UNSAFE_GLOBALS


def _jobs(sandbox: Sandbox, verdict: Verdict, violation: Violation) -> list[str]:
    """The jobs the violation rests on: the readers that fired and the tensorplay
    jobs it names (all jobs for a false positive, which rests on every reader)."""
    if violation.cls == "false-positive":
        return jobs_for(sandbox, verdict.case)
    subject = {"scan-clean": [SCAN], "load-accepted": [LOAD], "unsafe-globals-empty": [LOAD, UNSAFE_GLOBALS],
               "robustness": [violation.key[0]], "tensorplay-ran-payload": [violation.key[0]]}.get(violation.cls, [])
    readers = [k for k in violation.key[0]] if violation.cls in ("scan-clean", "load-accepted",
                                                                 "unsafe-globals-empty") else verdict.fired
    return list(dict.fromkeys([*readers, *subject]))


def minimize(sandbox: Sandbox, verdict: Verdict, violation: Violation, workdir: str, budget: int = 100) -> Case:
    case = verdict.case
    if case.folder or not case.data:
        return case
    jobs = _jobs(sandbox, verdict, violation)

    def holds(data: bytes) -> bool:
        again = check(sandbox, case.with_data(data, hostile=case.hostile), workdir, jobs=jobs)
        return any(v.cls == violation.cls and v.key == violation.key for v in again.violations)

    data = case.data
    chunk = max(1, len(data) // 2)
    tries = 0
    while chunk >= 1 and tries < budget:
        start = 0
        while start < len(data) and tries < budget:
            candidate = data[:start] + data[start + chunk:]
            tries += 1
            if candidate and holds(candidate):
                data = candidate
            else:
                start += chunk
        chunk //= 2
    return case.with_data(data, variant=case.variant, hostile=case.hostile)
