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
  - the same request stream served by real pinned tensors (one per request)
    from torch's CachingHostAllocator as shipped and with unipool installed
    as torch's host allocator, each in its own process on the null GPU
    (pinned_peers.py): peak reserved / peak requested and ns per alloc+free,
    beside KVBlockPool's alloc+free of the same requests;
  - alloc+free cost per batch and per block from Python (list ids and ids
    written into a tensor; two calls and one free_and_alloc call; a hot
    batch of consecutive ids and a scattered one from a churned pool) and
    from C++ (kv_alloc_cpp, the same cases), beside an empty Python call into
    the extension (vectorcall and pybind11), with the ratios.

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
from unipool import _testing
from pinned_peers import burst_requests

MODELS = {
    # name: (layers, kv heads, head dim)
    "llama-3-8b": (32, 8, 128),
    "llama-3-70b": (80, 8, 128),
    "qwen2.5-7b": (28, 4, 128),
}


def next_pow2(n: int) -> int:
    return 1 << (n - 1).bit_length()


def per_call_ns(fn, iterations: int, repeats: int = 25) -> float:
    """The best of `repeats` runs of fn(iterations), per iteration. Many short
    runs: on a shared machine the short ones are those that escape
    preemption."""
    best = math.inf
    for _ in range(repeats):
        t0 = time.perf_counter_ns()
        fn(iterations)
        best = min(best, (time.perf_counter_ns() - t0) / iterations)
    return best


def loop_overhead(n):
    for _ in range(n):
        pass


def list_loop_overhead(seq):
    for _ in seq:
        pass


def churned_batch(pool: unipool.KVBlockPool, batch: int, seed: int = 1):
    """Makes the pool 60% live at random, then takes its `batch` lowest free
    ids (ascending, with gaps): the scattered case's batch."""
    g = torch.Generator().manual_seed(seed)
    everything = pool.alloc(pool.num_blocks, torch.empty(pool.num_blocks, dtype=torch.int64))
    pool.free(everything[torch.randperm(pool.num_blocks, generator=g)[: pool.num_blocks * 2 // 5]].contiguous())
    ids = pool.alloc(batch, torch.empty(batch, dtype=torch.int64))
    orders = [ids[torch.randperm(batch, generator=g)].contiguous() for _ in range(256)]
    return ids, orders


def measure_costs(batch: int, iterations: int) -> dict:
    """alloc+free of `batch` blocks from Python, on a pool of 4096 blocks as
    kv_alloc_cpp's (the cost does not depend on the block size):
      hot: alloc(64, out); free(out) on a fresh pool: ids 0..63 every time;
      scattered: the pool 60% live at random; the batch, the 64 lowest free
        ids, freed in one of 256 random orders in turn, then alloc gives
        the same 64 back (free(ids); alloc(64, out));
    each also as one call, free_and_alloc(ids, 64, out)."""
    iterations = max(1, iterations // 5)  # per run; per_call_ns takes the best of 25 runs
    pool = unipool.KVBlockPool(block_bytes=4096, num_blocks=4096, pinned=False)
    out = torch.empty(batch, dtype=torch.int64)
    alloc, free, free_and_alloc = pool.alloc, pool.free, pool.free_and_alloc
    noop = _testing.EmptyMethods().noop  # an empty method called as the pool's are
    pyb_noop = _testing.noop

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

    def tensor_ids_one_call(n):
        for _ in range(n):
            free_and_alloc(out, batch, out)

    def list_ids(n):
        for _ in range(n):
            free(alloc(batch))

    loop = per_call_ns(loop_overhead, iterations)
    r = {
        "batch": batch,
        "num_blocks": pool.num_blocks,
        "loop_ns": loop,
        "empty_call_vectorcall_ns": per_call_ns(empty_vectorcall, iterations) - loop,
        "empty_call_pybind11_ns": per_call_ns(empty_pybind, iterations) - loop,
        "alloc_free_tensor_ids_ns": per_call_ns(tensor_ids, iterations) - loop,
        "alloc_free_list_ids_ns": per_call_ns(list_ids, max(1, iterations // 4)) - loop,
    }
    alloc(batch, out)
    r["free_and_alloc_tensor_ids_ns"] = per_call_ns(tensor_ids_one_call, iterations) - loop
    free(out)
    pool.validate()

    churned = unipool.KVBlockPool(block_bytes=4096, num_blocks=4096, pinned=False)
    ids, orders = churned_batch(churned, batch)
    seq = [orders[i % len(orders)] for i in range(iterations)]
    c_alloc, c_free, c_free_and_alloc = churned.alloc, churned.free, churned.free_and_alloc

    def scattered(_):
        for order in seq:
            c_free(order)
            c_alloc(batch, out)

    def scattered_one_call(_):
        for order in seq:
            c_free_and_alloc(order, batch, out)

    list_loop = per_call_ns(lambda _: list_loop_overhead(seq), iterations)
    r["scattered_span_blocks"] = int(ids[-1] - ids[0] + 1)
    r["scattered_alloc_free_tensor_ids_ns"] = per_call_ns(scattered, iterations) - list_loop
    r["scattered_free_and_alloc_tensor_ids_ns"] = per_call_ns(scattered_one_call, iterations) - list_loop
    if not torch.equal(out, ids):
        raise AssertionError("the scattered batch did not come back as the same ids")
    churned.validate()

    for key in ("alloc_free_tensor_ids", "alloc_free_list_ids", "free_and_alloc_tensor_ids",
                "scattered_alloc_free_tensor_ids", "scattered_free_and_alloc_tensor_ids"):
        r[key + "_ns_per_block"] = r[key + "_ns"] / batch
        r[key + "_over_pybind11_empty"] = r[key + "_ns"] / r["empty_call_pybind11_ns"]
        r[key + "_over_vectorcall_empty"] = r[key + "_ns"] / r["empty_call_vectorcall_ns"]
    # Kept for older readers of the JSON: the hot two-call case.
    r["ratio_vs_pybind11_empty"] = r["alloc_free_tensor_ids_over_pybind11_empty"]
    r["ratio_vs_vectorcall_empty"] = r["alloc_free_tensor_ids_over_vectorcall_empty"]
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


def kv_pool_stream_ns(num_blocks: int, rounds: int) -> float:
    """ns per alloc+free of a request in KVBlockPool, over the request
    stream the pinned peers serve (burst_requests), best of 3 passes."""
    pool = unipool.KVBlockPool(block_bytes=4096, num_blocks=num_blocks, pinned=False)
    ops = list(burst_requests(rounds, seed=1, capacity_blocks=num_blocks))
    allocations = sum(1 for kind, _ in ops if kind == "alloc")
    best = math.inf
    for _ in range(3):
        live = []
        t0 = time.perf_counter_ns()
        for kind, arg in ops:
            if kind == "alloc":
                live.append(pool.alloc(arg))
            else:
                pool.free(live.pop(arg))
        for ids in live:
            pool.free(ids)
        best = min(best, (time.perf_counter_ns() - t0) / allocations)
    pool.validate()
    return best


def pinned_peers(block_bytes: int, rounds: int, iterations: int) -> dict:
    """Runs pinned_peers.py for torch's and unipool's pinned allocators, each
    in its own process on the null GPU; {} with a message when there is none."""
    try:
        from unipool.testing import nullgpu
        env = nullgpu.environment()
    except FileNotFoundError as e:
        print(f"pinned peers skipped: {e}", file=sys.stderr)
        return {}
    env.pop("UNIPOOL_INSTALL", None)
    script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "pinned_peers.py")
    results = {}
    for allocator in ("torch", "unipool"):
        out = subprocess.run([sys.executable, script, allocator, str(block_bytes), str(rounds), str(iterations)],
                             capture_output=True, text=True, env=env)
        if out.returncode != 0:
            raise RuntimeError(f"pinned_peers.py {allocator} failed:\n{out.stdout}\n{out.stderr}")
        results[allocator] = json.loads(out.stdout.strip().splitlines()[-1])
    return results


def print_pinned_table(peers: dict, kv_ns: float, arena_ratio: float) -> None:
    print("\n## KV-sized pinned buffers: one per request (1-64 blocks), the same stream for each "
          "(null GPU: host-side figures)")
    print("| allocator | peak requested | peak reserved | reserved / requested | ns per alloc+free (stream) "
          "| ns per alloc+free (hot, 16 blocks) |")
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    for name, label in (("torch", "torch CachingHostAllocator (pin_memory=True)"),
                        ("unipool", "torch pin_memory=True, unipool installed")):
        r = peers[name]
        print(f"| {label} | {r['peak_requested_bytes'] / 2**30:.3f} GiB | {r['peak_reserved_bytes'] / 2**30:.3f} GiB "
              f"| {r['reserved_over_requested']:.4f} | {r['stream_ns_per_alloc_free']:.0f} "
              f"| {r['hot_ns_per_alloc_free']:.0f} |")
    print(f"| unipool KVBlockPool (ids) | | | {arena_ratio:.4f} | {kv_ns:.0f} | |")


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
    costs = measure_costs(64, iterations)
    cpp = run_cpp(args.cpp, 64, 200000 if args.quick else 2000000)
    peer_rounds = 1000 if args.quick else 6000
    peers = pinned_peers(pool.block_bytes, peer_rounds, 2000 if args.quick else 20000)
    kv_ns = kv_pool_stream_ns(1000, peer_rounds)

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
    pyb, vec = costs["empty_call_pybind11_ns"], costs["empty_call_vectorcall_ns"]
    print("\n## alloc + free of a batch of 64 blocks (pool of 4096 blocks)")
    print("| case | calls | ns per batch | ns per block | / empty call, pybind11 | / empty call, vectorcall |")
    print("| --- | --- | ---: | ---: | ---: | ---: |")

    def row(case, calls, ns):
        print(f"| {case} | {calls} | {ns:.0f} | {ns / 64:.2f} | {ns / pyb:.2f} | {ns / vec:.2f} |")

    row("Python hot, ids in a tensor", "alloc(64, out); free(out)", costs["alloc_free_tensor_ids_ns"])
    row("Python hot, ids in a tensor", "free_and_alloc(out, 64, out)", costs["free_and_alloc_tensor_ids_ns"])
    row("Python scattered, ids in a tensor", "free(ids); alloc(64, out)", costs["scattered_alloc_free_tensor_ids_ns"])
    row("Python scattered, ids in a tensor", "free_and_alloc(ids, 64, out)",
        costs["scattered_free_and_alloc_tensor_ids_ns"])
    row("Python hot, ids as a list", "free(alloc(64))", costs["alloc_free_list_ids_ns"])
    if cpp:
        row("C++ hot", "free; alloc", cpp["ns_per_batch"])
        if "hot_free_and_alloc_ns_per_batch" in cpp:
            row("C++ hot", "free_and_alloc", cpp["hot_free_and_alloc_ns_per_batch"])
            row("C++ scattered", "free; alloc", cpp["scattered_ns_per_batch"])
            row("C++ scattered", "free_and_alloc", cpp["scattered_free_and_alloc_ns_per_batch"])
            row("C++ scattered, freed ascending", "free; alloc", cpp["scattered_ascending_ns_per_batch"])
    print(f"| empty Python call into the extension, pybind11 (unipool._testing.noop) | | {pyb:.0f} | | 1.00 | {pyb / vec:.2f} |")
    print(f"| empty Python call into the extension, vectorcall (unipool._testing.EmptyMethods().noop) | | {vec:.0f} | | {vec / pyb:.2f} | 1.00 |")
    print(f"\nscattered batch: 64 ids over {costs['scattered_span_blocks']} blocks")
    best = min(costs["alloc_free_tensor_ids_ns"], costs["free_and_alloc_tensor_ids_ns"])
    print(f"target: batched alloc+free of 64 from Python < 2 x one empty call: hot best {best / pyb:.2f} x pybind11, "
          f"{best / vec:.2f} x vectorcall; scattered best "
          f"{min(costs['scattered_alloc_free_tensor_ids_ns'], costs['scattered_free_and_alloc_tensor_ids_ns']) / pyb:.2f}"
          f" x pybind11")
    print(f"reserved / requested = {arena['unipool_ratio']:.4f} (target <= 1.01)")
    print(f"batched host copies (no GPU: host to host): {bursts['host_copy_gib_per_s']:.2f} GiB/s")
    targets = {"reserved_over_requested_max": 1.01, "reserved_over_requested": arena["unipool_ratio"],
               "alloc_free_over_empty_call_max": 2.0,
               "alloc_free_over_empty_call": costs["ratio_vs_pybind11_empty"],
               "free_and_alloc_over_empty_call": costs["free_and_alloc_tensor_ids_over_pybind11_empty"],
               "scattered_free_and_alloc_over_empty_call":
                   costs["scattered_free_and_alloc_tensor_ids_over_pybind11_empty"]}
    if peers:
        print_pinned_table(peers, kv_ns, arena["unipool_ratio"])
        torch_peer = peers["torch"]
        targets.update({"torch_pinned_reserved_over_requested": torch_peer["reserved_over_requested"],
                        "kv_pool_ns_over_torch_pinned": kv_ns / torch_peer["stream_ns_per_alloc_free"]})
        print(f"target: KV-sized pinned buffers reserved / requested <= 1.01: KVBlockPool "
              f"{arena['unipool_ratio']:.4f}, torch {torch_peer['reserved_over_requested']:.4f} in the same run; "
              f"alloc+free <= torch's: {kv_ns:.0f} ns vs {torch_peer['stream_ns_per_alloc_free']:.0f} ns "
              f"({targets['kv_pool_ns_over_torch_pinned']:.3f}x)")

    result = {"benchmark": "kv_offload", "model": args.model, "quick": args.quick, "arena": arena,
              "bursts": bursts, "python_costs": costs, "cpp_costs": cpp,
              "pinned_peers": peers, "kv_pool_stream_ns_per_alloc_free": kv_ns, "targets": targets}
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
