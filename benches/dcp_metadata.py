"""A DCP folder's ``.metadata`` read side by side: ``tensorplay.dcp.read_metadata``
(both backends) against torch's ``FileSystemReader(folder).read_metadata()``, on
the 50,000-tensor folder ``many_small_dcp`` (``generate.py`` writes it; it is made
here when missing).

    python benches/dcp_metadata.py [--scale full] [--runs 7] [--check]

Every run of every reader is a fresh process (``_child.py``): imports first, then
the peak-RSS counter reset, then the timed call. Runs go round-robin over the
readers, the folder read once before each round (warm page cache). Writes the
section "DCP .metadata" of RESULTS.md (``run.py`` keeps it; full scale only) and
``out/dcp_metadata.json`` (``dcp_metadata_small.json``). With ``--check``, exits 1 when tensorplay's median
peak is above torch's.
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import statistics
import sys
from pathlib import Path

import run

HERE = Path(__file__).resolve().parent
CHECKPOINT = "many_small"
READERS = {
    "torch_dcp_metadata": "torch: `FileSystemReader(folder).read_metadata()`",
    "tp_dcp_metadata": "tensorplay: `dcp.read_metadata(folder, backend='torch')`",
    "tp_dcp_metadata_numpy": "tensorplay: `dcp.read_metadata(folder, backend='numpy')`",
}
BASELINE = "torch_dcp_metadata"
HEADING = "## DCP `.metadata`"


def folder_of(data: Path, scale: str) -> Path:
    """The DCP folder of ``many_small`` at ``scale``, written first if missing."""
    manifest = data / scale / "manifest.json"
    info = json.loads(manifest.read_text())["checkpoints"].get(CHECKPOINT, {}) if manifest.exists() else {}
    if "dcp" not in info:
        import generate

        info = generate.generate(scale, data, only=[CHECKPOINT])["checkpoints"][CHECKPOINT]
    return data / scale / info["dcp"]


def measure(folder: Path, runs: int, log) -> dict[str, dict]:
    recs: dict[str, list[dict]] = {op: [] for op in READERS}
    for r in range(runs):
        run.warm([folder])
        for op in READERS:
            recs[op] += run.run_child([{"op": op, "path": str(folder)}])
        log(f"  round {r + 1}/{runs} done")
    out = {}
    for op, rs in recs.items():
        ok = [r for r in rs if "error" not in r]
        entry = {"runs": rs, "n": len(ok), "errors": sorted({r["error"] for r in rs if "error" in r})}
        if ok:
            peaks = [r["peak_delta_kib"] / 1024 for r in ok]
            entry.update(median_ms=statistics.median(r["ms"] for r in ok), min_ms=min(r["ms"] for r in ok),
                         peak_mib=statistics.median(peaks), peak_max_mib=max(peaks),
                         anon_mib=statistics.median(r["anon_delta_kib"] for r in ok) / 1024,
                         result=ok[0]["result"])
        out[op] = entry
    return out


def render(results: dict) -> str:
    m, readers = results["machine"], results["readers"]
    base = readers[BASELINE]
    lines = [
        f"{HEADING} (issue 45)", "",
        f"`{results['command']}`, run on {results['finished_at']} at commit {m['tensorplay_commit']} "
        f"(core sha256 {results['core_sha256']}), torch {m['versions'].get('torch')}, load average "
        f"{', '.join(f'{x:.2f}' for x in m['loadavg_at_start'] or ())} at the start. The folder: "
        f"`{results['folder']}`, {results['items']} items ({results['tensors']} tensors), `.metadata` "
        f"{results['metadata_bytes'] / 2**20:.1f} MiB. {results['runs']} runs of each reader, each a fresh "
        "process, round-robin, warm page cache; medians.", "",
        "Peak RSS Δ is `VmHWM` (reset through `/proc/self/clear_refs` just before the call) minus the RSS "
        "just before it: it counts every allocator the same way, the Rust core's and torch's C++ ones "
        "included, which tracemalloc (Python's allocators only) would not. Anon Δ is the anonymous memory "
        "the process holds after the call more than before: the result, and freed heap the allocators kept. "
        "The ratios are tensorplay ÷ torch, so below 1 tensorplay is faster or smaller.", "",
        "| reader | median ms | min ms | peak RSS Δ MiB | highest peak MiB | anon Δ MiB | time ÷ torch "
        "| peak ÷ torch |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for op, label in READERS.items():
        e = readers[op]
        if not e["n"]:
            lines.append(f"| {label} | error: {'; '.join(e['errors'])[:120]} | | | | | | |")
            continue
        ratios = ("", "")
        if op != BASELINE and base.get("n"):
            ratios = (f"{e['median_ms'] / base['median_ms']:.2f}", f"{e['peak_mib'] / base['peak_mib']:.2f}")
        lines.append(f"| {label} | {run.fmt_ms(e['median_ms'])} | {run.fmt_ms(e['min_ms'])} | "
                     f"{e['peak_mib']:.1f} | {e['peak_max_mib']:.1f} | {e['anon_mib']:.1f} | {ratios[0]} | "
                     f"{ratios[1]} |")
    return "\n".join(lines) + "\n"


def write_section(path: Path, section: str) -> None:
    """Put ``section`` in the report at ``path``: in place of its earlier version,
    else before the sections run.py keeps, else at the end."""
    text = path.read_text() if path.exists() else ""
    start = text.find(HEADING)
    if start >= 0:
        end = text.find("\n## ", start + len(HEADING))
        text = text[:start] + section + (text[end + 1:] if end >= 0 else "")
    else:
        kept = [at for at in (text.find(h) for h in run.KEPT_SECTIONS) if at >= 0]
        at = min(kept) if kept else len(text)
        text = text[:at] + section + ("\n" if at < len(text) else "") + text[at:]
    path.write_text(text)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--scale", choices=("small", "full"), default="full",
                    help="full: 50,000 tensors (the claim); small: 2,000, a quick check")
    ap.add_argument("--runs", type=int, default=7)
    ap.add_argument("--data", type=Path, default=HERE / "data")
    ap.add_argument("--results", type=Path, default=HERE / "RESULTS.md")
    ap.add_argument("--out", type=Path, default=HERE / "out")
    ap.add_argument("--check", action="store_true", help="exit 1 when tensorplay's median peak is above torch's")
    args = ap.parse_args(argv)
    folder = folder_of(args.data, args.scale)
    info = run.probe()
    import torch.distributed.checkpoint as dcp  # our generated folder: torch's own reader is fine here

    metadata = dcp.FileSystemReader(folder).read_metadata()
    tensors = sum(isinstance(md, dcp.metadata.TensorStorageMetadata) for md in metadata.state_dict_metadata.values())
    items = len(metadata.state_dict_metadata)
    del metadata
    run.compile_bytecode([info["tensorplay_path"]])
    machine = run.machine(info)
    print(f"{folder}: {items} items; tensorplay {info['tensorplay_path']}, torch {info['torch']}", flush=True)
    readers = measure(folder, args.runs, print)
    results = {
        "command": "python benches/dcp_metadata.py " + " ".join(argv if argv is not None else sys.argv[1:]),
        "finished_at": dt.datetime.now().isoformat(timespec="seconds"),
        "machine": machine, "core_sha256": info.get("tensorplay_core_sha256"), "runs": args.runs,
        "folder": f"{args.scale}/{folder.name}", "items": items, "tensors": tensors,
        "metadata_bytes": (folder / ".metadata").stat().st_size, "readers": readers,
    }
    for e in readers.values():
        if e["n"] and e["result"] != f"{items} items":
            e["errors"].append(f"returned {e['result']}, expected {items} items")
    args.out.mkdir(parents=True, exist_ok=True)
    raw = "dcp_metadata.json" if args.scale == "full" else f"dcp_metadata_{args.scale}.json"
    (args.out / raw).write_text(json.dumps(results, indent=1) + "\n")
    section = render(results)
    print(section)
    if args.scale == "full":
        write_section(args.results, section)
    problems = [f"{op}: {'; '.join(e['errors'])}" for op, e in readers.items() if e["errors"] or not e["n"]]
    if args.check and not problems:
        base = readers[BASELINE]["peak_mib"]
        problems += [f"{op}: peak {e['peak_mib']:.1f} MiB above torch's {base:.1f} MiB"
                     for op, e in readers.items() if op != BASELINE and e["peak_mib"] > base]
    for p in problems:
        print(f"problem: {p}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
