"""The campaign runner: ``python -m oracle run --cpu-seconds N [--seed S]
[--generators a,b] [--mutate P] [--minimize]`` (from tests/), nice'd, logged to
``fuzz/logs/oracle-<stamp>-seed<seed>.log``; ``python -m oracle replay FINDING_FOLDER``
runs a saved finding again and prints what each job did."""
from __future__ import annotations

import argparse
import json
import os
import random
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable

from . import check, findings, generators, minimize, mutate
from .cases import Case
from .sandbox import Sandbox

LOGS = os.path.join(findings.REPOSITORY, "fuzz", "logs")
TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(sandbox: Sandbox | None = None) -> float:
    """User + system time of this process and every process under it: the reaped ones
    from getrusage, the live fork servers (and the children they reaped) from /proc."""
    total = 0.0
    for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN):
        r = resource.getrusage(who)
        total += r.ru_utime + r.ru_stime
    for server in (sandbox.servers.values() if sandbox else ()):
        if server.proc is None:
            continue
        try:
            with open(f"/proc/{server.proc.pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            total += sum(int(x) for x in fields[11:15]) / TICKS
        except OSError:
            pass
    return total


def _commit() -> str:
    """The last commit that changed tensorplay itself (the harness's own commits do not)."""
    try:
        return subprocess.run(["git", "-C", findings.REPOSITORY, "log", "-1", "--format=%h", "--", "python", "src",
                               "Cargo.toml", "Cargo.lock"], capture_output=True, text=True, check=False).stdout.strip()
    except OSError:
        return "?"


class Stats:
    def __init__(self):
        self.cases = Counter()  # per generator
        self.runs, self.fired, self.raised, self.crashed, self.timeouts = (Counter() for _ in range(5))
        self.violations = Counter()  # class: occurrences
        self.signatures: dict[str, set[str]] = {}
        self.hostile_silent = Counter()  # generator: hostile cases no reader fired on

    def add(self, verdict: check.Verdict) -> None:
        case = verdict.case
        self.cases[case.generator] += 1
        for name, o in verdict.outcomes.items():
            self.runs[name] += 1
            self.fired[name] += o.fired
            self.raised[name] += o.status == "raised"
            self.crashed[name] += o.status == "crashed"
            self.timeouts[name] += o.status == "timeout"
        if case.hostile and not verdict.fired:
            self.hostile_silent[case.generator] += 1
        for v in verdict.violations:
            self.violations[v.cls] += 1
            self.signatures.setdefault(v.cls, set()).add(v.signature(case))


def _draw(rng: random.Random, gens: dict, corpus: list[bytes], mutate_p: float,
          say: Callable[[str], None]) -> Case:
    """A case from a generator chosen at random. A generator that raises is a bug of
    the harness's, logged, and another draw is made: it must not end a campaign."""
    while True:
        name = rng.choice(sorted(gens))
        try:
            case = gens[name].generate(rng)
            if rng.random() < mutate_p:
                case = mutate.mutate(case, rng, corpus)
            return case
        except Exception as e:  # noqa: BLE001 - any bug of a generator, reported and survived
            say(f"generator {name} raised {type(e).__name__}: {e}")


def run(args: argparse.Namespace) -> int:
    os.nice(19)
    os.makedirs(LOGS, exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime())
    # The seed in the name: campaigns started in the same second on other seeds
    # must not write one file.
    log_path = args.log or os.path.join(LOGS, f"oracle-{stamp}-seed{args.seed}.log")
    log = open(log_path, "w", buffering=1)

    def say(line: str) -> None:
        log.write(line + "\n")
        if not args.quiet:
            print(line, flush=True)

    gens = generators.load(args.generators.split(",") if args.generators else None)
    store = findings.Store(args.findings)
    rng = random.Random(args.seed)
    stats = Stats()
    started_wall = time.time()
    workdir = tempfile.mkdtemp(prefix="oracle-cases-")
    corpus = [c.data for g in gens.values() for c in g.seeds() if not c.folder and c.data][:200]
    commit = _commit()
    with Sandbox(timeout=args.timeout) as sandbox:
        say(f"oracle campaign {stamp} UTC: seed {args.seed}, cpu budget {args.cpu_seconds} s, mutate {args.mutate}, "
            f"tensorplay {commit}, generators {','.join(sorted(gens))}")
        for entry in sandbox.catalog:
            if not entry.get("subject"):
                say(f"reader {entry['name']}: {entry['runs']}")
        n = 0
        next_report = 60.0
        while cpu_seconds(sandbox) < args.cpu_seconds and (args.cases is None or n < args.cases):
            case = _draw(rng, gens, corpus, args.mutate, say)
            verdict = check.check(sandbox, case, workdir)
            n += 1
            stats.add(verdict)
            for v in verdict.violations:
                folder, new = store.record(verdict, v, seed=[args.seed, n])
                if new:
                    say(f"finding {v.cls} {v.signature(case)} [{case.generator}: {case.variant}] {v.detail[:300]}")
                    if v.cls == "torch-bypass":
                        print(f"TORCH BYPASS: torch.load(weights_only=True) ran a payload; see {folder}",
                              file=sys.stderr, flush=True)
                    if args.minimize and not case.folder:
                        small = minimize.minimize(sandbox, verdict, v, workdir)
                        if small.size() < case.size():
                            again = check.check(sandbox, small, workdir)
                            for w in again.violations:
                                if w.cls == v.cls and w.key == v.key:
                                    store.record(again, w, seed=[args.seed, n, "minimized"])
            spent = cpu_seconds(sandbox)
            if spent >= next_report:
                next_report = spent + 60.0
                say(f"progress: {n} cases, {spent:.0f} CPU-s, {time.time() - started_wall:.0f} s wall, "
                    f"violations {dict(stats.violations)}")
        restarts = sandbox.restarts
    shutil.rmtree(workdir, ignore_errors=True)
    cpu = cpu_seconds()
    say(f"cases: {n}; per generator: {dict(sorted(stats.cases.items()))}")
    say(f"hostile cases no reader fired on, per generator: {dict(sorted(stats.hostile_silent.items()))}")
    say("per job: runs / marker fired / raised / crashed / timeouts")
    for name in stats.runs:
        say(f"  {name}: {stats.runs[name]} / {stats.fired[name]} / {stats.raised[name]} / {stats.crashed[name]} / "
            f"{stats.timeouts[name]}")
    say("findings by class (occurrences, distinct signatures): "
        + (", ".join(f"{c} {stats.violations[c]} ({len(stats.signatures[c])})" for c in check.CLASSES
                     if stats.violations[c]) or "none"))
    say(f"fork server restarts: {restarts}")
    say(f"CPU time (user+system, self+children): {cpu:.1f} s; wall {time.time() - started_wall:.0f} s")
    summary = {"stamp": stamp, "seed": args.seed, "cases": n, "cpu_seconds": round(cpu, 1),
               "wall_seconds": round(time.time() - started_wall), "generators": sorted(gens),
               "per_generator": dict(stats.cases), "fired": {k: v for k, v in stats.fired.items() if v},
               "violations": dict(stats.violations),
               "signatures": {k: len(v) for k, v in stats.signatures.items()}, "commit": commit}
    say("SUMMARY " + json.dumps(summary))
    log.close()
    return 0


def replay(args: argparse.Namespace) -> int:
    case = findings.load_case(args.folder)
    workdir = tempfile.mkdtemp(prefix="oracle-replay-")
    with Sandbox(timeout=args.timeout) as sandbox:
        verdict = check.check(sandbox, case, workdir)
    shutil.rmtree(workdir, ignore_errors=True)
    for name, o in verdict.outcomes.items():
        print(f"{name:32} {o.status:8} {'FIRED' if o.fired else '':5} {o.exc} {o.message[:120]!r} "
              f"{json.dumps(o.result)[:300] if o.result is not None else ''}")
    for v in verdict.violations:
        print(f"violation {v.cls}: {v.detail}")
    return 0


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m oracle")
    sub = parser.add_subparsers(dest="command", required=True)
    r = sub.add_parser("run", help="a campaign")
    r.add_argument("--cpu-seconds", type=float, required=True)
    r.add_argument("--seed", type=int, default=0)
    r.add_argument("--cases", type=int, default=None, help="stop after this many cases too")
    r.add_argument("--generators", default=None, help="comma-separated names (default: all)")
    r.add_argument("--mutate", type=float, default=0.3, help="probability a generated case is mutated")
    r.add_argument("--timeout", type=float, default=10.0, help="wall-clock seconds per job")
    r.add_argument("--minimize", action="store_true", help="minimise each new single-file finding")
    r.add_argument("--findings", default=findings.DEFAULT_ROOT)
    r.add_argument("--log", default=None)
    r.add_argument("--quiet", action="store_true")
    r.set_defaults(run=run)
    p = sub.add_parser("replay", help="run a saved finding again")
    p.add_argument("folder")
    p.add_argument("--timeout", type=float, default=10.0)
    p.set_defaults(run=replay)
    args = parser.parse_args(argv)
    sys.exit(args.run(args))
