"""The speed ratios of a benchmark run as a bar chart (SVG, drawn by hand: no
plotting library), from the "### Speed" table of RESULTS.md: for each workload,
how many times longer torch.load and safetensors take than tensorplay. The
docs' Performance page shows it; run.py redraws it after each full run, and
`python benches/chart.py --check` (tests/test_docs.py) checks the committed
chart is the one RESULTS.md gives. CI never re-runs the benchmarks for it."""
from __future__ import annotations

import argparse
import math
import re
import sys
from pathlib import Path
from xml.sax.saxutils import escape

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "RESULTS.md"
CHART = HERE.parent / "docs" / "assets" / "bench_ratios.svg"

# The rows of the Speed table drawn, each with its legend and colour.
SERIES = [
    ("eager: torch.load(weights_only=True) ÷ tensorplay (torch backend)",
     "torch.load ÷ tensorplay.load", "#4c72b0"),
    ("mmap: torch.load(weights_only=True, mmap=True) ÷ tensorplay mmap (torch)",
     "torch.load(mmap=True) ÷ tensorplay.load(mmap=True)", "#55a868"),
    ("safetensors.torch.load_file ÷ tensorplay mmap (torch)",
     "safetensors.torch.load_file ÷ tensorplay.load(mmap=True)", "#c44e52"),
    ("safetensors.numpy.load_file ÷ tensorplay eager (numpy)",
     "safetensors.numpy.load_file ÷ tensorplay.load(backend='numpy')", "#8172b2"),
]


def speed_table(text: str) -> tuple[list[str], dict[str, list[float]]]:
    """The workloads and, per row, the ratios of the medians."""
    section = text[text.index("### Speed"):]
    lines = [line for line in section.splitlines() if line.startswith("|")]
    workloads = [cell.strip() for cell in lines[0].strip("|").split("|")[1:]]
    rows = {}
    for line in lines[2:]:
        cells = [cell.strip() for cell in line.strip("|").split("|")]
        rows[cells[0]] = [float(m[1]) if (m := re.match(r"([\d.]+)×", c)) else math.nan for c in cells[1:]]
    return workloads, rows


def machine(text: str) -> list[str]:
    """The run's machine lines (CPU, RAM, kernel, versions), as RESULTS.md gives them."""
    section = text[text.index("## Machine"):]
    section = section[:section.index("\n## ", 1)]
    return [line[2:] for line in section.splitlines() if line.startswith("- ")][:4]


def draw(text: str) -> str:
    workloads, rows = speed_table(text)
    series = [(legend, colour, rows[row]) for row, legend, colour in SERIES]
    top = 2 ** math.ceil(math.log2(max(v for _, _, vals in series for v in vals if v == v)))
    width, plot_h, left, top_pad, bar, gap = 760, 300, 60, 40, 24, 40
    group = bar * len(series) + gap
    measured_on = machine(text)
    height = top_pad + plot_h + 40 + 20 * len(series) + 20 + 16 * len(measured_on)

    def y(value: float) -> float:  # log2 scale from 0.5 to `top`
        return top_pad + plot_h * (1 - (math.log2(value) + 1) / (math.log2(top) + 1))

    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           f'viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="12">',
           f'<text x="{left}" y="20" font-size="14">Times faster than the baseline (median, log scale; '
           f'above 1: tensorplay is faster)</text>']
    tick = 0.5
    while tick <= top:
        out.append(f'<line x1="{left}" x2="{width - 10}" y1="{y(tick):.1f}" y2="{y(tick):.1f}" '
                   f'stroke="{"#333" if tick == 1 else "#ddd"}"/>')
        out.append(f'<text x="{left - 6}" y="{y(tick) + 4:.1f}" text-anchor="end">{tick:g}×</text>')
        tick *= 2
    for g, workload in enumerate(workloads):
        x0 = left + 10 + g * group
        for s, (legend, colour, values) in enumerate(series):
            value = values[g]
            if value != value:
                continue
            x, top_y = x0 + s * bar, y(max(value, 0.5))
            out.append(f'<rect x="{x}" y="{top_y:.1f}" width="{bar - 2}" height="{y(0.5) - top_y:.1f}" '
                       f'fill="{colour}"><title>{escape(workload)}: {escape(legend)} = {value:g}×</title></rect>')
            out.append(f'<text x="{x + (bar - 2) / 2}" y="{top_y - 3:.1f}" text-anchor="middle" '
                       f'font-size="9">{value:.3g}</text>')
        out.append(f'<text x="{x0 + bar * len(series) / 2}" y="{top_pad + plot_h + 16}" '
                   f'text-anchor="middle">{escape(workload)}</text>')
    for s, (legend, colour, _) in enumerate(series):
        ly = top_pad + plot_h + 40 + 20 * s
        out.append(f'<rect x="{left}" y="{ly - 10}" width="12" height="12" fill="{colour}"/>')
        out.append(f'<text x="{left + 18}" y="{ly}">{escape(legend)}</text>')
    for m, line in enumerate(measured_on):
        out.append(f'<text x="{left}" y="{top_pad + plot_h + 40 + 20 * len(series) + 16 * m + 10}" font-size="10" '
                   f'fill="#555">{escape(line)}</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--results", type=Path, default=RESULTS)
    ap.add_argument("--out", type=Path, default=CHART)
    ap.add_argument("--check", action="store_true", help="fail if the chart is not the one the results give")
    args = ap.parse_args()
    svg = draw(args.results.read_text())
    if args.check:
        if not args.out.is_file() or args.out.read_text() != svg:
            print(f"{args.out} is not drawn from {args.results}: run python benches/chart.py", file=sys.stderr)
            return 1
        return 0
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(svg)
    return 0


if __name__ == "__main__":
    sys.exit(main())
