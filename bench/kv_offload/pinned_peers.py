#!/usr/bin/env python3
"""bench/kv_offload: KV-sized pinned host buffers from torch's pinned
allocator, as shipped (CachingHostAllocator) or with unipool installed as
torch's host allocator: one allocator per process, on the null GPU.

Each request holds n KV blocks (1..64) in one pinned tensor,
torch.empty(n * block_bytes, dtype=uint8, pin_memory=True), as an offload
engine without a block pool does. The request stream is burst_requests()'s,
the same for every allocator. Run by kv_offload.py:

  python3 bench/kv_offload/pinned_peers.py ALLOCATOR BLOCK_BYTES ROUNDS ITERATIONS

prints one JSON object: peak requested and peak reserved bytes (sampled
after every allocation), ns per alloc+free over the stream (a second,
unsampled pass) and for one cached 16-block buffer (the hot path).
"""
from __future__ import annotations

import json
import random
import sys
import time


def burst_requests(rounds: int, seed: int, capacity_blocks: int):
    """Yields ("alloc", n) or ("free", index into the live list): requests of
    1..64 blocks arrive and finish at random, keeping 60-95% of
    `capacity_blocks` live, as kv_offload.burst_workload does."""
    rng = random.Random(seed)
    live: list[int] = []
    live_blocks = 0
    for _ in range(rounds):
        fill = live_blocks / capacity_blocks
        if fill < 0.6 or (fill < 0.95 and rng.random() < 0.5):
            n = rng.randint(1, 64)
            if live_blocks + n > capacity_blocks:
                continue
            live.append(n)
            live_blocks += n
            yield "alloc", n
        elif live:
            i = rng.randrange(len(live))
            live_blocks -= live.pop(i)
            yield "free", i


def reserved_bytes(allocator: str) -> int:
    """What the allocator holds from the OS: for torch, the pinned blocks it
    owns (live and cached, power-of-two sizes); for unipool, the host pool's
    committed bytes."""
    import torch
    if allocator == "torch":
        return torch.cuda.host_memory_stats().get("allocated_bytes.current", 0)
    import unipool
    return unipool.host_stats()["committed_bytes"]


def run_stream(allocator: str, ops, block_bytes: int, sample: bool) -> dict:
    import torch
    live, requested, peak_requested, peak_reserved, allocations = [], 0, 0, 0, 0
    start = time.perf_counter_ns()
    for kind, arg in ops:
        if kind == "alloc":
            live.append(torch.empty(arg * block_bytes, dtype=torch.uint8, pin_memory=True))
            allocations += 1
            if sample:
                requested += arg * block_bytes
                peak_requested = max(peak_requested, requested)
                peak_reserved = max(peak_reserved, reserved_bytes(allocator))
        else:
            t = live.pop(arg)
            requested -= t.numel()
            del t
    live.clear()
    ns = time.perf_counter_ns() - start
    return {"allocations": allocations, "peak_requested_bytes": peak_requested,
            "peak_reserved_bytes": peak_reserved, "ns": ns}


def hot_ns(block_bytes: int, iterations: int) -> float:
    """alloc+free of one cached 16-block pinned buffer, best of 5 runs."""
    import torch
    size = 16 * block_bytes
    torch.empty(size, dtype=torch.uint8, pin_memory=True)  # now cached
    best = float("inf")
    for _ in range(5):
        t0 = time.perf_counter_ns()
        for _ in range(iterations):
            torch.empty(size, dtype=torch.uint8, pin_memory=True)
        best = min(best, (time.perf_counter_ns() - t0) / iterations)
    return best


def main(argv: list[str]) -> int:
    allocator, block_bytes, rounds, iterations = argv[0], int(argv[1]), int(argv[2]), int(argv[3])
    if allocator == "unipool":
        import unipool.torch
        unipool.torch.install()  # pinned host memory through unipool (pinned by default)
    import torch
    torch.cuda.init()  # host_memory_stats reads nothing before CUDA initialises
    if not torch.cuda.is_available():
        print(json.dumps({"error": "no CUDA device (run on the null GPU)"}))
        return 1
    ops = list(burst_requests(rounds, seed=1, capacity_blocks=1000))
    memory = run_stream(allocator, ops, block_bytes, sample=True)
    timed = min(run_stream(allocator, ops, block_bytes, sample=False)["ns"] for _ in range(3))
    r = {"allocator": allocator, "block_bytes": block_bytes, "rounds": rounds, **memory,
         "reserved_over_requested": memory["peak_reserved_bytes"] / memory["peak_requested_bytes"],
         "stream_ns_per_alloc_free": timed / memory["allocations"],
         "hot_ns_per_alloc_free": hot_ns(block_bytes, iterations)}
    r.pop("ns")
    if allocator == "unipool":
        import unipool
        unipool.host_validate()
        r["pinning_state"] = unipool.host_stats()["pinning_state"]
    print(json.dumps(r))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
