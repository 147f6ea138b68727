"""unipool.KVBlockPool: exhaustive alloc/free/reuse, errors, views, copies."""
import gc
import random

import pytest
import torch

import unipool
from unipool import KVBlockPool, KVDoubleFreeError, KVPoolExhaustedError


def small_pool(num_blocks=64, shape=(2, 4, 16), dtype=torch.float16):
    return KVBlockPool(block_shape=shape, dtype=dtype, num_blocks=num_blocks, pinned=False)


def test_geometry():
    p = KVBlockPool(block_bytes=4096, num_blocks=10, pinned=False)
    assert (p.block_bytes, p.num_blocks, p.stride, p.free_blocks) == (4096, 10, 4096, 10)
    assert p.blocks.shape == (10, 4096) and p.blocks.dtype == torch.uint8
    q = small_pool()
    assert q.block_bytes == 2 * 4 * 16 * 2 and q.blocks.shape == (64, 2, 4, 16)
    assert not q.pinned and "pageable" in q.pinning_state
    st = q.stats()
    assert st["requested_bytes"] == 64 * 256 and st["reserved_bytes"] >= st["requested_bytes"]
    with pytest.raises(ValueError):
        KVBlockPool(block_bytes=0, num_blocks=4)
    with pytest.raises(TypeError):
        KVBlockPool(num_blocks=4)
    with pytest.raises(ValueError):
        KVBlockPool(block_bytes=100, block_shape=(10,), dtype=torch.float32, num_blocks=4)


def test_every_block_handed_out_once_and_reused():
    p = small_pool(num_blocks=100)
    ids = p.alloc(30) + p.alloc(70)
    assert sorted(ids) == list(range(100))
    assert p.free_blocks == 0
    with pytest.raises(KVPoolExhaustedError, match="1 blocks asked, 0 free"):
        p.alloc(1)
    p.free(ids[:50])
    again = p.alloc(50)
    assert sorted(again) == sorted(ids[:50])
    p.free(again)
    p.free(ids[50:])
    assert p.free_blocks == 100
    p.validate()


def test_random_batches_never_share_a_block():
    p = small_pool(num_blocks=256)
    rng = random.Random(7)
    live = set()
    for _ in range(3000):
        if rng.random() < 0.55:
            n = rng.randint(0, 32)
            try:
                got = p.alloc(n)
            except KVPoolExhaustedError:
                assert n > 256 - len(live)
                continue
            assert not (set(got) & live), "a block handed out twice"
            assert len(set(got)) == n
            live |= set(got)
        elif live:
            batch = rng.sample(sorted(live), rng.randint(1, min(32, len(live))))
            p.free(torch.tensor(batch, dtype=torch.int64) if rng.random() < 0.5 else batch)
            live -= set(batch)
        assert p.stats()["live_blocks"] == len(live)
    p.validate()


def test_alloc_into_a_tensor():
    p = small_pool()
    out64 = torch.empty(16, dtype=torch.int64)
    assert p.alloc(16, out64) is out64
    out32 = torch.empty(20, dtype=torch.int32)
    p.alloc(8, out=out32)
    ids = out64.tolist() + out32[:8].tolist()
    assert len(set(ids)) == 24
    p.free(out64)
    p.free(out32[:8].clone())
    assert p.free_blocks == 64
    with pytest.raises(TypeError):
        p.alloc(4, torch.empty(4, dtype=torch.float32))
    with pytest.raises(TypeError):
        p.alloc(8, torch.empty(4, dtype=torch.int64))  # too short
    p.validate()


def test_double_free_and_bad_ids_raise_and_free_nothing():
    p = small_pool(num_blocks=8)
    ids = p.alloc(3)
    p.free([ids[0]])
    with pytest.raises(KVDoubleFreeError, match="double free"):
        p.free(ids)
    assert p.stats()["live_blocks"] == 2
    with pytest.raises(KVDoubleFreeError, match="twice"):
        p.free([ids[1], ids[1]])
    with pytest.raises(KVDoubleFreeError, match="out of range"):
        p.free([ids[1], 8])
    with pytest.raises(KVDoubleFreeError, match="out of range"):
        p.free([-1])
    assert issubclass(KVDoubleFreeError, ValueError) and issubclass(KVPoolExhaustedError, MemoryError)
    p.free(ids[1:])
    assert p.stats()["misuse_errors"] == 4
    p.validate()


def test_views_contents_survive_round_trips():
    p = small_pool(num_blocks=32)
    ids = p.alloc(8)
    payload = torch.randn(8, 2, 4, 16).to(torch.float16)
    for i, b in enumerate(ids):
        p.view(b).copy_(payload[i])
    views = p.view(ids)
    assert all(v.data_ptr() == p.blocks[b].data_ptr() for v, b in zip(views, ids))
    # Out to a "device" tensor (CPU here) and back into other blocks.
    staging = torch.zeros(8, 2, 4, 16, dtype=torch.float16)
    p.copy_to_device(ids, staging)
    assert torch.equal(staging, payload)
    other = p.alloc(8)
    p.copy_from_device(other, staging)
    for i, b in enumerate(other):
        assert torch.equal(p.view(b), payload[i])
    # Scattered slots of a larger cache, vLLM style (block ids -> slot ids).
    cache = torch.zeros(16, 2, 4, 16, dtype=torch.float16)
    slots = [15, 3, 4, 5, 0, 9, 10, 2]
    p.copy_to_device(ids, cache, dst=slots)
    for i, s in enumerate(slots):
        assert torch.equal(cache[s], payload[i])
    back = p.alloc(8)
    p.copy_from_device(back, cache, src=slots)
    assert all(torch.equal(p.view(b), payload[i]) for i, b in enumerate(back))
    p.free(ids + other + back)
    p.validate()


def test_copy_argument_errors():
    p = small_pool(num_blocks=4)
    ids = p.alloc(2)
    with pytest.raises(ValueError):
        p.copy_to_device(ids, torch.zeros(2, 3, 3, dtype=torch.float16))
    with pytest.raises(ValueError):
        p.copy_to_device(ids, torch.zeros(2, 2, 4, 16, dtype=torch.float32))
    with pytest.raises(IndexError):
        p.copy_to_device([0, 9], torch.zeros(2, 2, 4, 16, dtype=torch.float16))


def test_free_after_without_cuda_frees_at_once():
    p = small_pool(num_blocks=4)
    ids = p.alloc(4)
    p.free_after(ids)  # host copies are synchronous: nothing to wait for
    assert p.free_blocks == 4
    p.validate()


def test_views_keep_the_arena_alive():
    p = small_pool(num_blocks=4)
    v = p.view(p.alloc(1)[0])
    v.fill_(2)
    del p
    gc.collect()
    assert bool((v == 2).all())  # still mapped: the view holds the arena


def test_llama_block_shape_reserves_what_it_requests():
    # Llama-3-8B: 32 layers x (K, V) x 8 kv heads x 16 tokens x 128 dim, bf16 = 2 MiB.
    p = KVBlockPool(block_shape=(32, 2, 8, 16, 128), dtype=torch.bfloat16, num_blocks=16, pinned=False)
    st = p.stats()
    assert st["block_bytes"] == 2 << 20
    assert st["reserved_bytes"] == st["requested_bytes"]


def test_is_live_answers_for_one_id_and_for_a_batch():
    pool = unipool.KVBlockPool(block_bytes=256, num_blocks=8, pinned=False)
    ids = pool.alloc(3)
    assert pool.is_live(ids[0]) and not pool.is_live(5) and not pool.is_live(-1) and not pool.is_live(99)
    assert pool.is_live(ids) and pool.is_live(torch.tensor(ids, dtype=torch.int32))
    assert not pool.is_live(ids + [5]) and pool.is_live([])
