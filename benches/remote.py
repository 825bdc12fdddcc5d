"""Scans over HTTP, side by side in one run against the same local nginx
(Debian's nginx-light, as the tests start it):

1. per checkpoint (GPT-2-shaped, LLaMA-shaped, 50,000 tensors, a sharded GPT-2):
   bytes read / file size, round trips, requests, and tensor payload bytes
   fetched, counted from nginx's access log (deterministic: the same every run);
2. files per second scanning one GPT-2 checkpoint served under many names, over
   HTTPS (picklescan's ``scan_url`` speaks nothing else):
   tensorplay (by ranges, 16 at once) against picklescan's ``scan_url`` (which
   downloads each file, on as many files as ``--picklescan-seconds`` allows), and
   huggingface_hub's safetensors metadata parsing of the same model's
   safetensors copy (the range-read anchor: ``get_safetensors_metadata`` through
   ``HF_ENDPOINT``). Throughput on a shared 2-core machine is noisy: report only.

    python benches/remote.py --scale small|full [--files 1000] [--picklescan-seconds 60]

Checkpoints come from ``benches/generate.py`` (made if missing); the results go
to ``benches/out/remote.json`` and a table on standard output.
"""
from __future__ import annotations

import argparse
import json
import os
import struct
import sys
import tempfile
import time
import zipfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))

import tensorplay  # noqa: E402
from http_servers import Nginx  # noqa: E402
from tensorplay import scanner  # noqa: E402

CHECKPOINTS = ("gpt2", "llama_bf16", "many_small")


def payload_ranges(path: Path) -> list[range]:
    data = path.read_bytes()
    ranges = []
    with zipfile.ZipFile(path) as z:
        for info in z.infolist():
            if "/data/" in info.filename and not info.filename.endswith("serialization_id"):
                name_len, extra_len = struct.unpack_from("<HH", data, info.header_offset + 26)
                start = info.header_offset + 30 + name_len + extra_len
                ranges.append(range(start, start + info.compress_size))
    return ranges


def fetched(server: Nginx, before: int, uri: str, size: int) -> list[range]:
    out = []
    for _, logged_uri, header, status, body, _ in server.requests()[before:]:
        if logged_uri != uri:
            continue
        first, _, last = header.removeprefix("bytes=").partition("-")
        start = 0 if status == 200 else (int(first) if first else size - int(last))
        out.append(range(start, start + body))
    return out


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


def per_file_rows(server: Nginx, root: Path, files: dict[str, Path]) -> list[dict]:
    rows = []
    for label, path in files.items():
        uri = "/" + path.relative_to(root).as_posix()
        before = len(server.requests())
        report = scanner.scan(server.url + uri)
        size = path.stat().st_size
        got = fetched(server, before, uri, size)
        payloads = payload_ranges(path)
        touched = sum(max(0, min(r.stop, p.stop) - max(r.start, p.start)) for r in got for p in payloads)
        rows.append({"checkpoint": label, "file_bytes": size, "bytes_read": sum(map(len, got)),
                     "fraction": sum(map(len, got)) / size, "round_trips": report.remote.round_trips,
                     "requests": len(got), "tensor_bytes_read": touched, "verdict": report.verdict,
                     "whole_file": report.remote.whole_file})
    return rows


def throughput(server: Nginx, root: Path, gpt2: Path, safetensors: Path, files: int,
               picklescan_seconds: float) -> dict:
    many = root / "many"
    many.mkdir(exist_ok=True)
    for i in range(files):
        link = many / f"{i}.bin"
        if not link.exists():
            link.symlink_to(gpt2)
    # HTTPS for every reader: picklescan's scan_url speaks nothing else.
    os.environ["SSL_CERT_FILE"] = os.environ["REQUESTS_CA_BUNDLE"] = str(server.cafile)
    urls = [f"{server.tls_url}/many/{i}.bin" for i in range(files)]
    t0 = time.perf_counter()
    reports = scanner.scan_paths(urls, jobs=16)
    ours = files / (time.perf_counter() - t0)
    assert all(r.verdict == "clean" for r in reports), {r.verdict for r in reports}
    result = {"files": files, "tensorplay_files_per_s": ours}
    try:
        from picklescan.scanner import scan_url
    except ImportError:
        result["picklescan"] = "not installed (pip install picklescan==1.0.5)"
    else:
        done, t0 = 0, time.perf_counter()
        while done < files and time.perf_counter() - t0 < picklescan_seconds:
            scan_url(urls[done])
            done += 1
        result["picklescan_files"] = done
        result["picklescan_files_per_s"] = done / (time.perf_counter() - t0)
    hub = root / "hub"
    for i in range(files):
        folder = hub / "org" / f"m{i}" / "resolve" / "main"
        if not folder.exists():
            folder.mkdir(parents=True)
            (folder / "model.safetensors").symlink_to(safetensors)
    os.environ["HF_ENDPOINT"] = f"{server.tls_url}/hub"
    try:
        from huggingface_hub import HfApi
    except ImportError:
        result["hf_safetensors_metadata"] = "huggingface_hub not installed"
        return result
    api = HfApi(endpoint=f"{server.tls_url}/hub")
    done, t0 = 0, time.perf_counter()
    try:
        while done < files and time.perf_counter() - t0 < picklescan_seconds:
            api.parse_safetensors_file_metadata(f"org/m{done}", "model.safetensors")
            done += 1
        result["hf_safetensors_metadata_files_per_s"] = done / (time.perf_counter() - t0)
    except Exception as e:  # the anchor's own requirements of a Hub (an API it calls)
        result["hf_safetensors_metadata"] = f"{type(e).__name__}: {e}"
    return result


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--scale", choices=("small", "full"), default="small")
    ap.add_argument("--data", type=Path, default=HERE / "data")
    ap.add_argument("--files", type=int, default=1000)
    ap.add_argument("--picklescan-seconds", type=float, default=60.0)
    args = ap.parse_args(argv)
    data = args.data / args.scale
    missing = [name for name in CHECKPOINTS if not (data / f"{name}.pt").exists()]
    if missing:
        import generate

        generate.generate(args.scale, args.data, only=missing)
    with tempfile.TemporaryDirectory(prefix="tensorplay-remote-bench-") as tmp:
        root = Path(tmp) / "root"
        root.mkdir()
        for name in CHECKPOINTS:
            (root / f"{name}.pt").symlink_to(data / f"{name}.pt")
        files = {name: root / f"{name}.pt" for name in CHECKPOINTS}
        for i, path in enumerate(shard(data / "gpt2.pt", root / "sharded"), 1):
            files[f"gpt2 shard {i}/2"] = path
        server = Nginx(root, Path(tmp) / "nginx")
        try:
            rows = per_file_rows(server, root, files)
            speed = throughput(server, root, data / "gpt2.pt", data / "gpt2.safetensors", args.files,
                               args.picklescan_seconds)
        finally:
            server.stop()
    print(f"tensorplay {tensorplay.__version__}, scale {args.scale}, nginx on 127.0.0.1")
    print(f"{'checkpoint':16} {'file MB':>9} {'read KB':>9} {'read/file':>10} {'round trips':>12} "
          f"{'requests':>9} {'tensor bytes':>13}")
    for r in rows:
        print(f"{r['checkpoint']:16} {r['file_bytes'] / 1e6:9.1f} {r['bytes_read'] / 1e3:9.1f} "
              f"{r['fraction']:10.5%} {r['round_trips']:12} {r['requests']:9} {r['tensor_bytes_read']:13}")
    print(json.dumps(speed, indent=2))
    out = HERE / "out"
    out.mkdir(exist_ok=True)
    (out / "remote.json").write_text(json.dumps({"scale": args.scale, "files": rows, "throughput": speed},
                                                indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
