"""unipool.KVBlockPool: lowest-free-first order, ids in tensors (the fast
path), and free_and_alloc (free a batch and allocate one in a single call)."""
import random

import pytest
import torch

from unipool import KVBlockPool, KVDoubleFreeError, KVPoolExhaustedError


def pool_of(num_blocks):
    return KVBlockPool(block_bytes=256, num_blocks=num_blocks, pinned=False)


def test_alloc_hands_out_the_lowest_free_ids():
    p = pool_of(300)
    everything = p.alloc(300)
    assert everything == list(range(300))
    rng = random.Random(11)
    back = rng.sample(everything, 120)
    p.free(torch.tensor(back, dtype=torch.int64))  # any order
    got = p.alloc(50)
    assert got == sorted(back)[:50]
    p.validate()


def test_free_and_alloc_in_place_on_a_tensor():
    p = pool_of(64)
    ids = p.alloc(48, torch.empty(48, dtype=torch.int64))  # 0..47
    p.free(ids[8:16].clone())  # 8..15 free
    batch = ids[32:40].clone()  # 32..39
    assert p.free_and_alloc(batch, 8, batch) is batch  # out may be the ids being freed
    assert batch.tolist() == list(range(8, 16))
    st = p.stats()
    assert st["live_blocks"] == 40 and st["allocs"] == 56 and st["frees"] == 16
    # int32 out, more than freed, keyword out
    out32 = torch.empty(12, dtype=torch.int32)
    p.free_and_alloc(batch, 12, out=out32)
    assert out32.tolist() == list(range(8, 16)) + [32, 33, 34, 35]
    # a list in, a list out
    assert p.free_and_alloc(out32.tolist(), 3) == [8, 9, 10]
    p.validate()


def test_free_and_alloc_refused_changes_nothing():
    p = pool_of(10)
    ids = p.alloc(8)
    out = torch.full((4,), -7, dtype=torch.int64)
    with pytest.raises(KVDoubleFreeError, match="block 9 is not allocated: double free"):
        p.free_and_alloc([ids[0], 9], 2, out)
    with pytest.raises(KVPoolExhaustedError, match="nothing was freed"):
        p.free_and_alloc(ids[:1], 4, out)  # 2 free + 1 < 4
    assert out.tolist() == [-7] * 4
    assert p.stats()["live_blocks"] == 8 and p.free_blocks == 2
    with pytest.raises(TypeError):
        p.free_and_alloc(ids[:1], 4, torch.empty(4, dtype=torch.float32))
    with pytest.raises(TypeError):
        p.free_and_alloc(ids[:1], 4, torch.empty(3, dtype=torch.int64))  # too short
    with pytest.raises(TypeError):
        p.free_and_alloc(ids[:1])
    with pytest.raises(ValueError):
        p.free_and_alloc(ids[:1], -1)
    assert p.stats()["live_blocks"] == 8
    p.validate()


def test_ids_in_tensors_of_every_kind():
    p = pool_of(32)
    out = torch.empty(20, dtype=torch.int64)
    p.alloc(10, out)
    # a strided view is not read in place, but still freed correctly
    p.free(out[:10:2])
    p.free(out[1:10:2].to(torch.int32))
    assert p.free_blocks == 32
    with pytest.raises(TypeError):
        p.alloc(4, out[::2])  # out must be contiguous
    with pytest.raises(TypeError):
        p.alloc(4, torch.empty(2, 2, dtype=torch.int64))
    with pytest.raises(KVDoubleFreeError, match="out of range"):
        p.free(torch.tensor([40], dtype=torch.int32))
    p.validate()


def test_random_free_and_alloc_against_a_model():
    p = pool_of(200)
    rng = random.Random(5)
    live = []
    free = set(range(200))
    for _ in range(2000):
        k = rng.randint(0, min(len(live), 30))
        rng.shuffle(live)
        evict, live = live[:k], live[k:]
        n = rng.randint(0, 30)
        if n > len(free) + k:
            with pytest.raises(KVPoolExhaustedError):
                p.free_and_alloc(evict, n)
            live += evict
            continue
        as_tensor = rng.random() < 0.5
        got = p.free_and_alloc(torch.tensor(evict, dtype=torch.int64) if as_tensor else evict, n)
        free |= set(evict)
        assert got == sorted(free)[:n]
        free -= set(got)
        live += got
        assert p.free_blocks == len(free)
    p.validate()


def test_ids_in_tensors_that_cannot_be_ids_are_refused():
    p = pool_of(8)
    ids = p.alloc(2, torch.empty(2, dtype=torch.int64))
    for bad in (ids.to_sparse(), ids.to(torch.float32), ids.view(1, 2), ids.to(torch.bool)):
        with pytest.raises(TypeError, match="block ids must be"):
            p.free(bad)
        with pytest.raises(TypeError, match="block ids must be"):
            p.free_and_alloc(bad, 1)
    with pytest.raises(TypeError):
        p.alloc(2, torch.empty(2, dtype=torch.int64).to_sparse())
    assert p.stats()["live_blocks"] == 2
    p.free(ids)
    p.validate()


@pytest.mark.parametrize("dtype,itemsize", [(torch.int64, 8), (torch.int32, 4)])
def test_ids_in_a_view_at_an_offset_are_read_and_written_in_place(dtype, itemsize):
    # out and ids are contiguous slices of a bigger buffer: the ids go at the
    # view's own offset, and nothing around it is touched.
    p = pool_of(64)
    buf = torch.full((40,), -7, dtype=dtype)
    view = buf[10:26]
    assert view.storage_offset() == 10
    p.alloc(16, view)
    assert view.tolist() == list(range(16))
    assert buf[:10].tolist() == [-7] * 10 and buf[26:].tolist() == [-7] * 14
    p.free_and_alloc(view[4:8], 4, view[4:8])  # in place, at offset 14
    assert view.tolist() == list(range(16))
    p.free(view)
    assert p.free_blocks == 64
    p.validate()


def test_an_empty_out_tensor_takes_nothing():
    p = pool_of(8)
    out = torch.empty(0, dtype=torch.int64)
    assert p.alloc(0, out) is out
    assert p.free_and_alloc(out, 0, out) is out
    assert p.free_blocks == 8
    p.validate()
