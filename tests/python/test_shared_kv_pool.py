"""unipool.SharedKVBlockPool: KVBlockPool's calls on a pool shared by
processes, hand-overs between processes, a killed member's blocks
reclaimed, refused names and layouts."""
import multiprocessing as mp
import os
import signal

import pytest
import torch

import unipool
from conftest import covers
from unipool import KVDoubleFreeError, KVPoolExhaustedError, SharedKVBlockPool

SHAPE, DTYPE = (4, 8), torch.float32


def fresh_name(what: str) -> str:
    fresh_name.count = getattr(fresh_name, "count", 0) + 1
    return f"pytest.{what}.{os.getpid()}.{fresh_name.count}"


def make(what: str, num_blocks: int = 32, **kw) -> SharedKVBlockPool:
    return SharedKVBlockPool.create(fresh_name(what), block_shape=SHAPE, dtype=DTYPE, num_blocks=num_blocks,
                                    pinned=False, **kw)


def test_kv_block_pool_calls_work_the_same():
    p = make("calls")
    assert isinstance(p, unipool.KVBlockPool) and p.blocks.shape == (32, *SHAPE)
    ids = p.alloc(5)
    assert ids == [0, 1, 2, 3, 4] and p.is_live(ids) and p.owner_of(3) == os.getpid()
    p.view(2).fill_(7.0)
    assert p.blocks[2, 3, 7].item() == 7.0
    out = torch.empty(3, dtype=torch.int64)
    p.free_and_alloc([1, 2], 3, out)
    assert out.tolist() == [1, 2, 5]
    with pytest.raises(KVDoubleFreeError, match="double free"):
        p.free([0, 6])
    assert p.is_live(0)  # the refused batch freed nothing
    dst = torch.zeros(2, *SHAPE)
    p.copy_to_device([3, 4], dst)  # a CPU tensor: host to host
    with pytest.raises(KVPoolExhaustedError):
        p.alloc(100)
    st = p.stats()
    assert (st["live_blocks"], st["owned_blocks"], st["members"], st["failed_allocs"]) == (6, 6, 1, 1)
    p.validate()


def _giver(name, to_pid, q):
    p = SharedKVBlockPool.attach(name, block_shape=SHAPE, dtype=DTYPE)
    ids = p.alloc(3)
    for i in ids:
        p.view(i).fill_(i + 0.5)
    p.hand_over(ids, to_pid)
    q.put(ids)
    q.get()  # stays attached until told: its hand-over is taken by then


def _holder(name, q):
    p = SharedKVBlockPool.attach(name)
    q.put(p.alloc(10))
    signal.pause()


def test_blocks_move_between_processes_and_a_killed_members_come_back():
    p = make("procs")
    ctx = mp.get_context("spawn")
    q, q2 = ctx.Queue(), ctx.Queue()
    giver = ctx.Process(target=_giver, args=(p.name, os.getpid(), q))
    holder = ctx.Process(target=_holder, args=(p.name, q2))
    giver.start()
    holder.start()
    ids = q.get(timeout=120)
    assert p.handed_to_me() == ids and p.stats()["transit_blocks"] == 3
    p.take_over(ids)
    assert [p.view(i)[0, 0].item() for i in ids] == [i + 0.5 for i in ids]
    with pytest.raises(KVDoubleFreeError, match="not handed to the caller"):
        p.take_over(ids)
    q.put("done")
    giver.join(timeout=60)
    assert [p.owner_of(i) for i in ids] == [os.getpid()] * 3  # taken over: the giver's exit left them
    held = q2.get(timeout=120)
    assert p.owner_of(held[0]) == holder.pid
    os.kill(holder.pid, signal.SIGKILL)
    holder.join(timeout=60)
    assert p.reclaim_dead() == 10
    st = p.stats()
    assert (st["live_blocks"], st["reclaimed_blocks"], st["dead_members"], st["members"]) == (3, 10, 1, 1)
    assert p.member_pids() == [os.getpid()]
    p.validate()


@covers("unipool.SharedKVBlockPool", "unipool.SharedKVBlockPool.create", "unipool.SharedKVBlockPool.attach",
        "unipool.SharedKVBlockPool.hand_over", "unipool.SharedKVBlockPool.take_over")
def test_refusals():
    with pytest.raises(RuntimeError, match="no process serves it"):
        SharedKVBlockPool.attach(fresh_name("nobody"))
    p = make("refusals")
    with pytest.raises(RuntimeError, match="the caller expects"):
        SharedKVBlockPool.attach(p.name, block_bytes=64)
    with pytest.raises(RuntimeError, match="exists"):
        SharedKVBlockPool.create(p.name, block_bytes=128, num_blocks=4, pinned=False)
    with pytest.raises(ValueError, match="lifetime"):
        make("lifetime", lifetime="forever")
    with pytest.raises(ValueError, match="must be 1 to 64 characters"):
        SharedKVBlockPool.create("a/b", block_bytes=128, num_blocks=4)
    with pytest.raises(TypeError, match="name must be a str"):
        SharedKVBlockPool.attach(5)
    with pytest.raises(TypeError, match="SharedKVBlockPool.create"):
        SharedKVBlockPool(block_bytes=128, num_blocks=4)
    ids = p.alloc(2)
    with pytest.raises(ValueError, match="not attached"):
        p.hand_over(ids, 1)
    second = SharedKVBlockPool.attach(p.name)  # another member of this process
    with pytest.raises(KVDoubleFreeError, match="block 9 is not allocated"):
        p.hand_over([ids[0], 9], os.getpid())
    assert second.handed_to_me() == []
    with pytest.raises(TypeError, match="to_pid must be an int"):
        p.hand_over(ids, 1.5)
    with pytest.raises(KVDoubleFreeError, match="not handed to the caller"):
        second.take_over(ids)
    with pytest.raises(KVDoubleFreeError, match="out of range"):
        second.take_over([32])
    p.validate()


@covers("unipool.SharedKVBlockPool.name", "unipool.SharedKVBlockPool.handed_to_me",
        "unipool.SharedKVBlockPool.reclaim_dead", "unipool.SharedKVBlockPool.owner_of",
        "unipool.SharedKVBlockPool.member_pids", "unipool.SharedKVBlockPool.closed",
        "unipool.SharedKVBlockPool.stats")
def test_queries_refuse_bad_ids_and_a_pool_never_made():
    p = make("queries")
    with pytest.raises(IndexError, match="out of range"):
        p.owner_of(32)
    with pytest.raises(IndexError, match="out of range"):
        p.owner_of(-1)  # not the last block
    with pytest.raises(TypeError, match="must be an int"):
        p.owner_of(1.0)
    assert p.owner_of(0) == 0 and not p.closed and p.member_pids() == [os.getpid()]
    # An object whose create() or attach() never ran (or failed) has no pool.
    blank = SharedKVBlockPool.__new__(SharedKVBlockPool)
    for call in (lambda: blank.name, blank.handed_to_me, blank.reclaim_dead, blank.member_pids,
                 lambda: blank.closed, blank.stats, lambda: blank.owner_of(0)):
        with pytest.raises((RuntimeError, AttributeError), match="not initialised|num_blocks"):
            call()
