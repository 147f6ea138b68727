#!/usr/bin/env python3
"""Smoke check of unipool_host_bench (ctest host_bench_quick): runs it with
--json, then checks that every record has the twelve contract keys with sane
values, and that every workload has a result for unipool and for glibc at
every thread count asked. Timings are printed by the benchmark, never judged.

  check_host_json.py --json out.json --threads 1,2 -- unipool_host_bench --quick --threads 1,2
"""
import argparse
import json
import subprocess
import sys

KEYS = ["allocator", "workload", "threads", "ops_per_s", "ops_per_cpu_s", "p50_alloc_ns", "p99_alloc_ns", "p50_free_ns",
        "p99_free_ns", "peak_rss_bytes", "page_faults", "usable_over_requested"]
WORKLOADS = ["rl_small", "rl_medium", "fragmentation_mix", "alignment64", "hakmem_json", "hakmem_mir",
             "hakmem_vm", "hakmem_mixed", "rpmalloc_random", "mid_mt", "producer_consumer", "exchange"]
POLICIES = ["unipool:unlimited", "unipool:performance", "unipool:size", "unipool:none"]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--json", required=True)
    p.add_argument("--threads", default="1,2")
    argv = sys.argv[1:]
    cut = argv.index("--") if "--" in argv else len(argv)
    args = p.parse_args(argv[:cut])
    command = argv[cut + 1:]
    result = subprocess.run(command + ["--json", args.json], check=False)
    if result.returncode != 0:
        print(f"FAIL: the benchmark exited with {result.returncode}")
        return 1
    with open(args.json, encoding="utf-8") as f:
        rows = json.load(f)
    errors = []
    seen = set()
    for r in rows:
        missing = [k for k in KEYS if k not in r]
        if missing:
            errors.append(f"{r.get('allocator')}/{r.get('workload')}: missing {missing}")
            continue
        seen.add((r["allocator"], r["workload"], r["threads"]))
        if r["ops_per_s"] <= 0 or r["ops_per_cpu_s"] <= 0 or r["peak_rss_bytes"] <= 0 or r["p50_alloc_ns"] <= 0:
            errors.append(f"{r['allocator']}/{r['workload']}/{r['threads']}: non-positive figures")
        if not r["p50_alloc_ns"] <= r["p99_alloc_ns"] or not r["p50_free_ns"] <= r["p99_free_ns"]:
            errors.append(f"{r['allocator']}/{r['workload']}/{r['threads']}: p50 above p99")
        if r["usable_over_requested"] < 1.0:
            errors.append(f"{r['allocator']}/{r['workload']}/{r['threads']}: usable below requested")
    for t in (int(x) for x in args.threads.split(",")):
        for w in WORKLOADS:
            wanted = ["glibc"] + (POLICIES if w == "rpmalloc_random" else ["unipool"])
            errors += [f"no result for {a}/{w}/{t}" for a in wanted if (a, w, t) not in seen]
    for e in errors:
        print("FAIL:", e)
    if not errors:
        print(f"{args.json}: {len(rows)} records ok")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
