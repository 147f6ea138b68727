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
    the same bytes (torch copy_, one thread) measured in the same run, the
    ceiling of this machine, and the kernel copy UCX uses on one host
    (process_vm_writev); each hot (the same blocks every call, in cache
    when small) and cold (each call the next blocks of a 256 MiB pool).

  python3 bench/transfer/transfer.py [--quick] [--json FILE]
"""
from __future__ import annotations

import argparse
import ctypes
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


class _IoVec(ctypes.Structure):
    _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]


_libc = ctypes.CDLL(None, use_errno=True)


def kernel_copy(src: list[int], dst: list[int], nbytes: int) -> None:
    """process_vm_writev of the blocks into this very process: the kernel
    copy (CMA) UCX moves host memory with on one host, without UCX."""
    n = len(src)
    local, remote = (_IoVec * n)(*[(a, nbytes) for a in src]), (_IoVec * n)(*[(a, nbytes) for a in dst])
    if _libc.process_vm_writev(os.getpid(), local, n, remote, n, 0) != n * nbytes:
        raise OSError(ctypes.get_errno(), "process_vm_writev")


def rounds_of(ops: dict, calls: int, rounds: int = 15) -> dict:
    """The best round of `calls` calls of each op, in alternating rounds
    (a shared machine's load hits them alike)."""
    best = dict.fromkeys(ops, math.inf)
    for _ in range(rounds):
        for name, fn in ops.items():
            best[name] = min(best[name], best_per_call(fn, calls, repeats=1))
    return best


def transfer_cell(a: KVAgent, peer, b_pool, block_bytes: int, batch: int, seconds: float) -> dict:
    """NIXL WRITEs of `batch` blocks, local copies of the same bytes (torch
    copy_) and kernel copies (process_vm_writev). Hot: the same blocks each
    time, so small batches sit in the CPU's caches. Cold: each call takes
    the next blocks of the whole pool (at least 256 MiB), as a server moves
    blocks it has not touched since they were written."""
    n = a.pool.num_blocks // batch * batch
    src, dst = a.pool.alloc(n), b_pool.alloc(n)
    peer.grant(dst)
    groups = [(src[i:i + batch], dst[i:i + batch]) for i in range(0, n, batch)]
    stride = a.pool.stride
    addr = lambda pool, ids: [pool.blocks.data_ptr() + int(k) * stride for k in ids]  # noqa: E731
    cursor = [0]

    def nxt():
        cursor[0] = (cursor[0] + 1) % len(groups)
        return groups[cursor[0]]

    def span(pool, ids):  # ids are consecutive
        return pool.blocks[int(ids[0]):int(ids[0]) + batch]
    hs, hd = groups[0]
    h_src, h_dst = span(a.pool, hs), span(b_pool, hd)
    h_addr = (addr(a.pool, hs), addr(b_pool, hd))
    def nixl_cold():
        s_ids, d_ids = nxt()
        a.write(s_ids, peer, d_ids).wait()

    def memcpy_cold():
        s_ids, d_ids = nxt()
        span(b_pool, d_ids).copy_(span(a.pool, s_ids))

    def kernel_cold():
        s_ids, d_ids = nxt()
        kernel_copy(addr(a.pool, s_ids), addr(b_pool, d_ids), block_bytes)
    ops = {"nixl_hot": lambda: a.write(hs, peer, hd).wait(), "memcpy_hot": lambda: h_dst.copy_(h_src),
           "kernel_hot": lambda: kernel_copy(*h_addr, block_bytes),
           "nixl_cold": nixl_cold, "memcpy_cold": memcpy_cold, "kernel_cold": kernel_cold}
    ops["nixl_hot"]()  # warm-up: connection, first touch
    t0 = time.perf_counter()
    ops["nixl_hot"]()
    calls = max(1, int(seconds / 15 / max(time.perf_counter() - t0, 1e-6)))
    best = rounds_of(ops, calls)
    peer.revoke(dst)
    a.pool.free(src)
    b_pool.free(dst)
    nbytes = batch * block_bytes
    out = {"block_bytes": block_bytes, "batch": batch, "calls_per_round": calls}
    for k, v in best.items():
        out[f"{k}_gb_s"] = nbytes / v / 1e9
    out["nixl_blocks_s"] = batch / best["nixl_cold"]
    out["ratio_hot"] = best["memcpy_hot"] / best["nixl_hot"]
    out["ratio_cold"] = best["memcpy_cold"] / best["nixl_cold"]
    return out


def transfers(sizes, batches, seconds: float) -> list[dict]:
    cells = []
    for block_bytes in sizes:
        num = max(max(batches), (256 * MIB) // block_bytes)  # cold rounds never meet a block still in cache
        a_pool = unipool.KVBlockPool(block_bytes=block_bytes, num_blocks=num, pinned=False)
        b_pool = unipool.KVBlockPool(block_bytes=block_bytes, num_blocks=num, pinned=False)
        a_pool.blocks.fill_(1)  # committed, as KV blocks written by a model are
        b_pool.blocks.fill_(2)
        with KVAgent(a_pool, f"src-{block_bytes}-{os.getpid()}") as a, \
                KVAgent(b_pool, f"dst-{block_bytes}-{os.getpid()}") as b:
            peer = a.connect(b.metadata())
            for batch in batches:
                cells.append(transfer_cell(a, peer, b_pool, block_bytes, batch, seconds))
                c = cells[-1]
                print(f"  {block_bytes // KIB:>5} KiB x {batch:>3}: cold NIXL {c['nixl_cold_gb_s']:6.2f} GB/s, "
                      f"memcpy {c['memcpy_cold_gb_s']:6.2f}, kernel copy {c['kernel_cold_gb_s']:6.2f} "
                      f"({100 * c['ratio_cold']:3.0f}%) | hot NIXL {c['nixl_hot_gb_s']:6.2f}, "
                      f"memcpy {c['memcpy_hot_gb_s']:6.2f} ({100 * c['ratio_hot']:3.0f}%)", flush=True)
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
    print("\ntransfers (WRITE, two agents in one process, loopback; memcpy = torch copy_ of the same bytes, "
          "kernel = process_vm_writev; GB/s)")
    print(f"  {'block':>8} {'batch':>5} | {'cold NIXL':>9} {'memcpy':>7} {'kernel':>7} {'%memcpy':>8} | "
          f"{'hot NIXL':>8} {'memcpy':>7} {'kernel':>7} {'%memcpy':>8}")
    for c in r["transfers"]:
        print(f"  {c['block_bytes'] // KIB:>5} KiB {c['batch']:>5} | {c['nixl_cold_gb_s']:>9.2f} "
              f"{c['memcpy_cold_gb_s']:>7.2f} {c['kernel_cold_gb_s']:>7.2f} {100 * c['ratio_cold']:>7.0f}% | "
              f"{c['nixl_hot_gb_s']:>8.2f} {c['memcpy_hot_gb_s']:>7.2f} {c['kernel_hot_gb_s']:>7.2f} "
              f"{100 * c['ratio_hot']:>7.0f}%")


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
    big = [c for c in r["transfers"] if c["block_bytes"] >= 256 * KIB and c["batch"] > 1]
    r["targets"] = {"registrations_per_chunk": r["registration"]["per_chunk_registrations"],
                    "registrations_after_warmup": r["registration"]["registrations_after_warmup"],
                    "min_ratio_batched_256k_plus_cold": min(c["ratio_cold"] for c in big) if big else None,
                    "min_ratio_batched_256k_plus_hot": min(c["ratio_hot"] for c in big) if big else None,
                    "descriptors_256_us": r["descriptors"]["indices_us"]}
    print_tables(r)
    if args.json:
        os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
        with open(args.json, "w") as f:
            json.dump(r, f, indent=1)


if __name__ == "__main__":
    main()
