"""unipool.nixl: pools registered with NIXL (UCX, loopback), KV blocks moved
between agents and between processes, and the failures (docs/transfer.md).
NIXL is a test requirement (scripts/requirements.txt): missing, these tests
fail at import rather than skip."""
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
from unipool.nixl import KVAgent, NixlError, PeerLostError, RegionCache, make_agent

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


def test_a_refused_registration_carries_nixls_message_and_leaves_nothing(agent):
    # This UCX has no CUDA support: VRAM registration of memory UCX sees as
    # host memory (the null GPU's, or any host buffer) is refused by NIXL.
    chunk = torch.zeros(2 << 20, dtype=torch.uint8)
    cache = RegionCache(agent, mem_type="VRAM", max_region_bytes=1 << 20)
    with pytest.raises(NixlError, match="registering .* \\(VRAM\\) failed: nixlBackendError: NIXL_ERR_BACKEND"):
        cache.on_map(chunk.data_ptr(), chunk.numel())
    assert cache.live_regions == 0 and cache.regions == []


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


def test_bad_metadata_and_bad_pools_are_refused(agent):
    with pytest.raises(ValueError, match="not the bytes of a KVAgent.metadata"):
        KVAgent(kv_pool(), agent_name("m")).connect(b"hello")
    with pytest.raises(TypeError, match="unipool.KVBlockPool"):
        KVAgent(torch.zeros(4), agent_name("t"))
    with pytest.raises(ValueError, match="smaller than one block"):
        KVAgent(kv_pool(), agent_name("s"), max_region_bytes=4 * KIB)


def test_close_deregisters_everything_and_is_idempotent():
    a = KVAgent(kv_pool(num_blocks=40), agent_name("c"), max_region_bytes=1 << 20)
    b = KVAgent(kv_pool(), agent_name("d"))
    a.connect(b.metadata())
    assert a.cache.live_regions == 3  # 16 + 16 + 8 blocks
    a.close()
    a.close()
    assert a.cache.live_regions == 0 and a.peers == {}
    b.close()


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
