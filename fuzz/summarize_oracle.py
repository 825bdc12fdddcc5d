"""Rows for the oracle harness's campaign log (tests/oracle/README.md): one per
``fuzz/logs/oracle-*.log``, from the SUMMARY line each campaign ends with, or,
for a campaign stopped before its end (killed, or a harness error), from its
header and its last progress line, marked as such: its CPU time still counts.

    python3 fuzz/summarize_oracle.py [LOG...]
"""
from __future__ import annotations

import ast
import glob
import json
import os
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def summary(path: str) -> dict | None:
    """The campaign's SUMMARY, or what its header and last progress line say
    (``stopped`` set); None for a log with no progress yet."""
    header, progress = None, None
    with open(path) as f:
        for line in f:
            if line.startswith("SUMMARY "):
                return json.loads(line[len("SUMMARY "):])
            if header is None and line.startswith("oracle campaign "):
                header = re.match(r"oracle campaign (\S+) UTC: seed (\d+),.* tensorplay (\S+), generators", line)
            elif line.startswith("progress: "):
                progress = re.match(r"progress: (\d+) cases, ([\d.]+) CPU-s, .* violations (\{.*\})", line)
    if header is None or progress is None:
        return None
    return {"stamp": header[1], "seed": int(header[2]), "commit": header[3], "cases": int(progress[1]),
            "cpu_seconds": float(progress[2]), "violations": ast.literal_eval(progress[3]), "stopped": True}


def row(s: dict) -> str:
    stamp = s["stamp"]
    started = f"{stamp[:4]}-{stamp[4:6]}-{stamp[6:8]} {stamp[9:11]}:{stamp[11:13]}"
    if s.get("stopped"):
        fired = "stopped before its end"
        findings = ", ".join(f"{cls} {n}" for cls, n in sorted(s["violations"].items()))
    else:
        fired = f"{sum(s['fired'].values()):,}"
        findings = ", ".join(f"{cls} {n} ({s['signatures'].get(cls, 0)})"
                             for cls, n in sorted(s["violations"].items()))
    return (f"| {started} | {s['seed']} | {s['cpu_seconds'] / 60:.0f} min | {s['cases']:,} | {fired} | "
            f"{findings or 'none'} | {s['commit']} |")


def main(paths: list[str]) -> None:
    paths = paths or sorted(glob.glob(os.path.join(HERE, "logs", "oracle-*.log")))
    print("| started (UTC) | seed | CPU time | cases | markers fired | findings: occurrences (signatures) "
          "| tensorplay |")
    print("| --- | ---: | ---: | ---: | ---: | --- | --- |")
    total = 0.0
    for path in paths:
        s = summary(path)
        if s is None:
            continue
        total += s["cpu_seconds"]
        print(row(s))
    print(f"\nall oracle campaigns: {total / 60:.1f} CPU-minutes")


if __name__ == "__main__":
    main(sys.argv[1:])
