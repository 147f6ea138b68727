"""unipool.KVBlockPool and unipool.empty: bad input is refused with a clear
error before anything is built, copied or handed out."""
import pytest
import torch

import unipool
from unipool import KVBlockPool, _C


def small_pool(num_blocks=8):
    return KVBlockPool(block_shape=(2, 4, 16), dtype=torch.float16, num_blocks=num_blocks, pinned=False)


@pytest.mark.parametrize("kwargs, name", [
    (dict(block_bytes=4096, num_blocks=2**64 + 4), "num_blocks"),
    (dict(block_bytes=2**70, num_blocks=4), "block_bytes"),
    (dict(block_bytes=2**64 + 4096, num_blocks=4), "block_bytes"),
    (dict(block_bytes=2**64 - 1, num_blocks=1), "block_bytes"),
    (dict(block_bytes=-4096, num_blocks=4), "block_bytes"),
    (dict(block_bytes=4096, num_blocks=-1), "num_blocks"),
    (dict(block_bytes=4096, num_blocks=4, alignment=2**64 + 256), "alignment"),
    (dict(block_shape=(2**40, 2**40), dtype=torch.float16, num_blocks=4), "block_bytes"),
    (dict(block_shape=(-1, -4), dtype=torch.float16, num_blocks=4), "block_shape"),
])
def test_sizes_that_do_not_fit_are_refused_before_anything_is_built(kwargs, name, monkeypatch):
    built = []
    monkeypatch.setattr(_C, "_kv_arena", lambda *a: built.append(a))
    with pytest.raises((ValueError, OverflowError), match=name) as e:
        KVBlockPool(pinned=False, **kwargs)
    assert "must be > 0" not in str(e.value), "a size taken modulo 2^64"
    assert not built, "the pool was built before the sizes were refused"


@pytest.mark.parametrize("kwargs", [dict(block_bytes=4096.0, num_blocks=4), dict(block_bytes=4096, num_blocks=4.5),
                                    dict(block_shape=(2, 1.5), dtype=torch.float16, num_blocks=4)])
def test_sizes_must_be_integers(kwargs):
    with pytest.raises(TypeError):
        KVBlockPool(pinned=False, **kwargs)


def test_copies_refuse_ids_that_are_not_allocated():
    p = small_pool()
    ids = p.alloc(4)
    for i, b in enumerate(ids):
        p.view(b).fill_(i + 1)
    p.free(ids[2:])
    staging = torch.full((4, 2, 4, 16), -1.0, dtype=torch.float16)
    with pytest.raises(ValueError, match=f"block {ids[2]} is not allocated"):
        p.copy_to_device(ids, staging)
    assert bool((staging == -1).all()), "a refused copy copied something"
    with pytest.raises(ValueError, match="not allocated"):
        p.copy_from_device(ids, staging)
    assert bool((p.view(ids[0]) == 1).all()) and bool((p.view(ids[1]) == 2).all())
    never = max(ids) + 1
    with pytest.raises(ValueError, match="not allocated"):
        p.copy_from_device([never], staging)
    with pytest.raises(IndexError):
        p.copy_to_device([-1], staging)
    p.copy_to_device(ids[:2], staging)  # the live ones still copy
    assert bool((staging[1] == 2).all())
    p.validate()


def test_view_refuses_ids_out_of_range():
    p = small_pool(num_blocks=8)
    for bad in (-1, 8, 2**70):
        with pytest.raises(IndexError, match="out of range"):
            p.view(bad)
    with pytest.raises(IndexError):
        p.view([0, -1])
    with pytest.raises(IndexError):
        p.view(torch.tensor([3, 8]))
    with pytest.raises(TypeError):
        p.view(1.5)
    assert p.view(7).data_ptr() == p.blocks[7].data_ptr()
    assert p.view(torch.tensor(7)).data_ptr() == p.blocks[7].data_ptr()


@pytest.mark.parametrize("make", [lambda: unipool.empty(1.5), lambda: unipool.empty(2, 1.5),
                                  lambda: unipool.zeros((2.0, 3)), lambda: unipool.ones([1.5]),
                                  lambda: unipool.full((2.5,), 0.0)])
def test_host_tensor_sizes_must_be_integers(make):
    with pytest.raises(TypeError):
        make()


def test_host_tensor_sizes_of_integer_kinds_still_work():
    assert unipool.empty(3).shape == (3,)
    assert unipool.zeros(2, 3).shape == (2, 3)
    assert unipool.ones(torch.Size([2, 2])).shape == (2, 2)
    assert unipool.full([torch.tensor(4)], 7.0).shape == (4,)


@pytest.mark.parametrize("n", [9, 2**40, 2**62])
def test_more_blocks_than_the_pool_has_is_exhaustion_not_a_crash(n):
    # alloc(2**40) used to size a list of 2**40 ids first: std::bad_alloc
    # through the C extension ended the process.
    p = small_pool(num_blocks=8)
    with pytest.raises(unipool.KVPoolExhaustedError, match=f"{n} blocks asked, 8 free"):
        p.alloc(n)
    live = p.alloc(2)
    with pytest.raises(unipool.KVPoolExhaustedError, match="blocks asked"):
        p.free_and_alloc(live, n)
    assert p.free_blocks == 6
    p.validate()


@pytest.mark.parametrize("call, error, text", [
    (lambda p: p.alloc(1.5), TypeError, "n must be an int"),
    (lambda p: p.alloc(2**70), OverflowError, "n=.* is out of range"),
    (lambda p: p.free_and_alloc([], "2"), TypeError, "n must be an int"),
    (lambda p: p.free([0.5]), TypeError, "block ids must be ints"),
    (lambda p: p.free([2**70]), OverflowError, "block ids"),
    (lambda p: p.free("ab"), TypeError, "block ids must be a tensor, a list or a tuple"),
    (lambda p: p.free_after([0], "stream"), TypeError, "stream must be a torch.cuda.Stream"),
    (lambda p: p.copy_to_device([0], "tensor"), TypeError, "device_tensor must be a torch.Tensor"),
    (lambda p: KVBlockPool(block_shape=(4,), dtype="float16", num_blocks=4, pinned=False), TypeError,
     "dtype must be a torch.dtype"),
])
def test_bad_arguments_name_themselves(call, error, text):
    p = small_pool()
    p.alloc(1)
    with pytest.raises(error, match=text):
        call(p)
    assert p.free_blocks == 7
