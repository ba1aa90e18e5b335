#!/usr/bin/env python3
"""Draws a benchmark table (the markdown bench_flash.py writes) as grouped
bars, one panel per (dtype, head_dim, causal) and one group per seqlen, like
the FlashAttention papers' charts.

    python3 bench/plot_results.py TABLE.md OUT.png [--title "..."]

TABLE.md may be bench/RESULTS.md: its last full table is drawn.
"""
import argparse
import math
import sys
from pathlib import Path

BACKENDS = ("tilec", "FA2", "cuDNN", "Flex")


def last_table(text):
    """Rows (dicts) of the last markdown table whose header names 'tilec'."""
    tables, current = [], None
    for line in text.splitlines():
        if line.startswith("| dtype |") and "tilec" in line:
            current = {"header": [c.strip() for c in line.strip("|").split("|")], "rows": []}
            tables.append(current)
        elif current is not None and line.startswith("|") and not line.startswith("|---"):
            cells = [c.strip() for c in line.strip("|").split("|")]
            current["rows"].append(dict(zip(current["header"], cells)))
        elif not line.startswith("|"):
            current = None
    if not tables:
        raise SystemExit("no benchmark table found")
    return tables[-1]["rows"]


def number(cell):
    try:
        return float(cell.rstrip("!"))
    except (ValueError, AttributeError):
        return 0.0


def plot(rows, out, title):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = []
    for r in rows:
        key = (r["dtype"], r["d"], r["causal"])
        if key not in panels:
            panels.append(key)
    cols = 2
    fig, axes = plt.subplots(math.ceil(len(panels) / cols), cols,
                             figsize=(12, 3.2 * math.ceil(len(panels) / cols)), squeeze=False)
    colors = {"tilec": "#d62728", "FA2": "#1f77b4", "cuDNN": "#2ca02c", "Flex": "#9467bd"}
    backends = [b for b in BACKENDS if any(b in r for r in rows)]
    width = 0.8 / len(backends)
    for ax, key in zip(axes.flat, panels):
        sub = [r for r in rows if (r["dtype"], r["d"], r["causal"]) == key]
        for i, backend in enumerate(backends):
            xs = [j + (i - (len(backends) - 1) / 2) * width for j in range(len(sub))]
            values = [number(r.get(backend)) for r in sub]
            bars = ax.bar(xs, values, width, label=backend, color=colors[backend])
            for bar, v in zip(bars, values):
                if v:
                    ax.text(bar.get_x() + bar.get_width() / 2, v, f"{v:.0f}", ha="center",
                            va="bottom", fontsize=6)
        ax.set_xticks(range(len(sub)), [r["seqlen"] for r in sub])
        ax.set_title(f"{key[0]}, head dim {key[1]}, {'causal' if key[2] == 'yes' else 'non-causal'}",
                     fontsize=9)
        ax.set_ylabel("TFLOP/s")
        ax.set_xlabel("sequence length (16k tokens per batch)")
    for ax in list(axes.flat)[len(panels):]:
        ax.axis("off")
    axes.flat[0].legend(fontsize=8, ncol=len(backends))
    fig.suptitle(title, fontsize=11)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    print(f"wrote {out}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("table")
    parser.add_argument("out")
    parser.add_argument("--title", default="Attention forward, H200 (sm_80 code path for tilec)")
    args = parser.parse_args()
    plot(last_table(Path(args.table).read_text()), args.out, args.title)
    return 0


if __name__ == "__main__":
    sys.exit(main())
