"""A greedy minimiser for single-file findings: cut ranges of bytes, largest
first, keeping each cut while the same violation (class and signature key)
still holds. A torch.export archive's bytes cannot be cut (every cut breaks an
offset or a CRC), and its tricks are in its records, not its bytes: its members
are dropped instead, one at a time."""
from __future__ import annotations

import io
import zipfile
import zlib

from . import zipfmt
from .cases import Case
from .check import Verdict, Violation, check, jobs_for
from .sandbox import Sandbox
from .subject import LOAD, SCAN, SCAN_PICKLES, UNSAFE_GLOBALS


def _jobs(sandbox: Sandbox, verdict: Verdict, violation: Violation) -> list[str]:
    """The jobs the violation rests on: the readers that fired and the tensorplay
    jobs it names (all jobs for a false positive, which rests on every reader)."""
    if violation.cls == "false-positive":
        return jobs_for(sandbox, verdict.case)
    scans = [SCAN_PICKLES] if violation.cls == "scan-clean" and violation.key[1:] == ("pickles_only",) else [SCAN]
    subject = {"scan-clean": scans, "load-accepted": [LOAD], "unsafe-globals-empty": [LOAD, UNSAFE_GLOBALS],
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

    members = _members(case.data) if case.kind == "export" else None
    if members is not None:
        data = _drop_members(members, holds, budget) or case.data
        return case.with_data(data, variant=case.variant, hostile=case.hostile)
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


def _members(data: bytes) -> list[tuple[bytes, bytes]] | None:
    """A zip's members (names as bytes, contents), or None for bytes zipfile cannot
    read whole (then they are cut as bytes). Nothing in them is run."""
    if not data.startswith(b"PK\x03\x04"):
        return None
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as z:
            return [(i.orig_filename.encode("utf-8" if i.flag_bits & 0x800 else "cp437"), z.read(i))
                    for i in z.infolist()]
    except (zipfile.BadZipFile, OSError, ValueError, NotImplementedError, EOFError, zlib.error, RuntimeError):
        return None


def _drop_members(members: list[tuple[bytes, bytes]], holds, budget: int) -> bytes | None:
    """The archive rebuilt without every member it holds without; None if none could go."""
    def build(kept: list[tuple[bytes, bytes]]) -> bytes:
        return zipfmt.build([zipfmt.Entry(n, d, align=64) for n, d in kept])

    kept = list(members)
    for member in list(members)[:budget]:
        candidate = [m for m in kept if m is not member]
        if candidate and holds(build(candidate)):
            kept = candidate
    return build(kept) if len(kept) < len(members) else None
