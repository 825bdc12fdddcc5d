"""Instruction counts of the Rust core's workloads (benches/core.rs), under callgrind.

Wall time on a shared 2-core machine moves by ±30% from run to run; the number of
instructions a workload executes moves by well under 1%, so it is the signal that
catches a regression in the VM or the archive reader.

    python benches/instructions.py            # measure, compare with the baseline
    python benches/instructions.py --update   # measure and store as the new baseline

A workload more than --tolerance (default 5%) above its baseline fails the run.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BASELINE = ROOT / "benches" / "instructions.json"
WORKLOADS = ["vm", "archive_index", "open", "unsafe_globals", "scan", "scan_pickles_only", "scan_folder"]


def build() -> Path:
    out = subprocess.run(
        ["cargo", "bench", "--bench", "core", "--features", "internals", "--no-run", "--message-format=json"],
        cwd=ROOT,
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    for line in out.splitlines():
        msg = json.loads(line)
        if msg.get("reason") == "compiler-artifact" and msg.get("target", {}).get("name") == "core":
            if msg.get("executable"):
                return Path(msg["executable"])
    sys.exit("cargo did not report the core bench executable")


def instructions(binary: Path, workload: str) -> int:
    with tempfile.TemporaryDirectory() as tmp:
        out_file = os.path.join(tmp, "callgrind.out")
        subprocess.run(
            ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out_file}", str(binary), "--once", workload],
            check=True,
            capture_output=True,
        )
        text = Path(out_file).read_text()
    match = re.search(r"^summary:\s+(\d+)", text, re.MULTILINE) or re.search(r"^totals:\s+(\d+)", text, re.MULTILINE)
    if not match:
        sys.exit(f"no instruction total in callgrind's output for {workload}")
    return int(match.group(1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--update", action="store_true", help="store the counts as the new baseline")
    parser.add_argument("--tolerance", type=float, default=0.05, help="allowed growth over the baseline")
    args = parser.parse_args()
    if shutil.which("valgrind") is None:
        sys.exit("valgrind is not installed (apt-get install valgrind)")
    binary = build()
    # Generating the input costs the same in every run; the "setup" workload does
    # only that, and is subtracted.
    setup = instructions(binary, "setup")
    counts = {w: instructions(binary, w) - setup for w in WORKLOADS}
    baseline = json.loads(BASELINE.read_text()) if BASELINE.exists() else {}
    failed = False
    print(f"{'workload':18} {'instructions':>15} {'baseline':>15} {'change':>8}")
    for name, count in counts.items():
        base = baseline.get(name)
        change = "" if not base else f"{(count - base) / base:+.1%}"
        print(f"{name:18} {count:15,} {base or 0:15,} {change:>8}")
        if base and count > base * (1 + args.tolerance):
            failed = True
    if args.update:
        BASELINE.write_text(json.dumps(counts, indent=2) + "\n")
        print(f"baseline written to {BASELINE.relative_to(ROOT)}")
    elif failed:
        sys.exit(f"a workload grew by more than {args.tolerance:.0%}")


if __name__ == "__main__":
    main()
