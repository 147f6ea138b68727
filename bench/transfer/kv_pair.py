"""A prefill/decode pair: two processes, each with its own unipool KV block
pool registered with its own NIXL agent (UCX), moving KV blocks from prefill
to decode (docs/transfer.md).

    python3 bench/transfer/kv_pair.py decode  SOCKET [options]   # start first: it listens
    python3 bench/transfer/kv_pair.py prefill SOCKET [options]

Over the local socket SOCKET the two exchange their KVAgent metadata, then
for each request: decode allocates blocks and grants their ids to prefill;
prefill allocates and fills its blocks; with --mode write prefill writes
them into decode's (notification "kv:<request>"), with --mode read decode
reads them from prefill's and notifies it. Decode checks every byte, then
both sides free their ids, and prefill revokes the grant. Each side prints
one JSON line (blocks moved, checked, regions registered) and exits 0.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from multiprocessing.connection import Client, Listener

import torch

os.environ.setdefault("NIXL_LOG_LEVEL", "WARN")  # NIXL logs every agent and backend at INFO
import unipool  # noqa: E402
from unipool.nixl import KVAgent  # noqa: E402

AUTHKEY = b"unipool-kv-pair"


def pattern(block_id: int, request: int, block_bytes: int) -> torch.Tensor:
    """What prefill writes into its block `block_id` for `request`: a
    counter offset by both, so a block landing in the wrong place shows."""
    return ((torch.arange(block_bytes, dtype=torch.int64) + block_id * 131 + request * 17) % 251).to(torch.uint8)


def prefill(args, conn) -> dict:
    pool = unipool.KVBlockPool(block_bytes=args.block_bytes, num_blocks=args.num_blocks, pinned=False)
    with KVAgent(pool, f"prefill-{os.getpid()}", max_region_bytes=args.max_region_bytes) as kv:
        conn.send_bytes(kv.metadata())
        peer = kv.connect(conn.recv_bytes())
        moved = 0
        for request in range(args.requests):
            ids = pool.alloc(args.blocks)
            for i in ids:
                pool.view(i).copy_(pattern(i, request, args.block_bytes))
            peer_ids = conn.recv()  # decode's blocks for this request
            peer.grant(peer_ids)
            conn.send({"request": request, "ids": ids})
            if args.mode == "write":
                kv.write(ids, peer, peer_ids, notif=b"kv:%d" % request).wait(args.timeout)
            else:
                kv.wait_notification(peer, b"read:%d" % request, args.timeout)
            freed = conn.recv()  # decode checked and freed its blocks
            peer.revoke(freed)
            pool.free(ids)
            moved += len(ids)
        regions = kv.cache.registrations
    return {"side": "prefill", "blocks": moved, "registrations": regions, "free_blocks": pool.free_blocks}


def decode(args, conn) -> dict:
    pool = unipool.KVBlockPool(block_bytes=args.block_bytes, num_blocks=args.num_blocks, pinned=False)
    with KVAgent(pool, f"decode-{os.getpid()}", max_region_bytes=args.max_region_bytes) as kv:
        peer = kv.connect(conn.recv_bytes())
        conn.send_bytes(kv.metadata())
        moved = 0
        for request in range(args.requests):
            ids = pool.alloc(args.blocks)
            conn.send(ids)
            sent = conn.recv()
            peer.grant(sent["ids"])
            if args.mode == "write":
                kv.wait_notification(peer, b"kv:%d" % request, args.timeout)
            else:
                kv.read(ids, peer, sent["ids"]).wait(args.timeout)
                kv.notify(peer, b"read:%d" % request)
            for mine, theirs in zip(ids, sent["ids"]):
                if not torch.equal(pool.view(mine), pattern(theirs, request, args.block_bytes)):
                    raise AssertionError(f"request {request}: block {mine} (from prefill's {theirs}) differs")
            peer.revoke(sent["ids"])
            pool.free(ids)
            conn.send(ids)
            moved += len(ids)
        regions = kv.cache.registrations
    return {"side": "decode", "blocks": moved, "checked": moved, "registrations": regions,
            "free_blocks": pool.free_blocks}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("side", choices=["prefill", "decode"])
    p.add_argument("socket", help="path of the local (AF_UNIX) socket decode listens on")
    p.add_argument("--mode", choices=["write", "read"], default="write", help="prefill pushes, or decode pulls")
    p.add_argument("--block-bytes", type=int, default=64 << 10)
    p.add_argument("--num-blocks", type=int, default=256)
    p.add_argument("--blocks", type=int, default=32, help="blocks per request")
    p.add_argument("--requests", type=int, default=4)
    p.add_argument("--max-region-bytes", type=int, default=4 << 30)
    p.add_argument("--timeout", type=float, default=30.0, help="seconds to wait for the peer")
    args = p.parse_args()
    if args.side == "decode":
        with Listener(args.socket, "AF_UNIX", authkey=AUTHKEY) as listener, listener.accept() as conn:
            result = decode(args, conn)
    else:
        with Client(args.socket, "AF_UNIX", authkey=AUTHKEY) as conn:
            result = prefill(args, conn)
    print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
