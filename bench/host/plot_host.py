#!/usr/bin/env python3
"""Plots of bench/host results (the --json list of unipool_host_bench).

  python3 bench/host/plot_host.py bench/results/host.json --out docs

writes
  host_throughput.png   ops/s relative to glibc, per workload and thread count
  host_latency.png      p99 alloc and free latency per workload (1 thread)
  host_threadcache.png  the thread-cache study: ops per CPU-second and RSS / requested (over
                        the concurrent peak, and over the threads' own peaks
                        summed) by thread count, for every unipool thread-cache
                        policy and the peers
"""
import argparse
import json
import os
from collections import defaultdict

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

PEERS = ["glibc", "mimalloc", "jemalloc", "tcmalloc", "unipool"]
COLORS = {"glibc": "#7f7f7f", "mimalloc": "#1f77b4", "jemalloc": "#2ca02c", "tcmalloc": "#9467bd",
          "unipool": "#d62728", "unipool:unlimited": "#ff9896", "unipool:performance": "#d62728",
          "unipool:size": "#8c564b", "unipool:none": "#e377c2"}


def load(path):
    with open(path) as f:
        rows = json.load(f)
    by = {}
    for r in rows:
        by[(r["allocator"], r["workload"], r["threads"])] = r
    return rows, by


def workloads_in(rows):
    seen = []
    for r in rows:
        if r["workload"] not in seen:
            seen.append(r["workload"])
    return seen


def plot_throughput(rows, by, out):
    workloads = [w for w in workloads_in(rows) if w != "rpmalloc_random"]
    threads = sorted({r["threads"] for r in rows})
    fig, axes = plt.subplots(len(threads), 1, figsize=(13, 3.6 * len(threads)), squeeze=False)
    width = 0.8 / len(PEERS)
    for ax, t in zip(axes[:, 0], threads):
        for i, a in enumerate(PEERS):
            xs, ys = [], []
            for j, w in enumerate(workloads):
                g = by.get(("glibc", w, t))
                r = by.get((a, w, t))
                if g and r and g["ops_per_s"] > 0:
                    xs.append(j + (i - len(PEERS) / 2 + 0.5) * width)
                    ys.append(r["ops_per_s"] / g["ops_per_s"])
            ax.bar(xs, ys, width, label=a, color=COLORS[a])
        ax.axhline(1.0, color="black", linewidth=0.6)
        ax.set_yscale("log")
        ax.set_xticks(range(len(workloads)))
        ax.set_xticklabels(workloads, fontsize=8)
        ax.set_ylabel(f"ops/s vs glibc (log), {t} thread{'s' if t > 1 else ''}")
        ax.legend(fontsize=7, ncol=len(PEERS))
    fig.suptitle("bench/host: throughput relative to glibc (higher is better)")
    fig.tight_layout()
    fig.savefig(os.path.join(out, "host_throughput.png"), dpi=110)
    plt.close(fig)


def plot_latency(rows, by, out, threads=1):
    workloads = [w for w in workloads_in(rows) if w != "rpmalloc_random"]
    fig, axes = plt.subplots(2, 1, figsize=(13, 7))
    width = 0.8 / len(PEERS)
    for ax, key, title in ((axes[0], "p99_alloc_ns", "p99 alloc"), (axes[1], "p99_free_ns", "p99 free")):
        for i, a in enumerate(PEERS):
            xs, ys = [], []
            for j, w in enumerate(workloads):
                r = by.get((a, w, threads))
                if r:
                    xs.append(j + (i - len(PEERS) / 2 + 0.5) * width)
                    ys.append(max(r[key], 1.0))
            ax.bar(xs, ys, width, label=a, color=COLORS[a])
        ax.set_yscale("log")
        ax.set_xticks(range(len(workloads)))
        ax.set_xticklabels(workloads, fontsize=8)
        ax.set_ylabel(f"{title} ns (log)")
        ax.legend(fontsize=7, ncol=len(PEERS))
    fig.suptitle(f"bench/host: tail latency at {threads} thread (lower is better)")
    fig.tight_layout()
    fig.savefig(os.path.join(out, "host_latency.png"), dpi=110)
    plt.close(fig)


def plot_threadcache(rows, out):
    study = [r for r in rows if r["workload"] == "rpmalloc_random"]
    if not study:
        return
    series = defaultdict(list)
    for r in study:
        series[r["allocator"]].append(r)
    fig, (ax1, ax2, ax3) = plt.subplots(1, 3, figsize=(17, 4.8))
    for name, rs in series.items():
        rs.sort(key=lambda r: r["threads"])
        t = [r["threads"] for r in rs]
        style = "-o" if name.startswith("unipool") else "--s"
        ax1.plot(t, [r["ops_per_cpu_s"] / 1e6 for r in rs], style, label=name, color=COLORS.get(name))
        ax2.plot(t, [r["rss_over_requested"] for r in rs], style, label=name, color=COLORS.get(name))
        ax3.plot(t, [r.get("rss_over_thread_peaks", 0) for r in rs], style, label=name, color=COLORS.get(name))
    ax1.set_xlabel("threads")
    ax1.set_ylabel("M ops per CPU-second")
    ax1.set_title("work per CPU-second (higher is better)")
    ax2.set_xlabel("threads")
    ax2.set_ylabel("(peak RSS - baseline) / peak requested")
    ax2.axhline(1.15, color="black", linewidth=0.6, linestyle=":")
    ax2.set_title("RSS / concurrent peak requested (dotted: 1.15)")
    ax3.set_xlabel("threads")
    ax3.set_ylabel("(peak RSS - baseline) / sum of thread peaks")
    ax3.axhline(1.15, color="black", linewidth=0.6, linestyle=":")
    ax3.set_title("RSS / threads' own peaks summed (dotted: 1.15)")
    for ax in (ax1, ax2, ax3):
        ax.set_xticks(sorted({r["threads"] for r in study}))
        ax.legend(fontsize=7)
    fig.suptitle("bench/host rpmalloc_random: thread-cache policies")
    fig.tight_layout()
    fig.savefig(os.path.join(out, "host_threadcache.png"), dpi=110)
    plt.close(fig)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("json")
    p.add_argument("--out", default="docs")
    args = p.parse_args()
    rows, by = load(args.json)
    os.makedirs(args.out, exist_ok=True)
    plot_throughput(rows, by, args.out)
    plot_latency(rows, by, args.out)
    plot_threadcache(rows, args.out)


if __name__ == "__main__":
    main()
