#!/usr/bin/env python3
"""One Markdown table row per campaign log in fuzz/logs/ (written by campaign.sh).

    python3 fuzz/summarize_campaigns.py [--min-cpu SECONDS]

CPU seconds come from /usr/bin/time (user + system) per chunk, or, for logs of
libFuzzer's -jobs mode, from its own run time (or the wall time of a run it did
not finish); executions are the sum of each
chunk's last count; cov/ft are the last ones reported.
"""
import argparse
import datetime
import glob
import os
import re

LOGS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "logs")


def summarize(path):
    text = open(path, errors="replace").read()
    name = os.path.basename(path)[: -len(".log")]
    target, stamp = name.rsplit("-", 2)[0], "-".join(name.rsplit("-", 2)[1:])
    cpu = sum(float(u) + float(s) for u, s in re.findall(r"^cpu ([\d.]+) ([\d.]+)$", text, re.M))
    measured = "CPU"
    if not cpu:
        # -jobs mode: one single-threaded worker, whose output is appended twice.
        cpu = sum(set(int(t) for t in re.findall(r"^Done \d+ runs in (\d+) second", text, re.M)))
    if not cpu:
        span = re.findall(r"^campaign \S+ .*?(started|finished) (\S+?)(?:,|$)", text, re.M)
        times = [datetime.datetime.fromisoformat(t) for _, t in span]
        if len(times) >= 2:
            cpu, measured = (times[-1] - times[0]).total_seconds(), "wall"
        else:  # stopped from outside: fork mode's own clock
            cpu, measured = max([int(t) for t in re.findall(r" time: (\d+)s", text)] or [0]), "wall"
    execs = 0
    for chunk in re.split(r"^cpu [\d.]+ [\d.]+$", text, flags=re.M):
        counts = re.findall(r"^#(\d+)[:\s]", chunk, re.M)
        if counts:
            execs += int(counts[-1])
    cov = re.findall(r"cov: (\d+) ft: (\d+)", text)
    pcs = re.findall(r"Loaded 1 PC tables \((\d+) PCs\)", text)
    if "deadly signal" in text or "panicked" in text:
        outcome = "crash"
    elif "libFuzzer: timeout" in text:
        outcome = "timeout"
    else:
        outcome = "none"
    return {
        "target": target,
        "start": f"{stamp[:4]}-{stamp[4:6]}-{stamp[6:8]} {stamp[9:11]}:{stamp[11:13]}",
        "cpu": cpu,
        "measured": measured,
        "execs": execs,
        "cov": cov[-1] if cov else ("–", "–"),
        "pcs": int(pcs[-1]) if pcs else None,
        "outcome": outcome,
    }


def edges(r):
    """Edges covered, and their share of the instrumented edges linked into the target."""
    if r["pcs"] and r["cov"][0] != "–":
        return f"{r['cov'][0]} of {r['pcs']} ({100 * int(r['cov'][0]) / r['pcs']:.0f}%)"
    return r["cov"][0]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--min-cpu", type=float, default=60, help="skip shorter (smoke) runs")
    args = parser.parse_args()
    rows = [summarize(p) for p in sorted(glob.glob(os.path.join(LOGS, "*-*-*.log")))
            if not p.endswith(".worker.log") and "aborted" not in os.path.basename(p)]
    rows = [r for r in rows if r["cpu"] >= args.min_cpu]
    rows.sort(key=lambda r: r["start"])
    print("| started (UTC) | target | CPU time | executions | edges covered | features | finding |")
    print("| --- | --- | ---: | ---: | ---: | ---: | --- |")
    total = {}
    for r in rows:
        total[r["target"]] = total.get(r["target"], 0) + r["cpu"]
        spent = f"{r['cpu'] / 60:.0f} min" + (" (wall)" if r["measured"] == "wall" else "")
        print(f"| {r['start']} | `{r['target']}` | {spent} | {r['execs']:,} | "
              f"{edges(r)} | {r['cov'][1]} | {r['outcome']} |")
    print()
    for target, cpu in sorted(total.items()):
        print(f"- `{target}`: {cpu / 60:.0f} CPU-minutes")
    print(f"- all targets: {sum(total.values()) / 3600:.2f} CPU-hours")


if __name__ == "__main__":
    main()
