"""unipool.nixl.HostAgent and DeviceAgent checks, each run by test_nixl.py
in a process of its own, on the null GPU: the host pool must be pinned
(UNIPOOL_HOST_CONF=pinned=on) and the test session's is made already,
pageable; the device pools must be unipool.torch's, installed first.

    python3 nixl_pool_checks.py NAME [DEVICE_CONF]
"""
from __future__ import annotations

import os
import sys

import numpy as np
import pytest
import torch

import unipool
from unipool.nixl import DeviceAgent, HostAgent, NixlError, RegionCache, make_agent

KIB, MIB = 1 << 10, 1 << 20


def name(prefix: str) -> str:
    name.count = getattr(name, "count", 0) + 1
    return f"{prefix}-{os.getpid()}-{name.count}"


def host_tensor(nbytes: int, seed: int) -> torch.Tensor:
    t = unipool.empty(nbytes, dtype=torch.uint8)
    t.copy_(torch.randint(0, 256, (nbytes,), dtype=torch.uint8, generator=torch.Generator().manual_seed(seed)))
    return t


def registered_once_per_pinned_piece():
    with HostAgent(name("host")) as a:
        warm = [host_tensor(64 * KIB, i) for i in range(4)]
        blocks = [unipool.empty(16 * KIB, dtype=torch.uint8) for _ in range(1000)]
        a.sync()
        made = a.cache.registrations
        assert made >= 1 and a.cache.live_regions >= 1
        # After warm-up (the same working set once), allocations register nothing.
        del blocks
        for _ in range(3):
            blocks = [unipool.empty(16 * KIB, dtype=torch.uint8) for _ in range(1000)]
            assert a.sync() == 0
            assert a.cache.registrations == made
            del blocks
        for t in warm:
            idx, off = a.cache.locate(t.data_ptr())
            assert 0 <= off < a.cache.regions[idx][1]
        # A huge block is its own mapping: registered when pinned,
        # deregistered once the pool unpins it (freed, then trim() empties
        # the huge cache).
        huge = unipool.empty(64 * MIB, dtype=torch.uint8)
        assert a.sync() >= 1
        live = a.cache.live_regions
        a.cache.locate(huge.data_ptr() + 64 * MIB - 1)
        del huge
        unipool.host_trim()
        a.sync()
        assert a.cache.live_regions < live
    assert a.cache.live_regions == 0


def pieces_cut_where_regions_end():
    with HostAgent(name("host"), max_region_bytes=1 * MIB) as a:
        t = host_tensor(3 * MIB + 4096, 1)
        rows = a.pieces([t])
        assert rows.shape[1] == 3 and rows.shape[0] >= 4
        assert int(rows[0, 0]) == t.data_ptr() and int(rows[:, 1].sum()) == t.numel()
        assert np.all(rows[1:, 0] == rows[:-1, 0] + rows[:-1, 1])  # contiguous, in order
        for address, nbytes, _ in rows:  # each row in one region
            idx, off = a.cache.locate(int(address))
            assert off + int(nbytes) <= a.cache.regions[idx][1]
        with pytest.raises(ValueError, match="not in the host pool's pinned memory"):
            a.pieces([torch.zeros(4096, dtype=torch.uint8)])
        with pytest.raises(ValueError, match="contiguous"):
            a.pieces([t.view(-1, 2)[:, 0]])


def tensors_move_to_a_peer_and_back():
    peer = make_agent(name("peer"))
    dst = torch.zeros(5 * MIB, dtype=torch.uint8)
    remote = RegionCache(peer, max_region_bytes=2 * MIB)  # the peer's regions, cut elsewhere than ours
    remote.on_map(dst.data_ptr(), dst.numel())
    rows = np.array([[s, n, 0] for s, n, _ in remote.regions], dtype=np.uint64)
    with HostAgent(name("host"), max_region_bytes=1 * MIB) as a:
        srcs = [host_tensor(2 * MIB + 512, 2), host_tensor(3 * MIB - 512, 3)]
        peer_name = a.connect(peer.get_agent_metadata())
        assert peer_name == peer.name
        a.write(srcs, peer_name, rows, notif=b"host-write").wait()
        assert torch.equal(dst, torch.cat(srcs))
        back = [unipool.empty(s.numel(), dtype=torch.uint8) for s in srcs]
        for b in back:
            b.zero_()
        a.read(back, peer_name, rows).wait()
        assert all(torch.equal(b, s) for b, s in zip(back, srcs))
        with pytest.raises(ValueError, match="same bytes"):
            a.write(srcs[:1], peer_name, rows)
        with pytest.raises(ValueError, match="not connected"):
            a.write(srcs, "nobody", rows)
    remote.close()
    assert remote.live_regions == 0


def one_agent_at_a_time():
    keep = host_tensor(64 * KIB, 4)
    a = HostAgent(name("host"))
    with pytest.raises(ValueError, match="already reports its regions"):
        HostAgent(name("host"))
    peer = make_agent(name("peer"))
    peer_name = a.connect(peer.get_agent_metadata())
    a.disconnect(peer_name)
    a.disconnect(peer_name)  # twice: nothing left to do
    a.close()
    assert a.cache.live_regions == 0
    a.close()  # idempotent
    # Detached: the next agent attaches and sees every pinned piece again.
    with HostAgent(name("host")) as b:
        assert b.cache.locate(keep.data_ptr())[1] >= 0


def pageable_pool_is_refused():
    with pytest.raises(ValueError, match="pinned=off"):
        HostAgent(name("host"))


# --- DeviceAgent ---------------------------------------------------------------

def segments() -> list[tuple[int, int]]:
    return sorted((s["address"], s["total_size"]) for s in torch.cuda.memory_snapshot())


def covered(a: DeviceAgent) -> list[tuple[int, int]]:
    # The registered regions, adjacent ones merged: what the segments' mapped memory is.
    out: list[list[int]] = []
    for start, nbytes, _ in sorted(r for r in a.cache.regions if r is not None):
        if out and out[-1][0] + out[-1][1] == start:
            out[-1][1] += nbytes
        else:
            out.append([start, nbytes])
    return [tuple(r) for r in out]


def merged(spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    out: list[list[int]] = []
    for start, nbytes in spans:
        if out and out[-1][0] + out[-1][1] == start:
            out[-1][1] += nbytes
        else:
            out.append([start, nbytes])
    return [tuple(r) for r in out]


def device_segments_registered_as_mapped():
    held = [torch.empty(n, dtype=torch.uint8, device="cuda") for n in (1 * MIB, 30 * MIB)]
    with DeviceAgent(name("device"), mem_type="DRAM") as a:
        assert covered(a) == merged(segments()) and a.cache.live_regions > 0
        held += [torch.empty(n, dtype=torch.uint8, device="cuda") for n in (3 * MIB, 70 * MIB, 512 * KIB)]
        warm = [torch.empty(n, dtype=torch.uint8, device="cuda") for n in (3 * MIB, 70 * MIB)]
        del warm
        a.sync()
        assert covered(a) == merged(segments())
        made = a.cache.registrations
        for _ in range(3):  # the same working set again, from the pools' cache: nothing new
            again = [torch.empty(n, dtype=torch.uint8, device="cuda") for n in (3 * MIB, 70 * MIB)]
            del again
            assert a.sync() == 0 and a.cache.registrations == made
        del held[1:3]
        torch.cuda.empty_cache()  # segments (or granule runs) unmapped
        a.sync()
        assert covered(a) == merged(segments())
        assert a.cache.deregistrations > 0
    assert a.cache.live_regions == 0


def device_tensors_move_to_a_peer():
    peer = make_agent(name("peer"))
    dst = torch.zeros(6 * MIB, dtype=torch.uint8)
    remote = RegionCache(peer, max_region_bytes=4 * MIB)
    remote.on_map(dst.data_ptr(), dst.numel())
    rows = np.array([[s, n, 0] for s, n, _ in remote.regions], dtype=np.uint64)
    src = [host_tensor(2 * MIB, 5).cuda(), host_tensor(4 * MIB, 6).cuda()]  # copies: kernels do nothing here
    with DeviceAgent(name("device"), mem_type="DRAM", max_region_bytes=1 * MIB) as a:
        peer_name = a.connect(peer.get_agent_metadata())
        a.write(src, peer_name, rows).wait()
        assert torch.equal(dst, torch.cat([t.cpu() for t in src]))
        with pytest.raises(ValueError, match="not in a segment"):
            a.pieces([torch.zeros(16, dtype=torch.uint8)])
    remote.close()


def device_memory_as_vram_is_refused_with_nixls_message():
    held = torch.empty(MIB, dtype=torch.uint8, device="cuda")
    with pytest.raises(NixlError, match="registering"):
        DeviceAgent(name("device"))
    # Refused at attach: the agent detached, so another may attach.
    with DeviceAgent(name("device"), mem_type="DRAM") as a:
        assert a.cache.locate(held.data_ptr())[1] == 0 or a.cache.live_regions > 0
        with pytest.raises(ValueError, match="already report"):
            DeviceAgent(name("device"), mem_type="DRAM")


def device_agent_needs_unipool_torch():
    with pytest.raises(ValueError, match="not installed"):
        DeviceAgent(name("device"), mem_type="DRAM")


if __name__ == "__main__":
    if len(sys.argv) > 2:
        import unipool.torch

        unipool.torch.install(device_conf=sys.argv[2])
    globals()[sys.argv[1]]()
    print("ok")
