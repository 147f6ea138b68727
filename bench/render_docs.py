#!/usr/bin/env python3
"""Renders the benchmark tables and plots of docs/ from the results that
scripts/bench.sh writes (bench/results/ by default): every figure in the docs
comes from a results file, none is typed by hand.

  python3 bench/render_docs.py [RESULTS_DIR] [--docs DOCS_DIR] [--check]

Tables go between marker comments in the docs, which the rest of each page
leaves alone:
  <!-- bench:NAME:begin -->  ...generated...  <!-- bench:NAME:end -->
Plots are written by each benchmark's own plot script. --check rewrites
nothing and fails if a page differs from what the results give.

Results read (missing ones leave their sections as they are, with a note):
  offset_util.json, offset_util.txt (stdout)   docs/benchmarks.md, docs/offset_util.png
  device.json                                  docs/benchmarks.md, docs/device_pool.md,
                                               docs/device_bench.png
  kv_offload.json                              docs/benchmarks.md, docs/kv_offload.md
  shared_kv.json                               docs/kv_offload.md, docs/benchmarks.md
  model_live.json                              docs/benchmarks.md
  transfer.json                                docs/transfer.md, docs/benchmarks.md
  programs.json                                docs/host_benchmarks.md, docs/benchmarks.md
  host*.json, host.txt (stdout)                docs/benchmarks.md, docs/host_benchmarks.md,
                                               docs/host_*.png (host.json; every
                                               host*.json is a run for the ranges)
"""
from __future__ import annotations

import argparse
import glob
import json
import os
import re
import subprocess
import sys
from collections import defaultdict

HERE = os.path.dirname(os.path.abspath(__file__))
GIB = float(1 << 30)
MIB = float(1 << 20)


def load(path: str):
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def md_table(header: list[str], align: str, rows: list[list[str]]) -> str:
    """A markdown table; `align` has one letter per column, l or r."""
    sep = ["---" if a == "l" else "---:" for a in align]
    lines = ["| " + " | ".join(header) + " |", "| " + " | ".join(sep) + " |"]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


def span(values: list[float], fmt: str) -> str:
    """'a' or 'lo-hi' over runs, in the format `fmt` (one decimal from 10 up)."""
    if max(values) >= 10:
        fmt = "{:.1f}"
    lo, hi = fmt.format(min(values)), fmt.format(max(values))
    return lo if lo == hi else f"{lo}-{hi}"


# --- offset_util -------------------------------------------------------------


def offset_util_targets(d) -> str:
    uni = [r for r in d["uniform"] if r["align"] == 1]
    at_limit = defaultdict(int)
    for r in uni:
        at_limit[r["policy"]] += abs(r["limit"] - r["min_util"]) <= 1e-6 and abs(r["limit"] - r["avg_util"]) <= 1e-6
    sizes = sum(1 for r in uni if r["policy"] == "unipool")
    rnd = {r["policy"]: r for r in d["random"] if r["align"] == 1}
    paired = {r["policy"]: r for r in d["paired"] if r["align"] == 1}
    pair = {r["policy"]: r for r in d["pair"] if r["align"] == 1}

    def met(ok: bool) -> str:
        return "met" if ok else "**missed**"

    ok_uniform = at_limit["unipool"] == sizes
    u, b = rnd["unipool"], rnd["bin-roundup"]
    ok_random = u["avg"] >= 0.865 and u["p1"] >= 0.73
    p = paired["unipool"]
    # Mean ns per call of each table, unipool against bin-roundup.
    ns = defaultdict(list)
    for r in uni:
        ns[(r["list"], r["policy"])].append(r["ns_per_op"])
    lists = list(dict.fromkeys(r["list"] for r in uni))
    pairs = [(f"uniform {l}", sum(ns[(l, "unipool")]) / len(ns[(l, "unipool")]),
              sum(ns[(l, "bin-roundup")]) / len(ns[(l, "bin-roundup")])) for l in lists]
    pairs += [("random", u["ns_per_op"], b["ns_per_op"]),
              ("paired", p["ns_per_op"], paired["bin-roundup"]["ns_per_op"]),
              ("alloc_free_pair", pair["unipool"]["ns_per_pair"], pair["bin-roundup"]["ns_per_pair"])]
    faster = sum(1 for _, a, c in pairs if a <= c)
    ns_detail = ", ".join(f"{n} {a:.1f} vs {c:.1f}" for n, a, c in pairs)
    rows = [
        ["uniform, every size, align 1: min = avg = limit within 1e-6",
         f"{met(ok_uniform)}: {at_limit['unipool']} of {sizes} sizes "
         f"(bin-roundup {at_limit['bin-roundup']}, exact {at_limit['exact']})"],
        ["random: avg >= 0.865, p1 >= 0.73",
         f"{met(ok_random)}: avg {u['avg']:.6f}, p1 {u['p1']:.6f} (bin-roundup {b['avg']:.6f} / {b['p1']:.6f})"],
        ["paired KV/indexer: avg >= 0.995",
         f"{met(p['avg_util'] >= 0.995)}: {p['avg_util']:.6f} (bin-roundup {paired['bin-roundup']['avg_util']:.6f}, "
         f"exact {paired['exact']['avg_util']:.6f})"],
        ["mean ns per call <= bin-roundup's, every table",
         f"{met(faster == len(pairs))}: on {faster} of {len(pairs)} tables (unipool vs bin-roundup: {ns_detail})"],
    ]
    return md_table(["target", "result"], "ll", rows)


def offset_util_tables(stdout: str) -> str:
    """The markdown tables of offset_util's stdout, one heading level down,
    without its progress lines and its header (the run's settings)."""
    body = stdout.split("\n## ", 1)[1].split("\n# ", 1)[0]  # first table .. before --mooncake-format's tables
    lines = [l for l in ("## " + body).splitlines() if not l.startswith("[")]
    text = "\n".join("#" + l if l.startswith("## ") else l for l in lines)
    # Older outputs also give the low percentiles allocator_bench's names.
    text = re.sub(r' \([^()]*"p99" / "p90", the low tail\)', " (the low tail)", text)
    return re.sub(r"\n{3,}", "\n\n", text).strip()


def offset_util_spread(d) -> str:
    """How far apart the timed runs of one row fell, in this run."""
    spreads = sorted(max(r["ns_runs"]) / min(r["ns_runs"]) - 1 for k in ("uniform", "random", "paired", "pair")
                     for r in d.get(k, []) if len(r.get("ns_runs", [])) > 1)
    if not spreads:
        return "This run timed each row once, so it says nothing about how much the ns figures move."
    runs = max(len(r["ns_runs"]) for k in ("uniform", "random", "paired", "pair") for r in d.get(k, []))
    mid = spreads[len(spreads) // 2]
    return (f"Its ns figures move from one timed run to the next: in this run the slowest of a row's {runs} "
            f"timed runs was {mid:.0%} above the fastest on the median row, and up to {spreads[-1]:.1f}x it "
            f"({len(spreads)} rows), more than the gap between the policies on some tables.")


# --- device_bench ------------------------------------------------------------

DEVICE_ORDER = ["unipool", "torch", "unipool:expandable", "torch:expandable", "cub"]


def device_tables(d) -> str:
    rec = {(r["trace"], r["allocator"]): r for r in d["records"]}
    traces = list(dict.fromkeys(r["trace"] for r in d["records"]))
    rows = []
    for t in traces:
        res = {a: rec[(t, a)]["peak_reserved"] / MIB for a in DEVICE_ORDER if (t, a) in rec}
        cells = {a: f"{v:,.0f}" for a, v in res.items()}
        for ours, theirs in (("unipool", "torch"), ("unipool:expandable", "torch:expandable")):
            if ours in res and theirs in res and round(res[ours]) != round(res[theirs]):
                low = ours if res[ours] < res[theirs] else theirs
                cells[low] = f"**{cells[low]}**"
        req = rec[(t, "unipool")]["peak_requested"] / MIB
        rows.append([t, f"{req:,.0f} MiB"] + [cells.get(a, "") for a in DEVICE_ORDER])
    reserved = md_table(["trace", "peak requested"] + DEVICE_ORDER, "lrrrrrr", rows)

    hot = {(h["bytes"], h["allocator"]): h["ns_per_op"] for h in d["hot_path"]}
    sizes = list(dict.fromkeys(h["bytes"] for h in d["hot_path"]))
    hrows = []
    for b in sizes:
        label = f"{b >> 20} MiB" if b >= 1 << 20 else f"{b >> 10} KiB"
        hrows.append([f"{label}, CPU ns per alloc+free"] + [f"{hot[(b, a)]:.0f}" if (b, a) in hot else ""
                                                             for a in DEVICE_ORDER])
    hot_table = md_table(["hot path (a cached block, same stream)"] + DEVICE_ORDER, "lrrrrr", hrows)

    whole = "Whole traces, CPU ns per allocation + its free: " + whole_traces(d) + "."
    return "\n\n".join(["Peak reserved in MiB (bold: the lower of each unipool/torch pair).", reserved, hot_table,
                        whole])


def whole_traces(d) -> str:
    """The range over traces of each allocator's CPU ns per allocation + its
    free (torch's two modes together)."""
    groups = [("unipool", ["unipool"]), ("unipool:expandable", ["unipool:expandable"]),
              ("torch", ["torch", "torch:expandable"]), ("CUB", ["cub"]), ("one cudaMalloc each", ["cudamalloc"])]
    parts = []
    for name, members in groups:
        ns = [r["ns_per_op"] for r in d["records"] if r["allocator"] in members]
        if ns:
            parts.append(f"{name} {min(ns):,.0f}-{max(ns):,.0f}")
    return ", ".join(parts)


def device_findings(d) -> str:
    """docs/device_pool.md's reading of the run: the figures its prose
    explains, one bullet per trace, each a sentence filled from the JSON."""
    rec = {(r["trace"], r["allocator"]): r for r in d["records"]}
    hot = {(h["bytes"], h["allocator"]): h["ns_per_op"] for h in d["hot_path"]}
    out = []

    def has(t, *allocs):
        return all((t, a) in rec for a in allocs)

    if has("inference", "unipool", "unipool:expandable", "cub"):
        u, e, c = rec[("inference", "unipool")], rec[("inference", "unipool:expandable")], rec[("inference", "cub")]
        out.append(f"- **inference**: utilization (peak requested / peak reserved) expandable {e['util']:.3f}, "
                   f"plain {u['util']:.3f}, CUB {c['util']:.3f}. After warm-up, {u['pool_calls_per_1k_after_warmup']:.2f} "
                   f"backend calls per 1,000 allocations (plain; expandable "
                   f"{e['pool_calls_per_1k_after_warmup']:.2f}), against {c['calls_per_1k_after_warmup']:,.0f} for CUB.")
    if has("batch_growth", "unipool:expandable"):
        e = rec[("batch_growth", "unipool:expandable")]
        target = next((t for t in d["targets"] if t["target"].startswith("batch_growth peak reserved")
                       and "(unipool:expandable)" in t["target"]), None)
        verdict = f" (target {target['target'].split('<= ', 1)[1].split(' (', 1)[0]}: " \
                  f"{'met' if target['met'] else 'missed'})" if target else ""
        line = (f"- **batch_growth, expandable**: peak reserved {e['peak_reserved'] / e['peak_requested']:.3f}x "
                f"the peak requested{verdict}; {e['pool_calls_per_1k_after_warmup']:.2f} pool->backend calls per "
                f"1,000 allocations after warm-up (target < 1), which are "
                f"{e['calls_per_1k_after_warmup']:,.0f} null GPU driver calls per 1,000")
        if ("batch_growth", "torch:expandable") in rec:
            line += f" (torch:expandable: {rec[('batch_growth', 'torch:expandable')]['calls_per_1k_after_warmup']:,.0f})"
        out.append(line + ".")
    if has("batch_growth", "unipool"):
        u = rec[("batch_growth", "unipool")]
        line = (f"- **batch_growth, plain segments**: utilization {u['util']:.3f}, peak reserved "
                f"{u['peak_reserved'] / MIB:,.0f} MiB for {u['peak_requested'] / MIB:,.0f} MiB requested, "
                f"{u['pool_calls_per_1k_after_warmup']:.1f} backend calls per 1,000 allocations after warm-up")
        if ("batch_growth", "torch") in rec:
            t = rec[("batch_growth", "torch")]
            line += (f"; PyTorch's caching allocator in the same run: {t['peak_reserved'] / MIB:,.0f} MiB, "
                     f"utilization {t['util']:.3f}, {t['calls_per_1k_after_warmup']:.1f} calls per 1,000")
        out.append(line + ".")
    rnd = [t for t in dict.fromkeys(r["trace"] for r in d["records"]) if t.startswith("random")]
    if rnd:
        parts = []
        for a in ["unipool:expandable", "unipool", "torch", "torch:expandable", "cub"]:
            utils = [rec[(t, a)]["util"] for t in rnd if (t, a) in rec]
            if utils:
                parts.append(f"{a} {span(utils, '{:.2f}')}")
        out.append(f"- **random** ({', '.join(rnd)}): utilization " + ", ".join(parts) + ".")
    sizes = list(dict.fromkeys(h["bytes"] for h in d["hot_path"]))
    if sizes and all((b, "unipool") in hot for b in sizes):
        ns_span = lambda v: f"{min(v):.0f}" if f"{min(v):.0f}" == f"{max(v):.0f}" else f"{min(v):.0f}-{max(v):.0f}"  # noqa: E731
        label = lambda b: f"{b >> 20} MiB" if b >= 1 << 20 else f"{b >> 10} KiB"  # noqa: E731
        mine = ", ".join(f"{hot[(b, 'unipool')]:.0f} ns ({label(b)})" for b in sizes)
        line = f"- **hot path** (a cached block, same stream): plain {mine}"
        exp = [hot[(b, "unipool:expandable")] for b in sizes if (b, "unipool:expandable") in hot]
        if exp:
            line += f", expandable {ns_span(exp)} ns"
        for peer, name in (("torch", "torch's"), ("cub", "CUB's")):
            theirs = [hot[(b, p)] for b in sizes for p in (peer, peer + ":expandable") if (b, p) in hot]
            ratios = [hot[(b, a)] / hot[(b, p)] for b in sizes
                      for a, p in (("unipool", peer), ("unipool:expandable", peer + ":expandable" if peer == "torch"
                                                        else peer)) if (b, a) in hot and (b, p) in hot]
            if theirs:
                line += f"{', against' if peer == 'torch' else ' and'} {name} {ns_span(theirs)} ns"
                if ratios:
                    line += f" ({span(ratios, '{:.2f}')}x)"
        out.append(line + ".")
    exp = [r for r in d["records"] if r["allocator"] == "unipool:expandable"]
    if exp:
        worst = max(exp, key=lambda r: r["ns_per_op"])
        out.append(f"- **whole traces**, CPU ns per allocation + its free: {whole_traces(d)} "
                   f"(unipool:expandable's most on {worst['trace']}).")
    return "\n".join(out)


def targets_list(items: list[tuple[bool, str]]) -> str:
    return "\n".join(f"- {'met' if ok else '**missed**'}: {text}" for ok, text in items)


def device_targets(d) -> str:
    return targets_list([(t["met"], f"{t['target']}: {t['detail']}") for t in d["targets"]])


# --- kv_offload --------------------------------------------------------------


def kv_pinned_table(d) -> str:
    peers, kv_ns = d["pinned_peers"], d["kv_pool_stream_ns_per_alloc_free"]
    torch, uni = peers["torch"], peers["unipool"]
    pinned = md_table(
        ["allocator", "reserved / requested (peaks)", "ns per alloc+free of a request", "hot: one cached 16-block buffer"],
        "lrrr",
        [["unipool `KVBlockPool` (one arena; ids from Python as a list)",
          f"**{d['targets']['reserved_over_requested']:.4f}**", f"**{kv_ns:,.0f}**", ""],
         ["torch `pin_memory=True`, PyTorch's CachingHostAllocator as shipped",
          f"{torch['reserved_over_requested']:.4f}", f"{torch['stream_ns_per_alloc_free']:,.0f}",
          f"{torch['hot_ns_per_alloc_free']:,.0f}"],
         ["torch `pin_memory=True`, unipool installed as torch's host allocator",
          f"{uni['reserved_over_requested']:.4f}", f"{uni['stream_ns_per_alloc_free']:,.0f}",
          f"{uni['hot_ns_per_alloc_free']:,.0f}"]])
    return pinned


def kv_tables(d) -> str:
    py, cpp = d["python_costs"], d["cpp_costs"]
    pyb, vec = py["empty_call_pybind11_ns"], py["empty_call_vectorcall_ns"]

    def row(label: str, ns: float) -> list[str]:
        return [label, f"{ns:,.0f}", f"{ns / pyb:.2f}", f"{ns / vec:.2f}"]

    costs = md_table(
        [f"alloc + free of {py['batch']} blocks (pool of {py['num_blocks']})", "ns per batch",
         "/ empty pybind11 call", "/ empty vectorcall"], "lrrr",
        [row(f"from Python, `free_and_alloc(out, {py['batch']}, out)` (one call)", py["free_and_alloc_tensor_ids_ns"]),
         row(f"from Python, `alloc({py['batch']}, out)`; `free(out)` (two calls)", py["alloc_free_tensor_ids_ns"]),
         row("from Python, scattered batch, one call", py["scattered_free_and_alloc_tensor_ids_ns"]),
         row("from C++, `free_and_alloc`", cpp["hot_free_and_alloc_ns_per_batch"]),
         row("from C++, scattered batch, `free_and_alloc`", cpp["scattered_free_and_alloc_ns_per_batch"]),
         row("one empty Python call into the extension, pybind11 (`unipool._testing.noop`)", pyb),
         row("one empty vectorcall method (`unipool._testing.EmptyMethods().noop`)", vec)])
    return kv_pinned_table(d) + "\n\n" + costs


def kv_arena(d) -> str:
    """Reserved over requested host bytes: the pool, and a power of two per
    buffer (computed on the same requests)."""
    a, b = d["arena"], d["bursts"]
    return (f"Reserved over requested host bytes in this run, for {a['num_blocks']:,} blocks of "
            f"{a['block_bytes'] / MIB:g} MiB ({a['requested_bytes'] / GIB:.2f} GiB): `KVBlockPool` "
            f"{a['unipool_ratio']:.4f}; a power of two per buffer, as torch's pinned allocator sizes them, "
            f"{a['pow2_whole_buffer_ratio']:.3f} for the arena as one buffer and {b['pow2_per_request_ratio']:.3f} "
            f"at the peak of the bursts ({b['rounds']:,} bursts) with one buffer per request.")


def kv_costs(d) -> str:
    """The allocation-cost sentences of docs/kv_offload.md."""
    py, cpp = d["python_costs"], d["cpp_costs"]
    return (f"In this run, from Python, `free_and_alloc(out, {py['batch']}, out)` cost "
            f"{py['free_and_alloc_tensor_ids_over_pybind11_empty']:.2f}x one empty pybind11 call into the "
            f"extension ({py['free_and_alloc_tensor_ids_ns']:,.0f} ns against "
            f"{py['empty_call_pybind11_ns']:,.0f}), and {cpp['hot_free_and_alloc_ns_per_batch']:,.0f} ns from C++. "
            f"A scattered batch (its {py['batch']} ids spread over {cpp['scattered_span_blocks']} blocks in the "
            f"C++ pool, {py['scattered_span_blocks']} in the Python one) cost "
            f"{cpp['scattered_free_and_alloc_ns_per_batch']:,.0f} ns from C++ freed in a random order and "
            f"{cpp['scattered_ascending_free_and_alloc_ns_per_batch']:,.0f} ns freed in ascending order; "
            f"from Python, with ids as a list instead of a tensor, `alloc` + `free` cost "
            f"{py['alloc_free_list_ids_ns']:,.0f} ns.")


def kv_targets(d) -> str:
    t, torch = d["targets"], d["pinned_peers"]["torch"]
    py = d["python_costs"]
    best = py["free_and_alloc_tensor_ids_ns"]
    kv_ns = d["kv_pool_stream_ns_per_alloc_free"]
    return targets_list([
        (t["reserved_over_requested"] <= t["reserved_over_requested_max"],
         f"KV-sized pinned buffers, reserved / requested <= {t['reserved_over_requested_max']}: `KVBlockPool` "
         f"{t['reserved_over_requested']:.4f} (torch {torch['reserved_over_requested']:.4f} in the same run)"),
        (t["kv_pool_ns_over_torch_pinned"] <= 1.0,
         f"alloc+free of a request <= torch's: {kv_ns:,.0f} ns vs {torch['stream_ns_per_alloc_free']:,.0f} "
         f"({t['kv_pool_ns_over_torch_pinned']:.2f}x)"),
        (t["free_and_alloc_over_empty_call"] < t["alloc_free_over_empty_call_max"],
         f"a batch of {py['batch']} alloc+free from Python < {t['alloc_free_over_empty_call_max']:g}x one empty "
         f"pybind11 call: {t['free_and_alloc_over_empty_call']:.2f}x with `free_and_alloc`"),
        (best / py["empty_call_vectorcall_ns"] < t["alloc_free_over_empty_call_max"],
         f"the same against one empty vectorcall: {best / py['empty_call_vectorcall_ns']:.2f}x"),
    ])


# --- model live --------------------------------------------------------------


def shared_kv_table(d) -> str:
    """docs/kv_offload.md: SharedKVBlockPool from processes against
    KVBlockPool from threads."""
    rows = [[str(r["workers"]), f"{r['in_process_wall_ns']:,.0f}", f"{r['in_process_cpu_ns']:,.0f}",
             f"{r['shared_wall_ns']:,.0f}", f"{r['shared_cpu_ns']:,.0f}",
             f"**{r['shared_cpu_ns'] / r['in_process_cpu_ns']:.2f}x**"] for r in d["rows"]]
    four = next(r for r in d["rows"] if r["workers"] == 4)
    ratio = four["shared_cpu_ns"] / four["in_process_cpu_ns"]
    return (f"ns per batch of {d['batch']} (alloc + free), best of {d['rounds']} runs of {d['iterations']:,} batches "
            f"per worker, {d['cpus']} CPUs:\n\n"
            + md_table(["workers", "KVBlockPool (threads): wall", "CPU", "SharedKVBlockPool (processes): wall", "CPU",
                        "shared / in-process, CPU"], "rrrrrr", rows)
            + f"\n\nTarget, 4 processes at most 2x the in-process pool's time per batch: "
              f"{ratio:.2f}x, {'met' if ratio <= 2.0 else 'missed'}.")


def model_table(d) -> str:
    res = {r["allocator"]: r for r in d["results"]}
    rows = []
    for name, r in res.items():
        reserved = f"{r['peak_reserved'] / GIB:.3f} GiB"
        if name == "unipool" and "torch" in res and r["peak_reserved"] < res["torch"]["peak_reserved"]:
            reserved = f"**{reserved}**"
        rows.append([name, reserved, f"{r['peak_allocated'] / GIB:.3f} GiB",
                     f"{r['peak_allocated'] / r['peak_reserved']:.3f}", f"{r['allocations']:,}",
                     f"{r['device_allocs'] + r['device_frees']:,}", f"{r['cpu_s']:.2f}"])
    table = md_table(["allocator", "peak reserved", "peak allocated", "utilization", "allocations", "device calls",
                      "host CPU s"], "lrrrrrr", rows)
    targets = [(t.startswith("[met"), t.split("] ", 1)[1]) for t in d["targets"]]
    return table + "\n\nTargets:\n\n" + targets_list(targets)


# --- host --------------------------------------------------------------------

HOST_PEERS = ["glibc", "mimalloc", "jemalloc", "tcmalloc"]
HOST_SUMMARY = [("mid_mt", [1, 2, 4]), ("hakmem_json", [1, 2, 4]), ("hakmem_mir", [1, 2, 4]),
                ("hakmem_vm", [1, 2, 4]), ("hakmem_mixed", [1, 2, 4]), ("rl_medium", [1, 2]),
                ("alignment64", [1, 2]), ("fragmentation_mix", [1, 2]), ("rl_small", [1, 2]),
                ("producer_consumer", [2, 4]), ("exchange", [2, 4])]


def host_index(run) -> dict:
    return {(r["allocator"], r["workload"], r["threads"]): r for r in run}


def host_summary(runs: list) -> str:
    """unipool's ops per CPU-second over glibc's, mimalloc's and the best
    peer's, per workload and thread count: the range over the runs."""
    idx = [host_index(r) for r in runs]
    rows = []
    for w, threads in HOST_SUMMARY:
        cols = [[], [], []]
        best_names = set()
        for t in threads:
            g, m, b = [], [], []
            for by in idx:
                if ("unipool", w, t) not in by:
                    continue
                u = by[("unipool", w, t)]["ops_per_cpu_s"]
                peer = {p: by[(p, w, t)]["ops_per_cpu_s"] for p in HOST_PEERS if (p, w, t) in by}
                best = max(peer, key=peer.get)
                best_names.add(best)
                g.append(u / peer["glibc"])
                m.append(u / peer["mimalloc"])
                b.append(u / peer[best])
            if not g:
                break
            for col, vals in zip(cols, (g, m, b)):
                col.append(span(vals, "{:.2f}"))
        if not cols[0]:
            continue
        vs_best = " / ".join(cols[2])
        vs_best = ("same" if vs_best == " / ".join(cols[1]) else vs_best) + f" ({', '.join(sorted(best_names))})"
        label = w + " " + " / ".join(f"x{t}" for t in threads[:len(cols[0])])
        rows.append([label, " / ".join(cols[0]), " / ".join(cols[1]), vs_best])
    note = (f"(ranges over {len(runs)} full runs)" if len(runs) > 1 else "(one full run)")
    return md_table(["workload", "unipool vs glibc (per CPU-s)", "vs mimalloc", "vs the best peer"], "lrrr",
                    rows) + "\n\n" + note


def host_threadcache(runs: list) -> str:
    """rpmalloc_random, the thread-cache study: ops per CPU-second of each
    thread-cache policy and of mimalloc, and RSS / requested."""
    idx = [host_index(r) for r in runs]
    names = ["mimalloc", "unipool:performance", "unipool:unlimited", "unipool:size", "unipool:none"]
    threads = sorted({t for by in idx for (a, w, t) in by if w == "rpmalloc_random"})
    rows = []
    for a in names:
        ops, rss = [], []
        for t in threads:
            vals = [by[(a, "rpmalloc_random", t)] for by in idx if (a, "rpmalloc_random", t) in by]
            if not vals:
                continue
            ops.append(span([v["ops_per_cpu_s"] / 1e6 for v in vals], "{:.2f}"))
            rss.append(span([v["rss_over_requested"] for v in vals], "{:.2f}"))
        if ops:
            rows.append([a, " / ".join(ops), " / ".join(rss)])
    head = " / ".join(f"x{t}" for t in threads)
    return md_table(["allocator", f"Mops per CPU-s, {head}", f"RSS / peak requested, {head}"], "lrr", rows)


def host_results(stdout: str) -> str:
    """The host bench's stdout (a markdown report), its title dropped and its
    headings one level down."""
    lines = stdout.splitlines()
    if lines and lines[0].startswith("# "):
        lines = lines[1:]
    text = "\n".join("#" + l if l.startswith("## ") else l for l in lines)
    text = re.sub(r"^(### Targets) \([^()]*\)$", r"\1", text, flags=re.M)  # older outputs' heading
    # Paths as the repository names them, not as the machine of the run did.
    text = re.sub(r"(?<=[\s`])/\S*?/(build/release/)", r"\1", text)
    text = re.sub(r"(--json) /\S+\.json", r"\1 FILE", text)
    return re.sub(r"\n{3,}", "\n\n", text).strip()


# --- the pages ---------------------------------------------------------------


HISTORY_MODES = [  # history_cost.py's labels, as docs/pytorch.md names them
    ("off, never enabled", "off, before history was ever enabled"),
    ("off", "off (after `enabled=None`)"),
    ("on, no stacks", "on, `context=None`"),
    ("context=alloc", 'on, `context="alloc"`, `stacks="python"`'),
    ("context=all", 'on, `context="all"`, `stacks="python"`'),
    ("context=all, C++ stacks", 'on, `context="all"`, `stacks="all"`'),
]


def history_cost(d) -> str:
    """What torch's memory history costs per alloc+free under unipool."""
    modes = d["modes"]
    rows = [[label, f"{modes[key]:.0f}", f"{modes[key] / modes['off']:.2f}x"]
            for key, label in HISTORY_MODES if key in modes]
    return (f"Fastest of {d['rounds']} repeats of {d['pairs']:,} pairs:\n\n"
            + md_table(["mode", "ns per alloc+free", "vs off"], "lrr", rows))


# --- transfer -----------------------------------------------------------------

def transfer_results(d: dict) -> str:
    """docs/transfer.md: registration, range cache, descriptors, transfers."""
    g, lk, ds = d["registration"], d["lookups"], d["descriptors"]
    kib = lambda b: f"{b // 1024} KiB"  # noqa: E731
    reg = md_table(["registered", "registrations", "register", "deregister"], "lrrr", [
        [f"{g['blocks']} tensors of {kib(g['block_bytes'])}, one by one", str(g["per_tensor_registrations"]),
         f"{g['per_tensor_s'] * 1e3:.1f} ms", f"{g['per_tensor_deregister_s'] * 1e3:.1f} ms"],
        [f"a KVBlockPool of {g['blocks']} blocks, per chunk", str(g["per_chunk_registrations"]),
         f"{g['per_chunk_s'] * 1e3:.2f} ms", f"{g['per_chunk_deregister_s'] * 1e3:.2f} ms"]])
    rows = [[kib(c["block_bytes"]), str(c["batch"]), f"{c['nixl_cold_gb_s']:.2f}", f"{c['nixl_blocks_s']:,.0f}",
             f"{c['memcpy_cold_gb_s']:.2f}", f"{c['kernel_cold_gb_s']:.2f}", f"{100 * c['ratio_cold']:.0f}%",
             f"{c['nixl_hot_gb_s']:.2f}", f"{c['memcpy_hot_gb_s']:.2f}", f"{c['kernel_hot_gb_s']:.2f}",
             f"{100 * c['ratio_hot']:.0f}%"] for c in d["transfers"]]
    xfer = md_table(["block", "batch", "cold: NIXL GB/s", "blocks/s", "memcpy", "kernel copy", "NIXL / memcpy",
                     "hot: NIXL GB/s", "memcpy", "kernel copy", "NIXL / memcpy"], "lrrrrrrrrrr", rows)
    return (f"Measured on {d['machine']['note']} ({d['machine']['cores']} cores), UCX transports "
            f"{d['machine']['UCX_TLS']}.\n\n{reg}\n\n"
            f"Registrations made by {g['alloc_free_cycles']} alloc/free cycles after warm-up: "
            f"{g['registrations_after_warmup']}. Range cache: {lk['batch_lookups_per_s'] / 1e6:.0f} M blocks/s "
            f"located in batches of {lk['batch']} (`KVAgent.locate`), {lk['single_lookups_per_s'] / 1e6:.2f} M "
            f"addresses/s one at a time (`RegionCache.locate`). Descriptor indices of {ds['blocks']} blocks, "
            f"checked (`KVAgent.transfer_indices`): {ds['indices_us']:.1f} us from a list, "
            f"{ds['indices_from_tensor_us']:.1f} us from a tensor; an Nx3 array (`KVAgent.descs`): "
            f"{ds['nx3_descs_us']:.1f} us; NIXL's `make_prepped_xfer` on them: "
            f"{ds['nixl_make_prepped_xfer_us']:.1f} us.\n\n{xfer}")


def transfer_targets(d: dict) -> str:
    """docs/benchmarks.md: the transfer targets, measured."""
    g, t = d["registration"], d["targets"]
    big = [c for c in d["transfers"] if c["block_bytes"] >= 256 * 1024 and c["batch"] > 1]
    missed = [f"{c['block_bytes'] // 1024} KiB x{c['batch']} {100 * c['ratio_hot']:.0f}%" for c in big
              if c["ratio_hot"] < 0.5]
    rows = [
        ["registrations per chunk (1,024 blocks)", f"{t['registrations_per_chunk']} "
         f"({g['per_chunk_s'] * 1e3:.2f} ms; one per tensor: {g['per_tensor_registrations']}, "
         f"{g['per_tensor_s'] * 1e3:.1f} ms)"],
        ["registrations after warm-up", str(t["registrations_after_warmup"])],
        ["descriptors for 256 blocks", f"{t['descriptors_256_us']:.1f} us"],
        ["batched >= 256 KiB, cold: NIXL / memcpy", f"{100 * t['min_ratio_batched_256k_plus_cold']:.0f}% at least"],
        ["batched >= 256 KiB, hot: NIXL / memcpy", f"{100 * t['min_ratio_batched_256k_plus_hot']:.0f}% at least"
         + (f" (under 50%: {', '.join(missed)})" if missed else "")],
    ]
    return md_table(["target", "measured"], "ll", rows)


def programs_tables(d: dict) -> str:
    """bench/host/programs.py: /bin/true start-up and sqlite's speedtest1 per allocator."""
    out = []
    s = d["startup"]
    base = s["glibc"]
    rows = [[n, f"{v['median_ms']:.2f}", f"{v['median_ms'] / base['median_ms']:.2f}x",
             f"{v['rss_kib'] / 1024:.1f}", f"{v['rss_kib'] / base['rss_kib']:.2f}x"] for n, v in s.items()]
    out.append(f"`/bin/true`, median of {base['runs']} launches per allocator:\n\n" +
               md_table(["allocator", "start-up ms", "vs glibc", "peak RSS MiB", "vs glibc"], "lrrrr", rows))
    if "speedtest1" in d:
        s = d["speedtest1"]
        base = s["glibc"]
        rows = [[n, f"{v['wall_s']:.2f}", f"{v['cpu_s']:.2f}", f"{v['cpu_s'] / base['cpu_s']:.2f}x",
                 f"{v['rss_kib'] / 1024:.1f}", f"{v['rss_kib'] / base['rss_kib']:.2f}x"] for n, v in s.items()]
        out.append(f"`speedtest1 --memdb --size {base['size']}`, median of {base['runs']} runs per allocator:\n\n" +
                   md_table(["allocator", "wall s", "CPU s", "CPU vs glibc", "peak RSS MiB", "RSS vs glibc"],
                            "lrrrrr", rows))
    else:
        out.append("speedtest1 was left out of this run (its source could not be downloaded or built).")
    return "\n\n".join(out)


def sections(results: str) -> dict[str, dict[str, str]]:
    """Page -> marker name -> generated text, for the results present."""
    def path(name: str) -> str:
        return os.path.join(results, name)

    def text(name: str) -> str:
        with open(path(name), encoding="utf-8") as f:
            return f.read()

    bench, host, device, kv, torch_page, transfer = {}, {}, {}, {}, {}, {}
    if os.path.exists(path("offset_util.json")):
        d = load(path("offset_util.json"))
        bench["offset_util:targets"], bench["offset_util:spread"] = offset_util_targets(d), offset_util_spread(d)
    if os.path.exists(path("offset_util.txt")):
        bench["offset_util:tables"] = offset_util_tables(text("offset_util.txt"))
    if os.path.exists(path("device.json")):
        d = load(path("device.json"))
        bench["device:tables"], bench["device:targets"] = device_tables(d), device_targets(d)
        device["device:findings"] = device_findings(d)
    if os.path.exists(path("kv_offload.json")):
        d = load(path("kv_offload.json"))
        bench["kv_offload:tables"], bench["kv_offload:targets"] = kv_tables(d), kv_targets(d)
        kv["kv_offload:arena"], kv["kv_offload:peers"], kv["kv_offload:costs"] = \
            kv_arena(d), kv_pinned_table(d), kv_costs(d)
    if os.path.exists(path("shared_kv.json")):
        kv["shared_kv:table"] = bench["shared_kv:table"] = shared_kv_table(load(path("shared_kv.json")))
    if os.path.exists(path("model_live.json")):
        bench["model:table"] = model_table(load(path("model_live.json")))
    host_runs = [load(p) for p in sorted(glob.glob(path("host*.json")))]
    if host_runs:
        bench["host:summary"] = host["host:summary"] = host_summary(host_runs)
        host["host:threadcache"] = host_threadcache(host_runs)
    if os.path.exists(path("host.txt")):
        host["host:results"] = host_results(text("host.txt"))
    if os.path.exists(path("programs.json")):
        host["host:programs"] = bench["host:programs"] = programs_tables(load(path("programs.json")))
    if os.path.exists(path("transfer.json")):
        d = load(path("transfer.json"))
        transfer["transfer:results"], bench["transfer:targets"] = transfer_results(d), transfer_targets(d)
    if os.path.exists(path("memory_history.json")):
        torch_page["memory_history:cost"] = history_cost(load(path("memory_history.json")))
    if os.path.exists(path("sleep_wake.json")):
        d = load(path("sleep_wake.json"))
        bench["sleep_wake:table"] = device["sleep_wake:table"] = (
            f"Best of {d['rounds']} cycles{' (--quick)' if d['quick'] else ''}:\n\n" + d["table"])
    return {"benchmarks.md": bench, "host_benchmarks.md": host, "device_pool.md": device, "kv_offload.md": kv,
            "pytorch.md": torch_page, "transfer.md": transfer}


def replace_sections(page: str, generated: dict[str, str], name: str) -> str:
    for key, body in generated.items():
        pattern = re.compile(rf"(<!-- bench:{re.escape(key)}:begin -->\n).*?(<!-- bench:{re.escape(key)}:end -->)",
                             re.S)
        if not pattern.search(page):
            sys.exit(f"render_docs: {name} has no section bench:{key} (begin/end markers)")
        page = pattern.sub(lambda m: m.group(1) + body + "\n" + m.group(2), page)
    return page


def plots(results: str, docs: str) -> None:
    """Each benchmark's plot script, on the results present."""
    def run(*args: str) -> None:
        subprocess.run([sys.executable, *args], check=True)

    r = lambda name: os.path.join(results, name)  # noqa: E731
    if os.path.exists(r("offset_util.json")):
        run(os.path.join(HERE, "offset_util/plot_offset.py"), r("offset_util.json"), "--out",
            os.path.join(docs, "offset_util.png"))
    if os.path.exists(r("device.json")):
        run(os.path.join(HERE, "device/plot_device.py"), r("device.json"), os.path.join(docs, "device_bench.png"))
    if os.path.exists(r("host.json")):
        run(os.path.join(HERE, "host/plot_host.py"), r("host.json"), "--out", docs)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("results", nargs="?", default="bench/results")
    parser.add_argument("--docs", default="docs")
    parser.add_argument("--check", action="store_true", help="change nothing; fail if a page is out of date")
    parser.add_argument("--no-plots", action="store_true")
    args = parser.parse_args()

    stale = []
    for name, generated in sections(args.results).items():
        if not generated:
            print(f"render_docs: no results for {name} in {args.results}; left as it is")
            continue
        page_path = os.path.join(args.docs, name)
        with open(page_path, encoding="utf-8") as f:
            page = f.read()
        new = replace_sections(page, generated, page_path)
        if new != page:
            stale.append(page_path)
            if not args.check:
                with open(page_path, "w", encoding="utf-8") as f:
                    f.write(new)
        print(f"render_docs: {page_path}: {', '.join(generated)}" + (" (changed)" if new != page else ""))
    if args.check:
        if stale:
            print("render_docs: out of date: " + ", ".join(stale), file=sys.stderr)
        return 1 if stale else 0
    if not args.no_plots:
        plots(args.results, args.docs)
    return 0


if __name__ == "__main__":
    sys.exit(main())
