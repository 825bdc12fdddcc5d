"""Scans over HTTP, side by side in one run against the same local nginx
(Debian's nginx-light, as the tests start it):

1. per checkpoint (GPT-2-shaped, LLaMA-shaped, 50,000 tensors, a sharded GPT-2's
   two shards) and per remote folder (the sharded GPT-2's folder, GPT-2's DCP
   folder; every file of the unit, its index listing included): bytes read /
   file size, requests and tensor payload bytes fetched, counted from nginx's
   access log, and round trips, counted in the client (each request for a
   file's tail and head, each wave of ranges, each other request: one); all
   deterministic, the same every run;
2. files per second scanning one GPT-2 checkpoint served under many names, over
   HTTPS (picklescan's ``scan_url`` speaks nothing else):
   tensorplay (by ranges, 16 at once, then one at a time through one client)
   against picklescan's ``scan_url`` (which downloads each file, on as many files
   as ``--picklescan-seconds`` allows), and huggingface_hub's safetensors
   metadata parsing of the same model's safetensors copy (the range-read anchor:
   ``HfApi.parse_safetensors_file_metadata`` through ``HF_ENDPOINT``), with each
   reader's requests and bytes per file from the log. Throughput on a shared
   2-core machine is noisy: report only.

    python benches/remote.py --scale small|full [--files 1000] [--picklescan-seconds 60] [--profile]

``--profile`` also profiles (cProfile) one scan of the GPT-2-shaped file over
HTTPS, after the timed runs, and prints where its time goes.

Checkpoints come from ``benches/generate.py`` (made if missing); the results go
to ``benches/out/remote.json`` and a table on standard output.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))

import tensorplay  # noqa: E402
from http_servers import Nginx  # noqa: E402
from remote_corpus import dcp_payloads, payloads, sent_ranges  # noqa: E402
from tensorplay import _http, scanner  # noqa: E402

CHECKPOINTS = ("gpt2", "llama_bf16", "many_small")


class RoundTrips:
    """Round trips a scan takes, counted in the client: each ``open`` (a file's
    tail and head, asked for at once), each ``read`` (a wave of ranges, at once)
    and each other request (a folder's index, a probe for a hidden ``.metadata``)
    is one; a scan's files are counted one after another."""

    def __init__(self) -> None:
        self.count = 0
        self._lock = threading.Lock()
        self._inside = threading.local()

    @contextlib.contextmanager
    def counting(self):
        originals = {name: getattr(_http.Client, name) for name in ("open", "read", "get")}
        for name, method in originals.items():
            setattr(_http.Client, name, self._counted(method))
        try:
            yield self
        finally:
            for name, method in originals.items():
                setattr(_http.Client, name, method)

    def _counted(self, method):
        def counted(client, *args, **kwargs):
            # A request sent for an open or a read (from its thread, or the
            # client's pool that sends a wave at once) is part of that round trip.
            outer = getattr(self._inside, "on", False)
            if not outer and not threading.current_thread().name.startswith("tensorplay-http"):
                with self._lock:
                    self.count += 1
            self._inside.on = True
            try:
                return method(client, *args, **kwargs)
            finally:
                self._inside.on = outer
        return counted


def shard(gpt2: Path, folder: Path) -> list[Path]:
    """gpt2's state dict in two shards and their index, as transformers saves them."""
    import torch

    state = torch.load(gpt2, weights_only=True)
    keys = list(state)
    halves = [keys[: len(keys) // 2], keys[len(keys) // 2:]]
    folder.mkdir(parents=True, exist_ok=True)
    weight_map, files = {}, []
    for i, half in enumerate(halves, 1):
        name = f"pytorch_model-{i:05d}-of-00002.bin"
        torch.save({k: state[k].clone() for k in half}, folder / name)
        weight_map.update(dict.fromkeys(half, name))
        files.append(folder / name)
    (folder / "pytorch_model.bin.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    return files


def measure(server: Nginx, label: str, url: str, files: dict[str, Path], tensors: dict[str, list[range]]) -> dict:
    """One unit (a file, or a folder's URL) scanned by ranges: what nginx sent
    of its ``files`` (by URI) and how much of it fell on ``tensors`` (by URI)."""
    before = len(server.requests())
    with RoundTrips().counting() as trips:
        reports = scanner.scan_paths([url])
    log = server.requests()[before:]
    size = sum(path.stat().st_size for path in files.values())
    got = {uri: sent_ranges(log, uri, path.stat().st_size) for uri, path in files.items()}
    touched = sum(max(0, min(r.stop, p.stop) - max(r.start, p.start))
                  for uri, ranges in got.items() for r in ranges for p in tensors.get(uri, ()))
    read = sum(row[4] for row in log)  # every byte sent for the unit, a folder's index included
    if len(reports) == 1 and reports[0].remote is not None:
        assert trips.count == reports[0].remote.round_trips, (trips.count, reports[0].remote.round_trips)
    return {"checkpoint": label, "files": len(files), "file_bytes": size, "bytes_read": read,
            "fraction": read / size, "round_trips": trips.count, "requests": len(log), "tensor_bytes_read": touched,
            "verdicts": sorted({r.verdict for r in reports}),
            "whole_file": any(r.remote is not None and r.remote.whole_file for r in reports)}


def uri_of(root: Path, path: Path) -> str:
    return "/" + path.relative_to(root).as_posix()


def per_unit_rows(server: Nginx, root: Path, files: dict[str, Path]) -> list[dict]:
    """The single files of ``files`` (label: path), then the sharded folder and the DCP folder."""
    rows = [measure(server, label, server.url + uri_of(root, path), {uri_of(root, path): path},
                    {uri_of(root, path): payloads(path)}) for label, path in files.items()]
    sharded = {uri_of(root, p): p for p in sorted((root / "sharded").iterdir())}
    rows.append(measure(server, "sharded folder", f"{server.url}/sharded/", sharded,
                        {uri: payloads(p) for uri, p in sharded.items() if p.suffix == ".bin"}))
    dcp = root / "gpt2_dcp"
    rows.append(measure(server, "gpt2_dcp folder", f"{server.url}/gpt2_dcp/",
                        {uri_of(root, p): p for p in sorted(dcp.iterdir())},
                        {f"/gpt2_dcp/{name}": spans for name, spans in dcp_payloads(dcp).items()}))
    return rows


def timed(run, items: list, seconds: float) -> tuple[int, float]:
    """How many of ``items`` ``run`` took one at a time within ``seconds`` (all,
    if it is fast enough), and the files per second."""
    done, t0 = 0, time.perf_counter()
    while done < len(items) and time.perf_counter() - t0 < seconds:
        run(items[done])
        done += 1
    return done, done / (time.perf_counter() - t0)


def serve_many(root: Path, gpt2: Path, safetensors: Path, files: int) -> None:
    """GPT-2 under ``files`` names (``many/I.bin``), and its safetensors copy as
    ``files`` Hub repositories (``hub/org/mI/resolve/main/model.safetensors``)."""
    (root / "many").mkdir(exist_ok=True)
    for i in range(files):
        link = root / "many" / f"{i}.bin"
        if not link.exists():
            link.symlink_to(gpt2)
        folder = root / "hub" / "org" / f"m{i}" / "resolve" / "main"
        if not folder.exists():
            folder.mkdir(parents=True)
            (folder / "model.safetensors").symlink_to(safetensors)


def tensorplay_speed(urls: list[str], seconds: float) -> dict:
    """All of ``urls`` 16 at once (``scan_paths``'s default), then one at a
    time through one client (kept-alive connections, as the anchor's session)."""
    t0 = time.perf_counter()
    reports = scanner.scan_paths(urls, jobs=16)
    ours = len(urls) / (time.perf_counter() - t0)
    assert all(r.verdict == "clean" for r in reports), {r.verdict for r in reports}
    client = _http.Client()
    try:
        done, one_by_one = timed(lambda url: scanner.scan(url, client=client), urls, seconds)
    finally:
        client.close()
    return {"tensorplay_files_per_s": ours, "tensorplay_one_at_a_time_files": done,
            "tensorplay_one_at_a_time_files_per_s": one_by_one}


def picklescan_speed(urls: list[str], seconds: float) -> dict:
    try:
        from picklescan.scanner import scan_url
    except ImportError:
        return {"picklescan": "not installed (pip install picklescan==1.0.5)"}
    done, speed = timed(scan_url, urls, seconds)
    return {"picklescan_files": done, "picklescan_files_per_s": speed}


def hub_anchor_speed(server: Nginx, files: int, seconds: float) -> dict:
    """huggingface_hub's safetensors metadata parsing (one ranged GET of the
    header, one at a time through its session) of the ``files`` repositories."""
    try:
        from huggingface_hub import HfApi
    except ImportError:
        return {"hf_safetensors_metadata": "huggingface_hub not installed"}
    api = HfApi(endpoint=f"{server.tls_url}/hub")
    try:
        done, speed = timed(lambda i: api.parse_safetensors_file_metadata(f"org/m{i}", "model.safetensors"),
                            list(range(files)), seconds)
    except Exception as e:  # the anchor's own requirements of a Hub (an API it calls)
        return {"hf_safetensors_metadata": f"{type(e).__name__}: {e}"}
    return {"hf_safetensors_metadata_files": done, "hf_safetensors_metadata_files_per_s": speed}


def throughput(server: Nginx, root: Path, gpt2: Path, safetensors: Path, files: int, seconds: float) -> dict:
    serve_many(root, gpt2, safetensors, files)
    # HTTPS for every reader: picklescan's scan_url speaks nothing else.
    os.environ["SSL_CERT_FILE"] = os.environ["REQUESTS_CA_BUNDLE"] = str(server.cafile)
    os.environ["HF_ENDPOINT"] = f"{server.tls_url}/hub"
    urls = [f"{server.tls_url}/many/{i}.bin" for i in range(files)]
    result = {"files": files}
    for key, scanned, run in (("tensorplay", ("files", "tensorplay_one_at_a_time_files"),
                               lambda: tensorplay_speed(urls, seconds)),
                              ("picklescan", ("picklescan_files",), lambda: picklescan_speed(urls, seconds)),
                              ("hf_safetensors_metadata", ("hf_safetensors_metadata_files",),
                               lambda: hub_anchor_speed(server, files, seconds))):
        before = len(server.requests())
        result.update(run())
        log = server.requests()[before:]
        done = sum(result.get(k, 0) for k in scanned)
        if done:  # what each file cost the server, from its log (deterministic but for picklescan's count)
            result[f"{key}_requests_per_file"] = len(log) / done
            result[f"{key}_bytes_per_file"] = sum(row[4] for row in log) / done
    for key, other in (("picklescan", "picklescan_files_per_s"), ("hf_anchor", "hf_safetensors_metadata_files_per_s")):
        if other in result:
            result[f"tensorplay_over_{key}"] = result["tensorplay_files_per_s"] / result[other]
            one_by_one = result["tensorplay_one_at_a_time_files_per_s"]
            result[f"tensorplay_one_at_a_time_over_{key}"] = one_by_one / result[other]
    return result


def profile(server: Nginx) -> None:
    """cProfile of one scan of the GPT-2-shaped file over HTTPS (its first
    name, a connection of its own), after the timed runs."""
    import cProfile
    import pstats

    profiler = cProfile.Profile()
    profiler.enable()
    report = scanner.scan(f"{server.tls_url}/many/0.bin")
    profiler.disable()
    print(f"profile of one GPT-2 scan over HTTPS: {report.remote.round_trips} round trips, "
          f"{report.remote.requests} requests, {report.remote.bytes_read} bytes")
    pstats.Stats(profiler).sort_stats("cumulative").print_stats(25)
    pstats.Stats(profiler).sort_stats("tottime").print_stats(15)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--scale", choices=("small", "full"), default="small")
    ap.add_argument("--data", type=Path, default=HERE / "data")
    ap.add_argument("--files", type=int, default=1000)
    ap.add_argument("--picklescan-seconds", type=float, default=60.0,
                    help="the most each one-at-a-time reader takes (picklescan, the anchor, tensorplay one by one)")
    ap.add_argument("--profile", action="store_true", help="also profile one GPT-2 scan over HTTPS")
    args = ap.parse_args(argv)
    data = args.data / args.scale
    missing = [name for name in CHECKPOINTS if not (data / f"{name}.pt").exists()]
    missing += [] if (data / "gpt2_dcp" / ".metadata").exists() or "gpt2" in missing else ["gpt2"]
    if missing:
        import generate

        generate.generate(args.scale, args.data, only=missing)
    with tempfile.TemporaryDirectory(prefix="tensorplay-remote-bench-") as tmp:
        root = Path(tmp) / "root"
        root.mkdir()
        for name in CHECKPOINTS:
            (root / f"{name}.pt").symlink_to(data / f"{name}.pt")
        (root / "gpt2_dcp").symlink_to(data / "gpt2_dcp")
        files = {name: root / f"{name}.pt" for name in CHECKPOINTS}
        for i, path in enumerate(shard(data / "gpt2.pt", root / "sharded"), 1):
            files[f"gpt2 shard {i}/2"] = path
        server = Nginx(root, Path(tmp) / "nginx")
        try:
            rows = per_unit_rows(server, root, files)
            speed = throughput(server, root, data / "gpt2.pt", data / "gpt2.safetensors", args.files,
                               args.picklescan_seconds)
            if args.profile:
                profile(server)
        finally:
            server.stop()
    print(f"tensorplay {tensorplay.__version__}, scale {args.scale}, nginx on 127.0.0.1")
    print(f"{'checkpoint':16} {'file MB':>9} {'read KB':>9} {'read/file':>10} {'round trips':>12} "
          f"{'requests':>9} {'tensor bytes':>13}  whole file fetched")
    for r in rows:
        print(f"{r['checkpoint']:16} {r['file_bytes'] / 1e6:9.1f} {r['bytes_read'] / 1e3:9.1f} "
              f"{r['fraction']:10.5%} {r['round_trips']:12} {r['requests']:9} {r['tensor_bytes_read']:13}  "
              f"{'yes' if r['whole_file'] else 'no'}")
    singles = [r["round_trips"] for r in rows if r["files"] == 1]
    print(f"median round trips of a file: {statistics.median(singles)}")
    print(json.dumps(speed, indent=2))
    out = HERE / "out"
    out.mkdir(exist_ok=True)
    (out / "remote.json").write_text(json.dumps({"scale": args.scale, "files": rows, "throughput": speed},
                                                indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
