"""Loads in one process, counted from the second: a service that loads the
same checkpoint again and again, and a DataLoader over a dataset kept as .pt
files (40 different samples, loaded round-robin). tensorplay (both backends)
side by side with torch.load(weights_only=True), at 600 KB, 4 MiB and 16 MiB,
with the minor page faults of each load beside its time.

    python benches/repeated.py [--runs 3] [--rounds 3] [--data DIR]
    python benches/repeated.py --smoke          # a quick check that it runs

Each (size, pattern, loader) runs in a fresh process, round-robin over the
loaders within a run, with the files read once before (warm page cache). Each
load's result is dropped before the next load, as a service and a DataLoader
drop theirs. Writes benches/out/repeated.json and prints a Markdown table (the
"Repeated loads, from the second" section of RESULTS.md).
"""
from __future__ import annotations

import argparse
import datetime as dt
import hashlib
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
SIZES = {"600 KB": 600_000, "4 MiB": 4 << 20, "16 MiB": 16 << 20}
LOADERS = {"tp_torch": "tensorplay.load(backend='torch')", "tp_numpy": "tensorplay.load(backend='numpy')",
           "torch": "torch.load(weights_only=True)"}
PATTERNS = {"same": "same file", "rounds": "40 samples round-robin"}


def child(job: dict) -> dict:
    """One process's loads: the time and minor faults of each."""
    import resource

    import torch

    if job["loader"] == "torch":
        def load(p):
            return torch.load(p, weights_only=True)
    else:
        import tensorplay

        backend = job["loader"].removeprefix("tp_")

        def load(p):
            return tensorplay.load(p, backend=backend)
    paths = job["paths"] * job["rounds"]
    ms, faults, result = [], [], None
    for path in paths:
        result = None  # the last load's objects go before the next load
        before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        t0 = time.perf_counter()
        result = load(path)
        ms.append((time.perf_counter() - t0) * 1e3)
        faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
    del result
    return {"ms": ms, "faults": faults}


def make_files(data: Path, samples: int) -> dict[str, dict[str, list[str]]]:
    """Per size: one file for the same-file pattern, `samples` files for the round-robin one."""
    import torch

    files: dict[str, dict[str, list[str]]] = {}
    gen = torch.Generator().manual_seed(45)
    for label, nbytes in SIZES.items():
        folder = data / label.replace(" ", "")
        folder.mkdir(parents=True, exist_ok=True)
        names = [folder / f"sample_{i:02d}.pt" for i in range(samples)]
        for name in names:
            if not name.exists():
                torch.save({"x": torch.randn(nbytes // 4, generator=gen)}, name)
        files[label] = {"same": [str(names[0])], "rounds": [str(n) for n in names]}
    return files


def warm(paths: list[str]) -> None:
    for p in paths:
        with open(p, "rb") as f:
            while f.read(1 << 24):
                pass


def summarize(runs: list[dict]) -> dict:
    """From the second load on: median and max time, median and max faults, per
    run; medians over runs."""
    per_run = [{"median_ms": statistics.median(r["ms"][1:]), "max_ms": max(r["ms"][1:]),
                "median_faults": statistics.median(r["faults"][1:]), "max_faults": max(r["faults"][1:]),
                "first_ms": r["ms"][0], "first_faults": r["faults"][0]} for r in runs]
    return {k: statistics.median(r[k] for r in per_run) for k in per_run[0]} | {"n": len(runs)}


def render(out: dict) -> str:
    lines = ["| size | pattern | loader | loads | median ms | max ms | median faults | max faults "
             "| torch ÷ tensorplay (median) |", "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for size, by_pattern in out["results"].items():
        for pattern, by_loader in by_pattern.items():
            theirs = by_loader.get("torch", {}).get("median_ms")
            for loader, e in by_loader.items():
                ratio = f"{theirs / e['median_ms']:.2f}x" if loader != "torch" and theirs else ""
                lines.append(f"| {size} | {PATTERNS[pattern]} | {LOADERS[loader]} | {e['loads']} "
                             f"| {e['median_ms']:.3f} | {e['max_ms']:.2f} | {e['median_faults']:.0f} "
                             f"| {e['max_faults']:.0f} | {ratio} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--runs", type=int, default=3, help="fresh processes per (size, pattern, loader)")
    ap.add_argument("--loads", type=int, default=15, help="loads of the same file per process")
    ap.add_argument("--samples", type=int, default=40, help="files of the round-robin dataset")
    ap.add_argument("--rounds", type=int, default=3, help="passes over the dataset per process")
    ap.add_argument("--data", type=Path, default=HERE / "data" / "repeated")
    ap.add_argument("--out", type=Path, default=HERE / "out" / "repeated.json")
    ap.add_argument("--smoke", action="store_true", help="one run of few loads, in a temp dir")
    args = ap.parse_args(argv)
    if args.child:
        print(json.dumps(child(json.loads(args.child))))
        return 0
    if args.smoke:
        import tempfile

        root = Path(tempfile.mkdtemp(prefix="tp-repeated-"))
        args.runs, args.loads, args.samples, args.rounds = 1, 3, 3, 1
        args.data, args.out = root / "data", root / "repeated.json"
    files = make_files(args.data, args.samples)
    import tensorplay

    core = Path(tensorplay._core.__file__)
    commit = subprocess.run(["git", "-C", str(HERE), "rev-parse", "--short=8", "HEAD"], capture_output=True,
                            text=True).stdout.strip()
    out = {"command": "python benches/repeated.py " + " ".join(argv if argv is not None else sys.argv[1:]),
           "date": dt.date.today().isoformat(), "commit": commit,
           "core_sha256": hashlib.sha256(core.read_bytes()).hexdigest()[:12],
           "huge_pages": tensorplay._core.huge_pages(), "results": {}}
    raw: dict = {}
    for run in range(args.runs):
        for size, by_pattern in files.items():
            for pattern, paths in by_pattern.items():
                warm(paths)
                for loader in LOADERS:
                    job = {"loader": loader, "paths": paths * (args.loads if pattern == "same" else 1),
                           "rounds": 1 if pattern == "same" else args.rounds}
                    done = subprocess.run([sys.executable, __file__, "--child", json.dumps(job)], capture_output=True,
                                          text=True, timeout=1200)
                    if done.returncode != 0:
                        sys.exit(f"{size} {pattern} {loader}: {done.stderr[-2000:]}")
                    raw.setdefault(size, {}).setdefault(pattern, {}).setdefault(loader, []).append(
                        json.loads(done.stdout.strip().splitlines()[-1]))
        print(f"run {run + 1}/{args.runs} done", file=sys.stderr)
    for size, by_pattern in raw.items():
        for pattern, by_loader in by_pattern.items():
            for loader, runs in by_loader.items():
                e = summarize(runs) | {"loads": len(runs[0]["ms"]), "raw": runs}
                out["results"].setdefault(size, {}).setdefault(pattern, {})[loader] = e
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=1) + "\n")
    print(f"`{out['command']}` on {out['date']} at commit {out['commit']}, core sha256 {out['core_sha256']}, "
          f"huge pages: {out['huge_pages']}\n")
    print(render(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
