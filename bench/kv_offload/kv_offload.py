#!/usr/bin/env python3
"""bench/kv_offload: a KV-cache offload workload on unipool.KVBlockPool.

Blocks of a real model's shape (default Llama-3-8B: 32 layers x K,V x 8 kv
heads x 16 tokens x 128 dim, bf16 = 2 MiB), bursts of alloc/free (requests
arriving and finishing), batched copies between the pool and a "device"
tensor (a CPU tensor here: no GPU; the figures are host copies, not PCIe).

Reports
  - host bytes reserved / requested: unipool's arena, and what torch's pinned
    allocator (CachingHostAllocator: every request rounded up to a power of
    two, never split) would reserve for the same buffers, computed;
  - alloc+free cost per batch and per block from Python (list ids and ids
    written into a tensor) and from C++ (kv_alloc_cpp), beside an empty
    Python call into the extension (vectorcall and pybind11).

  python3 bench/kv_offload/kv_offload.py [--quick] [--json FILE] [--cpp PATH]
"""
from __future__ import annotations

import argparse
import json
import math
import os
import random
import subprocess
import sys
import time

import torch

import unipool

MODELS = {
    # name: (layers, kv heads, head dim)
    "llama-3-8b": (32, 8, 128),
    "llama-3-70b": (80, 8, 128),
    "qwen2.5-7b": (28, 4, 128),
}


def next_pow2(n: int) -> int:
    return 1 << (n - 1).bit_length()


def per_call_ns(fn, iterations: int, repeats: int = 5) -> float:
    best = math.inf
    for _ in range(repeats):
        t0 = time.perf_counter_ns()
        fn(iterations)
        best = min(best, (time.perf_counter_ns() - t0) / iterations)
    return best


def loop_overhead(n):
    for _ in range(n):
        pass


def measure_costs(pool: unipool.KVBlockPool, batch: int, iterations: int) -> dict:
    out = torch.empty(batch, dtype=torch.int64)
    alloc, free, noop = pool.alloc, pool.free, pool._noop
    pyb_noop = unipool._C._noop

    def empty_vectorcall(n):
        for _ in range(n):
            noop()

    def empty_pybind(n):
        for _ in range(n):
            pyb_noop()

    def tensor_ids(n):
        for _ in range(n):
            alloc(batch, out)
            free(out)

    def list_ids(n):
        for _ in range(n):
            free(alloc(batch))

    loop = per_call_ns(loop_overhead, iterations)
    r = {
        "batch": batch,
        "loop_ns": loop,
        "empty_call_vectorcall_ns": per_call_ns(empty_vectorcall, iterations) - loop,
        "empty_call_pybind11_ns": per_call_ns(empty_pybind, iterations) - loop,
        "alloc_free_tensor_ids_ns": per_call_ns(tensor_ids, iterations) - loop,
        "alloc_free_list_ids_ns": per_call_ns(list_ids, max(1, iterations // 4)) - loop,
    }
    r["alloc_free_tensor_ids_ns_per_block"] = r["alloc_free_tensor_ids_ns"] / batch
    r["alloc_free_list_ids_ns_per_block"] = r["alloc_free_list_ids_ns"] / batch
    r["ratio_vs_pybind11_empty"] = r["alloc_free_tensor_ids_ns"] / r["empty_call_pybind11_ns"]
    r["ratio_vs_vectorcall_empty"] = r["alloc_free_tensor_ids_ns"] / r["empty_call_vectorcall_ns"]
    return r


def burst_workload(pool, rounds: int, seed: int, copy_every: int, device_tensor) -> dict:
    """Requests of 1..64 blocks arrive (alloc) and finish (free) at random,
    keeping the pool 60-95% full; every `copy_every` rounds a request's blocks
    are copied out and back in one batched call each."""
    rng = random.Random(seed)
    live: list[list[int]] = []
    live_blocks = 0
    requested_now = 0
    pow2_now = 0
    pow2_peak = 0
    requested_peak = 0
    copied_bytes = 0
    copy_ns = 0
    block = pool.block_bytes
    for r in range(rounds):
        fill = live_blocks / pool.num_blocks
        if fill < 0.6 or (fill < 0.95 and rng.random() < 0.5):
            n = rng.randint(1, 64)
            if n > pool.free_blocks:
                continue
            ids = pool.alloc(n)
            live.append(ids)
            live_blocks += n
            requested_now += n * block
            pow2_now += next_pow2(n * block)  # one pinned tensor per request, rounded
        elif live:
            ids = live.pop(rng.randrange(len(live)))
            pool.free(ids)
            live_blocks -= len(ids)
            requested_now -= len(ids) * block
            pow2_now -= next_pow2(len(ids) * block)
        requested_peak = max(requested_peak, requested_now)
        pow2_peak = max(pow2_peak, pow2_now)
        if live and r % copy_every == 0:
            ids = live[rng.randrange(len(live))]
            t0 = time.perf_counter_ns()
            pool.copy_to_device(ids, device_tensor)      # onload (host -> "device")
            pool.copy_from_device(ids, device_tensor)    # offload
            copy_ns += time.perf_counter_ns() - t0
            copied_bytes += 2 * len(ids) * block
    for ids in live:
        pool.free(ids)
    pool.validate()
    return {
        "rounds": rounds,
        "peak_requested_bytes": requested_peak,
        "pow2_per_request_peak_bytes": pow2_peak,
        "pow2_per_request_ratio": pow2_peak / requested_peak,
        "host_copy_gib_per_s": (copied_bytes / 2**30) / (copy_ns / 1e9) if copy_ns else 0.0,
        "copied_bytes": copied_bytes,
    }


def run_cpp(path: str, batch: int, iterations: int) -> dict | None:
    if not path or not os.path.exists(path):
        return None
    out = subprocess.run([path, str(batch), str(iterations)], capture_output=True, text=True, check=True).stdout
    return json.loads(out)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="llama-3-8b", choices=sorted(MODELS))
    ap.add_argument("--tokens-per-block", type=int, default=16)
    ap.add_argument("--num-blocks", type=int, default=None, help="pool size in blocks (default 1000; --quick 120)")
    ap.add_argument("--quick", action="store_true", help="small counts for CI smoke runs")
    ap.add_argument("--json", metavar="FILE", help="write the results as JSON")
    ap.add_argument("--cpp", default=os.path.join(os.path.dirname(__file__), "../../build/release/bench/kv_offload/kv_alloc_cpp"),
                    help="path of kv_alloc_cpp (the C++ figures are skipped if it is missing)")
    args = ap.parse_args()

    layers, heads, dim = MODELS[args.model]
    shape = (layers, 2, heads, args.tokens_per_block, dim)
    dtype = torch.bfloat16
    num_blocks = args.num_blocks or (120 if args.quick else 1000)
    rounds = 2000 if args.quick else 20000
    iterations = 20000 if args.quick else 200000

    t0 = time.perf_counter()
    pool = unipool.KVBlockPool(block_shape=shape, dtype=dtype, num_blocks=num_blocks)
    setup_s = time.perf_counter() - t0
    st = pool.stats()
    requested = st["requested_bytes"]
    arena = {
        "block_shape": list(shape), "dtype": str(dtype), "block_bytes": pool.block_bytes, "num_blocks": num_blocks,
        "requested_bytes": requested, "unipool_reserved_bytes": st["reserved_bytes"],
        "unipool_ratio": st["reserved_bytes"] / requested,
        "pow2_whole_buffer_bytes": next_pow2(requested), "pow2_whole_buffer_ratio": next_pow2(requested) / requested,
        "pinning_state": st["pinning_state"], "setup_seconds": setup_s,
    }
    device_tensor = torch.empty((64, *shape), dtype=dtype)  # "device": CPU here
    bursts = burst_workload(pool, rounds, seed=1, copy_every=10, device_tensor=device_tensor)
    costs = measure_costs(pool, 64, iterations)
    cpp = run_cpp(args.cpp, 64, 200000 if args.quick else 2000000)

    print(f"# bench/kv_offload  model={args.model} block={shape} {dtype} = {pool.block_bytes / 2**20:.2f} MiB, "
          f"{num_blocks} blocks, {st['pinning_state']}")
    print("\n## Host bytes reserved / requested")
    print("| buffers | requested | reserved | reserved / requested |")
    print("| --- | ---: | ---: | ---: |")
    print(f"| unipool KVBlockPool (one arena) | {requested / 2**30:.3f} GiB | {st['reserved_bytes'] / 2**30:.3f} GiB "
          f"| {arena['unipool_ratio']:.4f} |")
    print(f"| power-of-two, one buffer (torch pinned, computed) | {requested / 2**30:.3f} GiB | "
          f"{arena['pow2_whole_buffer_bytes'] / 2**30:.3f} GiB | {arena['pow2_whole_buffer_ratio']:.4f} |")
    print(f"| power-of-two, one buffer per request, peak (computed) | {bursts['peak_requested_bytes'] / 2**30:.3f} GiB"
          f" | {bursts['pow2_per_request_peak_bytes'] / 2**30:.3f} GiB | {bursts['pow2_per_request_ratio']:.4f} |")
    print("\n## alloc + free of a batch of 64 blocks")
    print("| what | ns per batch | ns per block |")
    print("| --- | ---: | ---: |")
    print(f"| Python, ids into a tensor (alloc(64, out); free(out)) | {costs['alloc_free_tensor_ids_ns']:.0f} "
          f"| {costs['alloc_free_tensor_ids_ns_per_block']:.2f} |")
    print(f"| Python, ids as a list (free(alloc(64))) | {costs['alloc_free_list_ids_ns']:.0f} "
          f"| {costs['alloc_free_list_ids_ns_per_block']:.2f} |")
    if cpp:
        print(f"| C++ (kv_alloc_cpp) | {cpp['ns_per_batch']:.0f} | {cpp['ns_per_block']:.2f} |")
    print(f"| empty Python call into the extension, pybind11 (_C._noop) | {costs['empty_call_pybind11_ns']:.0f} | |")
    print(f"| empty Python call into the extension, vectorcall (pool._noop) | {costs['empty_call_vectorcall_ns']:.0f} | |")
    print(f"\nbatched alloc+free / empty pybind11 call = {costs['ratio_vs_pybind11_empty']:.2f} (target < 2); "
          f"/ empty vectorcall = {costs['ratio_vs_vectorcall_empty']:.2f}")
    print(f"reserved / requested = {arena['unipool_ratio']:.4f} (target <= 1.01)")
    print(f"batched host copies (no GPU: host to host): {bursts['host_copy_gib_per_s']:.2f} GiB/s")

    result = {"benchmark": "kv_offload", "model": args.model, "quick": args.quick, "arena": arena,
              "bursts": bursts, "python_costs": costs, "cpp_costs": cpp,
              "targets": {"reserved_over_requested_max": 1.01, "reserved_over_requested": arena["unipool_ratio"],
                          "alloc_free_over_empty_call_max": 2.0,
                          "alloc_free_over_empty_call": costs["ratio_vs_pybind11_empty"]}}
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
