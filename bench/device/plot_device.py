#!/usr/bin/env python3
"""Plots a device_bench JSON run: peak reserved over peak requested per
trace and allocator, and the hot path's CPU ns per alloc+free, side by side.

  python3 bench/device/plot_device.py bench/results/device.json docs/device_bench.png

Figures measured on the null GPU are host-side: the title says so.
"""
from __future__ import annotations

import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

ORDER = ["unipool", "unipool:expandable", "torch", "torch:expandable", "cub", "cudamalloc"]
COLORS = {"unipool": "#1f77b4", "unipool:expandable": "#6baed6", "torch": "#d62728",
          "torch:expandable": "#fc9272", "cub": "#2ca02c", "cudamalloc": "#969696"}


def grouped_bars(ax, groups: list[str], series: dict[str, list[float]], ylabel: str) -> None:
    """One group of bars per entry of `groups`, one bar per allocator."""
    names = [n for n in ORDER if n in series]
    width = 0.8 / len(names)
    for i, name in enumerate(names):
        xs = [g + (i - (len(names) - 1) / 2) * width for g in range(len(groups))]
        ax.bar(xs, series[name], width, label=name, color=COLORS[name])
    ax.set_xticks(range(len(groups)), groups, rotation=20)
    ax.set_ylabel(ylabel)
    ax.grid(axis="y", alpha=0.3)


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(__doc__)
        return 2
    run = json.load(open(argv[0]))
    traces = list(dict.fromkeys(r["trace"] for r in run["records"]))
    overhead: dict[str, list[float]] = {}
    for name in ORDER:
        rows = {r["trace"]: r for r in run["records"] if r["allocator"] == name}
        if rows:
            overhead[name] = [rows[t]["peak_reserved"] / rows[t]["peak_requested"] if t in rows else 0 for t in traces]
    sizes = sorted({h["bytes"] for h in run["hot_path"]})
    hot: dict[str, list[float]] = {}
    for name in ORDER:
        rows = {h["bytes"]: h["ns_per_op"] for h in run["hot_path"] if h["allocator"] == name}
        if rows:
            hot[name] = [rows.get(b, 0) for b in sizes]
    fig, (left, right) = plt.subplots(1, 2, figsize=(14, 5), gridspec_kw={"width_ratios": [3, 1]})
    grouped_bars(left, traces, overhead, "peak reserved / peak requested (lower is better)")
    left.set_ylim(1.0, max(max(v) for v in overhead.values()) * 1.05)
    left.set_title("device memory per trace")
    grouped_bars(right, [f"{b // 1024} KiB" for b in sizes], hot, "CPU ns per alloc+free (lower is better)")
    right.set_title("hot path: a cached block, same stream")
    left.legend(ncol=3, fontsize=8)
    fig.suptitle("device_bench on the null GPU: allocator bookkeeping on the CPU, no GPU time")
    fig.tight_layout()
    fig.savefig(argv[1], dpi=110)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
