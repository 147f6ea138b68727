#!/usr/bin/env python3
"""Plots offset_util's JSON: uniform-size utilization per size list and policy
(against the physical limit), and the random-size utilization percentiles."""
import argparse
import json
from collections import defaultdict

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

LISTS = ["pow2", "pow2-17", "pow2+17", "x0.9", "x1.1"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("json", help="offset_util --json output")
    parser.add_argument("--out", default="docs/offset_util.png")
    args = parser.parse_args()
    data = json.load(open(args.json, encoding="utf-8"))

    uniform = [r for r in data["uniform"] if r["align"] == 1]
    lists = [l for l in LISTS if any(r.get("list") == l for r in uniform)]
    fig, axes = plt.subplots(1, len(lists) + 1, figsize=(4 * (len(lists) + 1), 3.6))
    for ax, name in zip(axes, lists):
        rows = defaultdict(list)
        for r in uniform:
            if r.get("list") == name:
                rows[r["policy"]].append((r["size"], r["min_util"], r["limit"]))
        for policy, points in sorted(rows.items()):
            points.sort()
            ax.plot([p[0] for p in points], [p[1] for p in points], marker="o", ms=3, label=policy)
        limit = sorted(next(iter(rows.values())))
        ax.plot([p[0] for p in limit], [p[2] for p in limit], "k--", lw=0.8, label="limit floor(P/s)s/P")
        ax.set_xscale("log", base=2)
        ax.set_ylim(0.5, 1.01)
        ax.set_title(f"uniform {name}: min util")
        ax.set_xlabel("size (B)")
    axes[0].legend(fontsize=7)

    ax = axes[-1]
    keys = ["min", "p1", "p10", "p50", "avg", "max"]
    random = [r for r in data["random"] if r["align"] == 1]
    width = 0.8 / max(1, len(random))
    for i, r in enumerate(random):
        ax.bar([k + i * width for k in range(len(keys))], [r[k] for k in keys], width, label=r["policy"])
    ax.set_xticks([k + 0.4 - width / 2 for k in range(len(keys))], keys)
    ax.set_ylim(0.5, 1.0)
    ax.set_title("random sizes: util")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(args.out, dpi=110)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
