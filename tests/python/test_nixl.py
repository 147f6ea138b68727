"""unipool.nixl: pools registered with NIXL (UCX, loopback), KV blocks moved
between agents and between processes, and the failures (docs/transfer.md).
NIXL is a test requirement (scripts/requirements.txt): missing, these tests
fail at import rather than skip.

The tests that feed unipool.nixl bad input say which names they cover
(@covers, counted by test_bad_input.test_every_public_name_has_a_case)."""
from __future__ import annotations

import json
import os
import pathlib
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
import torch

import unipool
from conftest import covers, run_py
from unipool.nixl import DEFAULT_MAX_REGION, KVAgent, NixlError, PeerLostError, RegionCache, Transfer, make_agent

if os.environ.get("UNIPOOL_NULLGPU_LIB_DIR"):
    # On the null GPU, UCX loads its CUDA memory domain, whose driver calls
    # (cuPointerGetAttributes, cuMemHostRegister) the null GPU does not
    # implement: every registration would fail. Its CUDA transports are left
    # out there (the child processes inherit this).
    os.environ.setdefault("UCX_TLS", "^cuda_copy,cuda_ipc,gdr_copy")

ROOT = pathlib.Path(__file__).resolve().parents[2]
PAIR = ROOT / "bench" / "transfer" / "kv_pair.py"
KIB = 1024
_count = [0]


def agent_name(prefix: str) -> str:
    _count[0] += 1
    return f"{prefix}-{os.getpid()}-{_count[0]}"


@pytest.fixture(scope="module")
def agent():
    return make_agent(agent_name("cache"))


def kv_pool(block_bytes=64 * KIB, num_blocks=64):
    return unipool.KVBlockPool(block_bytes=block_bytes, num_blocks=num_blocks, pinned=False)


# --- RegionCache ----------------------------------------------------------

@covers("unipool.nixl.RegionCache.locate")
def test_a_chunk_is_registered_in_regions_under_the_limit_and_located(agent):
    chunk = torch.zeros(7 * 512 * KIB, dtype=torch.uint8)  # 3.5 MiB
    cache = RegionCache(agent, max_region_bytes=1 << 20)
    base = chunk.data_ptr()
    assert cache.on_map(base, chunk.numel()) == [0, 1, 2, 3]
    assert cache.registrations == 4 and cache.live_regions == 4
    assert [r[1] for r in cache.regions] == [1 << 20] * 3 + [512 * KIB]
    assert cache.locate(base) == (0, 0)
    assert cache.locate(base + (3 << 19) + 5) == (1, (1 << 19) + 5)
    assert cache.locate(base + chunk.numel() - 1) == (3, 512 * KIB - 1)
    with pytest.raises(KeyError, match="in no registered region"):
        cache.locate(base + chunk.numel())
    cache.before_unmap(base)
    assert cache.deregistrations == 4 and cache.live_regions == 0
    with pytest.raises(KeyError):
        cache.locate(base)


@covers("unipool.nixl.RegionCache", "unipool.nixl.RegionCache.on_map", "unipool.nixl.RegionCache.before_unmap")
def test_overlapping_and_unknown_chunks_are_refused(agent):
    chunk = torch.zeros(1 << 20, dtype=torch.uint8)
    cache = RegionCache(agent)
    cache.on_map(chunk.data_ptr(), chunk.numel())
    with pytest.raises(ValueError, match="overlaps"):
        cache.on_map(chunk.data_ptr() + 4096, 4096)
    outer = torch.zeros(8 << 20, dtype=torch.uint8)
    inner = outer.data_ptr() + (3 << 20)
    cache.on_map(inner, 1 << 20)
    with pytest.raises(ValueError, match="overlaps"):  # holds a registered chunk whole
        cache.on_map(outer.data_ptr(), outer.numel())
    with pytest.raises(ValueError, match="overlaps"):  # ends inside one
        cache.on_map(outer.data_ptr(), (3 << 20) + 1)
    cache.on_map(outer.data_ptr(), 3 << 20)  # ends where the other begins
    cache.before_unmap(outer.data_ptr())
    cache.before_unmap(inner)
    with pytest.raises(KeyError, match="no chunk registered"):
        cache.before_unmap(chunk.data_ptr() + 4096)
    with pytest.raises(ValueError, match="bad chunk"):
        cache.on_map(chunk.data_ptr(), 0)
    with pytest.raises(ValueError, match="mem_type"):
        RegionCache(agent, mem_type="HBM")
    cache.close()
    assert cache.live_regions == 0 and cache.registrations == 3


@covers("unipool.nixl.DEFAULT_MAX_REGION", "unipool.nixl.RegionCache", "unipool.nixl.RegionCache.on_map",
        "unipool.nixl.KVAgent")
def test_region_sizes_outside_1_to_max_region_bytes_are_refused(agent):
    assert RegionCache(agent).max_region_bytes == DEFAULT_MAX_REGION == 4 << 30
    for bad in (0, -1):
        with pytest.raises(ValueError, match=f"max_region_bytes must be >= 1, got {bad}"):
            RegionCache(agent, max_region_bytes=bad)
        with pytest.raises(ValueError, match=f"max_region_bytes={bad} is smaller than one block"):
            KVAgent(kv_pool(), agent_name("r"), max_region_bytes=bad)
    chunk = torch.zeros(1 << 20, dtype=torch.uint8)
    cache = RegionCache(agent)
    for piece in (DEFAULT_MAX_REGION + 1, 0):
        with pytest.raises(ValueError, match=f"piece_bytes={piece} not in 1 .. {DEFAULT_MAX_REGION}"):
            cache.on_map(chunk.data_ptr(), chunk.numel(), piece_bytes=piece)
    assert cache.registrations == 0 and cache.regions == []
    assert cache.on_map(chunk.data_ptr(), chunk.numel(), piece_bytes=1 << 19) == [0, 1]  # refused: nothing held
    cache.close()


@covers("unipool.nixl.RegionCache.close", "unipool.nixl.RegionCache.live_regions")
def test_region_cache_close_twice_and_live_regions_read_only(agent):
    chunk = torch.zeros(2 << 20, dtype=torch.uint8)
    cache = RegionCache(agent, max_region_bytes=1 << 20)
    cache.on_map(chunk.data_ptr(), chunk.numel())
    with pytest.raises(AttributeError, match="live_regions"):
        cache.live_regions = 0
    assert cache.live_regions == 2
    cache.close()
    cache.close()  # nothing left: no second deregistration
    assert cache.live_regions == 0 and cache.deregistrations == 2
    with pytest.raises(KeyError, match="no chunk registered"):
        cache.before_unmap(chunk.data_ptr())
    with pytest.raises(KeyError, match="in no registered region"):
        cache.locate(chunk.data_ptr())
    assert cache.on_map(chunk.data_ptr(), chunk.numel()) == [2, 3]  # still usable after close
    assert cache.locate(chunk.data_ptr() + (1 << 20)) == (3, 0)
    cache.close()
    assert cache.live_regions == 0 and cache.registrations == cache.deregistrations == 4


@covers("unipool.nixl.RegionCache.on_map", "unipool.nixl.NixlError")
def test_a_refused_registration_carries_nixls_message_and_leaves_nothing(agent):
    # This UCX has no CUDA support: VRAM registration of memory UCX sees as
    # host memory (the null GPU's, or any host buffer) is refused by NIXL.
    chunk = torch.zeros(2 << 20, dtype=torch.uint8)
    cache = RegionCache(agent, mem_type="VRAM", max_region_bytes=1 << 20)
    with pytest.raises(NixlError, match="registering .* \\(VRAM\\) failed: nixlBackendError: NIXL_ERR_BACKEND"):
        cache.on_map(chunk.data_ptr(), chunk.numel())
    assert cache.live_regions == 0 and cache.regions == []


@covers("unipool.nixl.make_agent", "unipool.nixl.NixlError")
def test_an_agent_without_the_backend_asked_for_is_refused():
    with pytest.raises(NixlError, match=r"backend\(s\) \['NO_SUCH'\] unavailable \(NIXL plugins found: .*UCX"):
        make_agent(agent_name("nobackend"), backends=("UCX", "NO_SUCH"))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA or the null GPU")
def test_null_gpu_memory_is_refused_as_vram(agent):
    t = torch.empty(1 << 20, dtype=torch.uint8, device="cuda")
    cache = RegionCache(agent, mem_type="VRAM")
    with pytest.raises(NixlError, match="NIXL_ERR_BACKEND"):
        cache.on_map(t.data_ptr(), t.numel(), device=t.device.index)
    assert cache.live_regions == 0


# --- KVAgent in one process -----------------------------------------------

@pytest.fixture
def pair():
    a_pool, b_pool = kv_pool(), kv_pool()
    a = KVAgent(a_pool, agent_name("a"), max_region_bytes=1 << 20)
    b = KVAgent(b_pool, agent_name("b"), max_region_bytes=1 << 20)
    peer_of_a = a.connect(b.metadata())
    peer_of_b = b.connect(a.metadata())
    yield a, b, peer_of_a, peer_of_b
    a.close()
    b.close()


def test_the_arena_is_registered_once_per_region_and_not_per_allocation(pair):
    a, _, _, _ = pair
    assert a.cache.registrations == 4  # 64 blocks of 64 KiB in regions of 1 MiB
    for _ in range(100):
        a.pool.free(a.pool.alloc(17))
    assert a.cache.registrations == 4 and a.cache.live_regions == 4


@covers("unipool.nixl.KVAgent.locate", "unipool.nixl.KVAgent.descs")
def test_locate_and_descs_are_the_blocks_addresses(pair):
    a, _, _, _ = pair
    regions, offsets = a.locate([0, 15, 16, 63])
    assert regions.tolist() == [0, 0, 1, 3]
    assert offsets.tolist() == [0, 15 * 64 * KIB, 0, 15 * 64 * KIB]
    d = a.descs(torch.tensor([3, 40]))
    assert d.dtype == np.uint64 and d.shape == (2, 3)
    assert d[:, 0].tolist() == [a.pool.view(3).data_ptr(), a.pool.view(40).data_ptr()]
    assert d[:, 1].tolist() == [64 * KIB] * 2
    start, _, _ = a.cache.regions[regions[3]]
    assert start + offsets[3] == a.pool.view(63).data_ptr()
    with pytest.raises(IndexError, match="block id 64 out of range"):
        a.descs([1, 64])
    with pytest.raises(TypeError, match="1-D"):
        a.locate([[1]])
    for bad in ([-1], [64], np.array([2**40])):
        with pytest.raises(IndexError, match="out of range"):
            a.locate(bad)
    with pytest.raises(TypeError, match="ints"):
        a.descs([1.5])


def test_write_and_read_move_the_bytes_with_a_notification(pair):
    a, b, peer_of_a, peer_of_b = pair
    src = a.pool.alloc(8)
    dst = b.pool.alloc(8)
    for i in src:
        a.pool.view(i).fill_(i + 1)
    peer_of_a.grant(dst)
    a.write(src, peer_of_a, dst, notif=b"kv:1").wait()
    b.wait_notification(peer_of_b, b"kv:1")
    assert all(bool((b.pool.view(d) == s + 1).all()) for s, d in zip(src, dst))
    back = a.pool.alloc(8)
    a.read(back, peer_of_a, dst[::-1]).wait()
    assert [int(a.pool.view(i)[0]) for i in back] == [s + 1 for s in src[::-1]]


@covers("unipool.nixl.KVAgent.write")
def test_transfers_naming_freed_blocks_are_refused_before_posting(pair):
    a, b, peer_of_a, _ = pair
    src, dst = a.pool.alloc(4), b.pool.alloc(4)
    b.pool.view(dst[0]).fill_(7)
    peer_of_a.grant(dst)
    a.pool.free(src[2:])
    with pytest.raises(ValueError, match=f"block {src[2]} of this pool is not allocated"):
        a.write(src, peer_of_a, dst)
    src = src[:2] + a.pool.alloc(2)
    peer_of_a.revoke(dst[1:2])
    with pytest.raises(ValueError, match=f"block {dst[1]} of the peer is not granted"):
        a.write(src, peer_of_a, dst)
    with pytest.raises(ValueError, match="4 local ids but 3 peer ids"):
        a.write(src, peer_of_a, dst[:3])
    assert int(b.pool.view(dst[0])[0]) == 7  # nothing was posted


@covers("unipool.nixl.KVAgent.transfer_indices")
def test_transfer_indices_take_lists_arrays_and_tensors(pair):
    a, b, peer_of_a, _ = pair
    src, dst = a.pool.alloc(5), b.pool.alloc(5)
    peer_of_a.grant(dst)
    for ids, peer_ids in ((src, dst), (np.array(src), torch.tensor(dst, dtype=torch.int32)),
                          (torch.tensor(src), np.array(dst, dtype=np.uint32))):
        local, remote = a.transfer_indices(ids, peer_of_a, peer_ids)
        assert local.dtype == remote.dtype == np.int32
        assert local.tolist() == src and remote.tolist() == dst
    with pytest.raises(IndexError, match="peer block id 64 out of range"):
        a.transfer_indices(src, peer_of_a, dst[:4] + [64])
    with pytest.raises(IndexError, match="block id -1 out of range"):
        a.transfer_indices(src[:4] + [-1], peer_of_a, dst)
    a.disconnect(peer_of_a)
    with pytest.raises(ValueError, match="is not connected"):
        a.transfer_indices(src, peer_of_a, dst)


@covers("unipool.nixl.KVAgent", "unipool.nixl.KVAgent.connect")
def test_bad_metadata_and_bad_pools_are_refused(agent):
    with pytest.raises(ValueError, match="not the bytes of a KVAgent.metadata"):
        KVAgent(kv_pool(), agent_name("m")).connect(b"hello")
    with pytest.raises(TypeError, match="unipool.KVBlockPool"):
        KVAgent(torch.zeros(4), agent_name("t"))
    with pytest.raises(ValueError, match="smaller than one block"):
        KVAgent(kv_pool(), agent_name("s"), max_region_bytes=4 * KIB)


@covers("unipool.nixl.KVAgent.close")
def test_close_deregisters_everything_and_is_idempotent():
    a = KVAgent(kv_pool(num_blocks=40), agent_name("c"), max_region_bytes=1 << 20)
    b = KVAgent(kv_pool(), agent_name("d"))
    peer = a.connect(b.metadata())
    peer.grant([0])
    ids = a.pool.alloc(1)
    assert a.cache.live_regions == 3  # 16 + 16 + 8 blocks
    a.close()
    a.close()
    assert a.cache.live_regions == 0 and a.cache.deregistrations == 3 and a.peers == {}
    with pytest.raises(ValueError, match="is not connected"):  # its peers went with it
        a.write(ids, peer, [0])
    assert not peer.granted.any()
    a.pool.free(ids)  # the pool stays usable
    a.pool.validate()
    b.close()


@covers("unipool.nixl.KVPeer", "unipool.nixl.KVPeer.grant", "unipool.nixl.KVPeer.revoke")
def test_grant_and_revoke_refuse_bad_ids_and_change_nothing(pair):
    _, _, peer, _ = pair
    peer.grant([1, 2])
    for call in (peer.grant, peer.revoke):
        for ids, error, text in (([0, 64], IndexError, "a block id out of range \\(peer .* has 64\\)"),
                                 ([3, -1], IndexError, "out of range"), (torch.tensor([2**40]), IndexError, "range"),
                                 ([1.5], TypeError, "1-D list, array or tensor of ints"),
                                 ([[1]], TypeError, "1-D"), (np.array([True]), TypeError, "ints"),
                                 ("12", TypeError, "ints")):
            with pytest.raises(error, match=text):
                call(ids)
            assert np.flatnonzero(peer.granted).tolist() == [1, 2], (call, ids)
    peer.revoke(np.array([2], dtype=np.uint8))
    assert np.flatnonzero(peer.granted).tolist() == [1]


@covers("unipool.nixl.KVAgent.connect", "unipool.nixl.KVAgent.disconnect")
def test_connect_twice_and_disconnect_of_another_agents_peer_are_refused(pair):
    a, b, peer_of_a, _ = pair
    with pytest.raises(ValueError, match=f"peer '{b.name}' is already connected"):
        a.connect(b.metadata())
    assert a.peers == {b.name: peer_of_a}
    c = KVAgent(kv_pool(), agent_name("c"), max_region_bytes=1 << 20)
    peer_of_c = c.connect(b.metadata())  # the same name as a's peer: another agent's descriptors
    with pytest.raises(ValueError, match=f"peer '{b.name}' is not connected to agent '{a.name}'"):
        a.disconnect(peer_of_c)
    assert a.peers == {b.name: peer_of_a} and c.peers == {b.name: peer_of_c}
    dst = b.pool.alloc(2)
    for value, (side, peer), d in zip((5, 6), ((a, peer_of_a), (c, peer_of_c)), dst):  # both still move bytes
        src = side.pool.alloc(1)
        side.pool.view(src[0]).fill_(value)
        peer.grant([d])
        side.write(src, peer, [d]).wait(10)
        assert int(b.pool.view(d)[0]) == value
    c.close()
    a.disconnect(peer_of_a)
    a.disconnect(peer_of_a)  # already disconnected: nothing to do
    assert a.peers == {}
    assert a.connect(b.metadata()) is a.peers[b.name] is not peer_of_a  # and it may connect again


@covers("unipool.nixl.KVAgent.notify", "unipool.nixl.KVAgent.wait_notification", "unipool.nixl.NixlError")
def test_notify_and_wait_notification_refuse_bad_arguments(pair):
    a, b, peer_of_a, peer_of_b = pair
    a.notify(peer_of_a, b"kv:2")
    t0 = time.monotonic()
    for tag, timeout, error, text in (("kv:2", 30, TypeError, "tag must be bytes, got str"),
                                      (None, 30, TypeError, "tag must be bytes"),
                                      (b"kv:2", "30", TypeError, "timeout must be a number of seconds, got str"),
                                      (b"kv:2", None, TypeError, "timeout must be a number"),
                                      (b"kv:2", float("nan"), ValueError, "timeout must be >= 0"),
                                      (b"kv:2", -1, ValueError, "timeout must be >= 0 seconds, got -1")):
        with pytest.raises(error, match=text):
            b.wait_notification(peer_of_b, tag, timeout)
    assert time.monotonic() - t0 < 5, "a refused wait waited"
    b.wait_notification(peer_of_b, b"kv:2", timeout=10)  # the refusals consumed nothing
    a.disconnect(peer_of_a)
    with pytest.raises(NixlError, match=f"notifying '{b.name}' failed: .*NIXL_ERR_NOT_FOUND"):
        a.notify(peer_of_a, b"kv:3")


@covers("unipool.nixl.Transfer", "unipool.nixl.Transfer.wait", "unipool.nixl.KVAgent.read")
def test_a_bad_timeout_is_refused_and_the_transfer_still_completes(pair):
    a, b, peer_of_a, _ = pair
    src, dst = a.pool.alloc(2), b.pool.alloc(2)
    for i in src:
        a.pool.view(i).fill_(i + 1)
    peer_of_a.grant(dst)
    xfer = a.write(src, peer_of_a, dst)
    for timeout, error in (("30", TypeError), (None, TypeError), (True, TypeError), (float("nan"), ValueError),
                           (-0.5, ValueError)):
        with pytest.raises(error, match="Transfer.wait: timeout must be"):
            xfer.wait(timeout)
    xfer.wait(10)
    assert xfer.done() and [int(b.pool.view(d)[0]) for d in dst] == [s + 1 for s in src]
    back = a.pool.alloc(2)
    peer_of_a.revoke(dst[1:])
    with pytest.raises(ValueError, match=f"block {dst[1]} of the peer is not granted"):
        a.read(back, peer_of_a, dst)
    with pytest.raises(IndexError, match="peer block id 64 out of range"):
        a.read(back, peer_of_a, [dst[0], 64])
    assert all(int(a.pool.view(i)[0]) == 0 for i in back)  # nothing was read


class FakeNixlAgent:
    """check_xfer_state always answers `state`; records the released handles."""

    def __init__(self, state):
        self.state, self.released = state, []

    def check_xfer_state(self, handle):
        return self.state

    def release_xfer_handle(self, handle):
        self.released.append(handle)


@covers("unipool.nixl.Transfer.done", "unipool.nixl.Transfer.wait", "unipool.nixl.PeerLostError")
def test_a_transfer_nixl_reports_failed_or_that_runs_late_raises_peer_lost_once_released():
    nixl = FakeNixlAgent("ERR")
    failed = Transfer(nixl, "h1", "peer-x", 3, "WRITE")
    for _ in range(2):  # and it stays failed
        with pytest.raises(PeerLostError, match="WRITE of 3 blocks with peer 'peer-x' failed"):
            failed.done()
    assert nixl.released == ["h1"]
    nixl = FakeNixlAgent("PROC")
    late = Transfer(nixl, "h2", "peer-y", 1, "READ")
    assert late.done() is False and nixl.released == []
    t0 = time.monotonic()
    with pytest.raises(PeerLostError, match="READ of 1 blocks with peer 'peer-y' did not complete in 0.05 s"):
        late.wait(0.05)
    assert 0.05 <= time.monotonic() - t0 < 5 and nixl.released == ["h2"]
    with pytest.raises(PeerLostError, match="failed"):
        late.done()
    assert nixl.released == ["h2"] and issubclass(PeerLostError, NixlError) and issubclass(NixlError, RuntimeError)


@covers("unipool.nixl.KVAgent.metadata")
def test_the_metadata_of_a_closed_agent_is_refused_by_connect(pair):
    a, b, peer_of_a, _ = pair
    gone = KVAgent(kv_pool(), agent_name("gone"), max_region_bytes=1 << 20)
    with pytest.raises(TypeError):
        gone.metadata(1)
    gone.close()  # its arena is no longer registered: nothing of it to address
    with pytest.raises(NixlError, match=f"preparing peer '{gone.name}''s block descriptors failed"):
        a.connect(gone.metadata())
    assert a.peers == {b.name: peer_of_a}


# --- two processes ---------------------------------------------------------

def run_pair(tmp_path, *extra):
    sock = str(tmp_path / "kv.sock")
    decode = subprocess.Popen([sys.executable, str(PAIR), "decode", sock, *extra], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
    while not os.path.exists(sock):
        assert decode.poll() is None, decode.communicate()[1]
        time.sleep(0.02)
    prefill = subprocess.run([sys.executable, str(PAIR), "prefill", sock, *extra], capture_output=True, text=True,
                             timeout=120)
    out, err = decode.communicate(timeout=120)
    assert prefill.returncode == 0, prefill.stderr
    assert decode.returncode == 0, err
    return json.loads(prefill.stdout.strip().splitlines()[-1]), json.loads(out.strip().splitlines()[-1])


@pytest.mark.parametrize("mode", ["write", "read"])
def test_prefill_and_decode_processes_move_checked_blocks(tmp_path, mode):
    p, d = run_pair(tmp_path, "--mode", mode, "--blocks", "24", "--requests", "3", "--num-blocks", "64",
                    "--max-region-bytes", str(1 << 20))
    assert p["blocks"] == d["blocks"] == d["checked"] == 72
    assert p["registrations"] == d["registrations"] == 4  # 64 blocks of 64 KiB, regions of 1 MiB
    assert p["free_blocks"] == d["free_blocks"] == 64   # every id freed on both sides


PEER = """
import sys, time, unipool
from unipool.nixl import KVAgent
pool = unipool.KVBlockPool(block_bytes=1 << 20, num_blocks=64, pinned=False)
kv = KVAgent(pool, sys.argv[1])
sys.stdout.buffer.write(b"META " + kv.metadata().hex().encode() + b"\\n")
sys.stdout.flush()
time.sleep(600)
"""


@covers("unipool.nixl.PeerLostError", "unipool.nixl.Transfer.wait", "unipool.nixl.KVAgent.read",
        "unipool.nixl.KVAgent.wait_notification")
def test_a_peer_that_dies_gives_a_clear_error_and_leaks_no_registration():
    peer = subprocess.Popen([sys.executable, "-c", PEER, agent_name("doomed")], stdout=subprocess.PIPE)
    line = b""
    while not line.startswith(b"META "):  # UCX may log to stdout first
        line = peer.stdout.readline()
        assert line, "the peer exited before printing its metadata"
    meta = bytes.fromhex(line[5:].decode().strip())
    kv = KVAgent(kv_pool(block_bytes=1 << 20, num_blocks=64), agent_name("survivor"))
    remote = kv.connect(meta)
    remote.grant(range(64))
    ids = kv.pool.alloc(64)
    kv.read(ids[:1], remote, [0]).wait(30)  # the peer is there
    transfer = kv.read(ids, remote, list(range(64)))
    peer.send_signal(signal.SIGKILL)
    peer.wait()
    try:
        transfer.wait(10)  # may have finished before the kill
        kv.read(ids, remote, list(range(64))).wait(10)
    except PeerLostError as e:
        assert remote.name in str(e) and "gone or unreachable" in str(e)
    else:
        pytest.fail("a read from a killed peer completed")
    with pytest.raises(PeerLostError, match="no notification b'kv:0' from peer"):
        kv.wait_notification(remote, b"kv:0", timeout=0.2)
    kv.close()
    assert kv.cache.live_regions == 0 and kv.cache.deregistrations == kv.cache.registrations == 1


# --- HostAgent: the host pool attached (tests/python/nixl_pool_checks.py) --

def pool_check(check: str, *, host_conf: str = "pinned=on", device_conf: str = "") -> None:
    # A process of its own: this session's host pool is made already,
    # pageable, and unipool.torch must be installed before CUDA starts.
    argv = ["checks", check] + ([device_conf] if device_conf else [])
    run_py(f"import runpy, sys; sys.argv = {argv!r}; "
           f"runpy.run_path({str(ROOT / 'tests' / 'python' / 'nixl_pool_checks.py')!r}, run_name='__main__')",
           env={"UNIPOOL_HOST_CONF": host_conf})


@covers("unipool.nixl.HostAgent", "unipool.nixl.HostAgent.sync")
def test_the_host_pool_is_registered_once_per_pinned_piece():
    pool_check("registered_once_per_pinned_piece")


@covers("unipool.nixl.HostAgent.pieces")
def test_pieces_are_cut_where_regions_end_and_refuse_foreign_memory():
    pool_check("pieces_cut_where_regions_end")


@covers("unipool.nixl.HostAgent.write", "unipool.nixl.HostAgent.read", "unipool.nixl.HostAgent.connect",
        "unipool.nixl.HostAgent.metadata")
def test_host_tensors_move_to_a_peer_and_back_across_region_boundaries():
    pool_check("tensors_move_to_a_peer_and_back")


@covers("unipool.nixl.HostAgent.close", "unipool.nixl.HostAgent.disconnect")
def test_one_host_agent_at_a_time_and_close_deregisters_everything():
    pool_check("one_agent_at_a_time")


@covers("unipool.nixl.HostAgent")
def test_a_pageable_host_pool_is_refused():
    pool_check("pageable_pool_is_refused", host_conf="pinned=off")


# --- DeviceAgent: the CUDA allocator's pools attached ------------------------

@pytest.mark.parametrize("expandable", [False, True])
@covers("unipool.nixl.DeviceAgent", "unipool.nixl.DeviceAgent.sync", "unipool.nixl.DeviceAgent.close")
def test_device_segments_are_registered_as_mapped_and_deregistered_as_unmapped(expandable):
    pool_check("device_segments_registered_as_mapped",
               device_conf=f"backend=cuda_vmm,expandable_segments={str(expandable).lower()}")


@covers("unipool.nixl.DeviceAgent.write", "unipool.nixl.DeviceAgent.pieces", "unipool.nixl.DeviceAgent.connect",
        "unipool.nixl.DeviceAgent.read", "unipool.nixl.DeviceAgent.metadata", "unipool.nixl.DeviceAgent.disconnect")
def test_device_tensors_move_to_a_peer():
    pool_check("device_tensors_move_to_a_peer", device_conf="expandable_segments=true")


@covers("unipool.nixl.DeviceAgent")
def test_null_gpu_segments_are_refused_as_vram_and_the_agent_detaches():
    pool_check("device_memory_as_vram_is_refused_with_nixls_message", device_conf="expandable_segments=true")


@covers("unipool.nixl.DeviceAgent")
def test_a_device_agent_needs_unipool_torch():
    pool_check("device_agent_needs_unipool_torch")
