#!/usr/bin/env python3
"""bench/transfer: unipool's KV pools registered with NIXL (UCX) and KV
blocks moved between two agents on loopback, this CPU only (no GPU, no NIC).

Reports
  - registration: N blocks registered one NIXL registration per tensor (N
    torch tensors, the way a server registers its KV tensors one by one)
    against one KVBlockPool of N blocks registered per chunk (KVAgent:
    regions of at most 4 GiB), with the registrations made and the time to
    register and to deregister; the registrations made by N alloc/free
    cycles after warm-up (expected 0);
  - the range cache: blocks located per second (KVAgent.locate over a batch,
    and RegionCache.locate of one address at a time);
  - descriptor building for a batch of 256 block ids (checked against the
    pool's live blocks and the peer's grant, turned into NIXL's index arrays
    and into an Nx3 descriptor array), and NIXL's make_prepped_xfer on them;
  - transfers: GB/s and blocks/s of WRITEs from one agent's pool into the
    other's (two agents in this process, UCX picks the loopback transport),
    block sizes 16 KiB .. 4 MiB, batches 1 .. 256, beside a local copy of
    the same bytes (torch copy_, one thread) measured in the same run: the
    ceiling of this machine.

  python3 bench/transfer/transfer.py [--quick] [--json FILE]
"""
from __future__ import annotations

import argparse
import json
import math
import os
import platform
import time

import numpy as np
import torch

os.environ.setdefault("NIXL_LOG_LEVEL", "WARN")  # NIXL logs every agent and backend at INFO
import unipool  # noqa: E402
from unipool.nixl import KVAgent, RegionCache, make_agent  # noqa: E402

KIB, MIB = 1 << 10, 1 << 20


def best_per_call(fn, iterations: int, repeats: int = 15) -> float:
    """Seconds per call, the best of `repeats` runs of `iterations` calls
    (the short runs are those that escaped preemption on a shared machine)."""
    best = math.inf
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(iterations):
            fn()
        best = min(best, (time.perf_counter() - t0) / iterations)
    return best


def registration(n: int, block_bytes: int) -> dict:
    agent = make_agent(f"reg-{os.getpid()}")
    tensors = [torch.ones(block_bytes, dtype=torch.uint8) for _ in range(n)]  # touched, as KV tensors are
    t0 = time.perf_counter()
    regs = [agent.register_memory(t) for t in tensors]
    per_tensor = time.perf_counter() - t0
    t0 = time.perf_counter()
    for r in regs:
        agent.deregister_memory(r)
    per_tensor_dereg = time.perf_counter() - t0
    pool = unipool.KVBlockPool(block_bytes=block_bytes, num_blocks=n, pinned=False)
    t0 = time.perf_counter()
    cache = RegionCache(agent)
    cache.on_map(pool.blocks.data_ptr(), n * pool.stride)
    per_chunk = time.perf_counter() - t0
    made = cache.registrations
    for _ in range(n):  # allocations after warm-up register nothing
        pool.free(pool.alloc(8))
    t0 = time.perf_counter()
    cache.close()
    per_chunk_dereg = time.perf_counter() - t0
    return {"blocks": n, "block_bytes": block_bytes, "per_tensor_registrations": n, "per_tensor_s": per_tensor,
            "per_tensor_deregister_s": per_tensor_dereg, "per_chunk_registrations": made,
            "per_chunk_s": per_chunk, "per_chunk_deregister_s": per_chunk_dereg,
            "registrations_after_warmup": cache.registrations - made, "alloc_free_cycles": n}


def lookups(kv: KVAgent, iterations: int) -> dict:
    rng = np.random.default_rng(1)
    ids = rng.integers(0, kv.pool.num_blocks, 4096)
    batch = best_per_call(lambda: kv.locate(ids), iterations)
    addrs = [kv.base + int(i) * kv.stride + 7 for i in ids[:256]]
    one = best_per_call(lambda: [kv.cache.locate(a) for a in addrs], max(1, iterations // 4))
    return {"batch": int(ids.size), "batch_lookups_per_s": ids.size / batch,
            "single_lookups_per_s": len(addrs) / one}


def descriptors(a: KVAgent, peer, iterations: int) -> dict:
    ids = a.pool.alloc(256)
    peer_ids = list(range(256))
    peer.grant(peer_ids)
    indices = best_per_call(lambda: a.transfer_indices(ids, peer, peer_ids), iterations)
    as_tensor = torch.tensor(ids)
    indices_t = best_per_call(lambda: a.transfer_indices(as_tensor, peer, peer_ids), iterations)
    descs = best_per_call(lambda: a.descs(ids), iterations)
    local, remote = a.transfer_indices(ids, peer, peer_ids)

    def make():
        a.agent.make_prepped_xfer("WRITE", a._dlist, local, peer._dlist, remote).release()
    made = best_per_call(make, max(1, iterations // 10), repeats=5)
    a.pool.free(ids)
    return {"blocks": 256, "indices_us": indices * 1e6, "indices_from_tensor_us": indices_t * 1e6,
            "nx3_descs_us": descs * 1e6, "nixl_make_prepped_xfer_us": made * 1e6}


def transfer_cell(a: KVAgent, peer, b_pool, block_bytes: int, batch: int, seconds: float) -> dict:
    """NIXL WRITEs of `batch` blocks and local copies of the same bytes, in
    alternating rounds (a shared machine's load hits both alike); the best
    round of each."""
    src, dst = a.pool.alloc(batch), b_pool.alloc(batch)
    peer.grant(dst)
    s, d = a.pool.blocks[src[0]:src[0] + batch], b_pool.blocks[dst[0]:dst[0] + batch]  # ids are consecutive

    def write():
        a.write(src, peer, dst).wait()

    def copy():
        d.copy_(s)
    write()  # warm-up: connection, first touch
    t0 = time.perf_counter()
    write()
    rounds = 15
    calls = max(1, int(seconds / rounds / max(time.perf_counter() - t0, 1e-6)))
    nixl_s = copy_s = math.inf
    for _ in range(rounds):
        nixl_s = min(nixl_s, best_per_call(write, calls, repeats=1))
        copy_s = min(copy_s, best_per_call(copy, calls, repeats=1))
    peer.revoke(dst)
    a.pool.free(src)
    b_pool.free(dst)
    nbytes = batch * block_bytes
    return {"block_bytes": block_bytes, "batch": batch, "calls_per_round": calls,
            "nixl_gb_s": nbytes / nixl_s / 1e9, "nixl_blocks_s": batch / nixl_s, "memcpy_gb_s": nbytes / copy_s / 1e9,
            "ratio": copy_s / nixl_s}


def transfers(sizes, batches, seconds: float) -> list[dict]:
    cells = []
    for block_bytes in sizes:
        num = max(batches)
        a_pool = unipool.KVBlockPool(block_bytes=block_bytes, num_blocks=num, pinned=False)
        b_pool = unipool.KVBlockPool(block_bytes=block_bytes, num_blocks=num, pinned=False)
        with KVAgent(a_pool, f"src-{block_bytes}-{os.getpid()}") as a, \
                KVAgent(b_pool, f"dst-{block_bytes}-{os.getpid()}") as b:
            peer = a.connect(b.metadata())
            for batch in batches:
                cells.append(transfer_cell(a, peer, b_pool, block_bytes, batch, seconds))
                c = cells[-1]
                print(f"  {block_bytes // KIB:>5} KiB x {batch:>3}: NIXL {c['nixl_gb_s']:6.2f} GB/s "
                      f"{c['nixl_blocks_s']:10.0f} blocks/s | memcpy {c['memcpy_gb_s']:6.2f} GB/s | "
                      f"{100 * c['ratio']:5.1f}%", flush=True)
    return cells


def print_tables(r: dict) -> None:
    g = r["registration"]
    print(f"\nregistration of {g['blocks']} blocks of {g['block_bytes'] // KIB} KiB (this CPU, UCX)")
    print(f"  per tensor: {g['per_tensor_registrations']:>5} registrations, {g['per_tensor_s'] * 1e3:8.2f} ms "
          f"(deregister {g['per_tensor_deregister_s'] * 1e3:.2f} ms)")
    print(f"  per chunk:  {g['per_chunk_registrations']:>5} registrations, {g['per_chunk_s'] * 1e3:8.2f} ms "
          f"(deregister {g['per_chunk_deregister_s'] * 1e3:.2f} ms)")
    print(f"  after warm-up: {g['registrations_after_warmup']} registrations in {g['alloc_free_cycles']} "
          f"alloc/free cycles")
    lk = r["lookups"]
    print(f"range cache: {lk['batch_lookups_per_s'] / 1e6:.1f} M blocks/s located in batches of {lk['batch']}, "
          f"{lk['single_lookups_per_s'] / 1e6:.2f} M/s one address at a time")
    d = r["descriptors"]
    print(f"descriptors for {d['blocks']} blocks: checked indices {d['indices_us']:.1f} us (list), "
          f"{d['indices_from_tensor_us']:.1f} us (tensor); Nx3 array {d['nx3_descs_us']:.1f} us; "
          f"NIXL make_prepped_xfer {d['nixl_make_prepped_xfer_us']:.1f} us")
    print("\ntransfers (WRITE, two agents in one process, loopback; memcpy = torch copy_ of the same bytes)")
    print(f"  {'block':>8} {'batch':>5} {'NIXL GB/s':>10} {'blocks/s':>10} {'memcpy GB/s':>12} {'% memcpy':>9}")
    for c in r["transfers"]:
        print(f"  {c['block_bytes'] // KIB:>5} KiB {c['batch']:>5} {c['nixl_gb_s']:>10.2f} "
              f"{c['nixl_blocks_s']:>10.0f} {c['memcpy_gb_s']:>12.2f} {100 * c['ratio']:>8.1f}%")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="fewer sizes and shorter runs (the CI smoke)")
    p.add_argument("--json", help="write the results here")
    args = p.parse_args()
    torch.set_num_threads(1)
    sizes = [16 * KIB, 256 * KIB, 4 * MIB] if args.quick else [16 * KIB, 64 * KIB, 256 * KIB, MIB, 4 * MIB]
    batches = [1, 16, 256] if args.quick else [1, 4, 16, 64, 256]
    seconds = 0.05 if args.quick else 0.4
    iterations = 200 if args.quick else 2000
    r = {"machine": {"cpu": platform.processor() or platform.machine(), "cores": os.cpu_count(),
                     "note": "this CPU, loopback, no GPU", "UCX_TLS": os.environ.get("UCX_TLS", "(default)")}}
    r["registration"] = registration(1024, 64 * KIB)
    pool = unipool.KVBlockPool(block_bytes=64 * KIB, num_blocks=1024, pinned=False)
    peer_pool = unipool.KVBlockPool(block_bytes=64 * KIB, num_blocks=1024, pinned=False)
    with KVAgent(pool, f"look-{os.getpid()}") as kv, KVAgent(peer_pool, f"peer-{os.getpid()}") as other:
        r["lookups"] = lookups(kv, iterations)
        r["descriptors"] = descriptors(kv, kv.connect(other.metadata()), iterations)
    print("transfers:", flush=True)
    r["transfers"] = transfers(sizes, batches, seconds)
    big = [c["ratio"] for c in r["transfers"] if c["block_bytes"] >= 256 * KIB and c["batch"] > 1]
    r["targets"] = {"registrations_per_chunk": r["registration"]["per_chunk_registrations"],
                    "registrations_after_warmup": r["registration"]["registrations_after_warmup"],
                    "min_ratio_batched_256k_plus": min(big) if big else None,
                    "descriptors_256_us": r["descriptors"]["indices_us"]}
    print_tables(r)
    if args.json:
        os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
        with open(args.json, "w") as f:
            json.dump(r, f, indent=1)


if __name__ == "__main__":
    main()
