"""The Ray job (``tensorplay.scanner.ray.scan_listing``): files per second
scanning a listing of GPT-2 checkpoints served by a local nginx (Debian's
nginx-light, as the tests start it), with 1 and 2 workers on a local Ray
cluster of two CPUs, and, for reference, ``scanner.scan_paths`` in this one
process with no Ray at all. Each job runs from the listing to Parquet files and
counts the verdicts back: worker start-up and writing are in its time. What a
job pays whatever its size (starting the workers, the tasks that write and
count back) is measured by a job of 10 files, and the rate past it given too:
what a listing of millions runs at. A first 10-file job, untimed, warms the
session up.

The checkpoint is ``GPT2LMHeadModel(GPT2Config())`` (GPT-2 small, 124M random
parameters, 500 MB) saved with ``torch.save`` as ``pytorch_model.bin``, made
once into ``--data`` and served under ``--files`` names. Throughput on this
shared 2-core machine, where nginx, Ray's own processes and the workers share
the cores, is noisy: report only.

    python benches/ray_scan.py [--files 1000] [--jobs 16] [--batch-size 50]

Results go to ``benches/out/ray_scan.json`` and a table on standard output.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))

import tensorplay  # noqa: E402
from http_servers import Nginx  # noqa: E402
from tensorplay import scanner  # noqa: E402

WORKERS = (1, 2)
FEW = 10


def gpt2_checkpoint(data: Path) -> Path:
    path = data / "ray" / "pytorch_model.bin"
    if not path.exists():
        import torch
        from transformers import GPT2Config, GPT2LMHeadModel

        path.parent.mkdir(parents=True, exist_ok=True)
        torch.manual_seed(0)
        partial = path.with_suffix(".partial")
        torch.save(GPT2LMHeadModel(GPT2Config()).state_dict(), partial)
        partial.rename(path)
    return path


def job(urls: list[str], output: Path, workers: int, args: argparse.Namespace) -> float:
    """Seconds from the listing to its Parquet files and the verdicts counted back."""
    from tensorplay.scanner.ray import scan_listing

    t0 = time.perf_counter()
    counts = scan_listing(urls, output, format="parquet", concurrency=workers, batch_size=args.batch_size,
                          jobs=args.jobs)
    seconds = time.perf_counter() - t0
    assert counts == {"clean": len(urls)}, counts
    return seconds


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--files", type=int, default=1000)
    ap.add_argument("--jobs", type=int, default=16, help="units a worker scans at once")
    ap.add_argument("--batch-size", type=int, default=50)
    ap.add_argument("--data", type=Path, default=HERE / "data")
    args = ap.parse_args(argv)
    # Before Ray is imported: nothing is reported home.
    os.environ["RAY_USAGE_STATS_ENABLED"] = "0"
    import ray

    checkpoint = gpt2_checkpoint(args.data)
    rows = []
    with tempfile.TemporaryDirectory(prefix="tensorplay-ray-bench-") as tmp:
        root = Path(tmp) / "root"
        (root / "many").mkdir(parents=True)
        for i in range(args.files):
            (root / "many" / f"{i}.bin").symlink_to(checkpoint)
        server = Nginx(root, Path(tmp) / "nginx")
        urls = [f"{server.url}/many/{i}.bin" for i in range(args.files)]
        try:
            t0 = time.perf_counter()
            reports = scanner.scan_paths(urls, jobs=args.jobs)
            seconds = time.perf_counter() - t0
            assert all(r.verdict == "clean" for r in reports), {r.verdict for r in reports}
            rows.append({"job": f"scan_paths, this process, {args.jobs} at once", "workers": 0,
                         "seconds": seconds, "files_per_s": args.files / seconds, "steady_files_per_s": None})
            ray.init(num_cpus=2, include_dashboard=False)
            try:
                # Untimed: the first job of a session also starts Ray Data's own actors and imports.
                job(urls[:FEW], Path(tmp) / "warm-up", 1, args)
                for workers in WORKERS:
                    # A job of a few files first: what every job pays whatever its size.
                    fixed = job(urls[:FEW], Path(tmp) / f"few-{workers}", workers, args)
                    seconds = job(urls, Path(tmp) / f"all-{workers}", workers, args)
                    rows.append({"job": f"Ray, {workers} worker{'s' * (workers > 1)}, {args.jobs} at once each",
                                 "workers": workers, "seconds": seconds, "files_per_s": args.files / seconds,
                                 "fixed_seconds": fixed,
                                 "steady_files_per_s": (args.files - FEW) / (seconds - fixed)})
            finally:
                ray.shutdown()
        finally:
            server.stop()
    print(f"tensorplay {tensorplay.__version__}, ray {ray.__version__}, {args.files} GPT-2 checkpoints "
          f"({checkpoint.stat().st_size / 1e6:.0f} MB each) on nginx at 127.0.0.1, {os.cpu_count()} cores")
    print(f"{'job':40} {'seconds':>8} {'files/s':>8} {f'a {FEW}-file job, s':>16} {'files/s past it':>16}")
    for r in rows:
        fixed = f"{r['fixed_seconds']:16.1f}" if "fixed_seconds" in r else f"{'':16}"
        steady = f"{r['steady_files_per_s']:16.0f}" if r["steady_files_per_s"] else f"{'':16}"
        print(f"{r['job']:40} {r['seconds']:8.1f} {r['files_per_s']:8.0f} {fixed} {steady}")
    out = HERE / "out"
    out.mkdir(exist_ok=True)
    (out / "ray_scan.json").write_text(json.dumps({"files": args.files, "batch_size": args.batch_size,
                                                   "rows": rows}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
