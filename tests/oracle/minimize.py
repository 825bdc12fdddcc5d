"""A greedy minimiser for single-file findings: cut ranges of bytes, largest
first, keeping each cut while the same violation (class and signature key)
still holds."""
from __future__ import annotations

from .cases import Case
from .check import Violation, check
from .sandbox import Sandbox


def minimize(sandbox: Sandbox, case: Case, violation: Violation, workdir: str, budget: int = 150) -> Case:
    if case.folder or not case.data:
        return case

    def holds(data: bytes) -> bool:
        verdict = check(sandbox, case.with_data(data, hostile=case.hostile), workdir)
        return any(v.cls == violation.cls and v.key == violation.key for v in verdict.violations)

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
