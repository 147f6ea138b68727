"""unipool.empty and friends: CPU tensors from the host pool."""
import gc

import pytest
import torch

import unipool
from unipool import _testing


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16, torch.int8, torch.int64,
                                   torch.bool, torch.complex64])
@pytest.mark.parametrize("shape", [(0,), (1,), (7, 3), (2, 3, 5, 7), (1 << 20,)])
def test_shapes_and_dtypes(shape, dtype):
    t = unipool.empty(shape, dtype=dtype)
    assert t.shape == torch.Size(shape) and t.dtype == dtype and t.device.type == "cpu"
    assert t.is_contiguous()
    if t.numel():
        assert _testing.host_owns(t.data_ptr())
        t.fill_(1)
        assert bool((t == 1).all())


def test_varargs_shape_and_friends():
    assert unipool.empty(2, 3, dtype=torch.float32).shape == (2, 3)
    assert bool((unipool.zeros(4, 5) == 0).all())
    assert bool((unipool.ones(3, dtype=torch.int32) == 1).all())
    assert bool((unipool.full((2, 2), 7.5) == 7.5).all())
    src = torch.randn(3, 4, dtype=torch.float64)
    like = unipool.empty_like(src)
    assert like.shape == src.shape and like.dtype == src.dtype


def test_memory_returns_when_the_last_view_dies():
    gc.collect()
    before = unipool.host_stats()["allocated_bytes"]
    t = unipool.empty(1 << 20, dtype=torch.float32)  # 4 MiB: an exact-size large block
    during = unipool.host_stats()["allocated_bytes"]
    assert during - before >= 4 << 20
    view = t[10:20].view(2, 5)
    ptr = t.data_ptr()
    del t
    assert _testing.host_owns(ptr), "a view still lives: the block must too"
    view.fill_(3)
    del view
    gc.collect()
    assert not _testing.host_owns(ptr)
    assert unipool.host_stats()["allocated_bytes"] == before
    unipool.host_validate()


def test_contents_survive_and_stats_count():
    ts = [unipool.empty(n, dtype=torch.int32) for n in (1, 100, 5000, 300000)]
    for i, t in enumerate(ts):
        t.copy_(torch.arange(t.numel(), dtype=torch.int32) + i)
    for i, t in enumerate(ts):
        assert torch.equal(t, torch.arange(t.numel(), dtype=torch.int32) + i)
    s = unipool.host_stats()
    assert s["requested_bytes"] >= sum(t.numel() * 4 for t in ts)
    assert s["misuse_errors"] == 0
    del ts
    unipool.host_validate()


def test_bad_arguments_raise():
    with pytest.raises(ValueError, match="sizes must be >= 0"):
        unipool.empty((2, -1), dtype=torch.float32)
    with pytest.raises(ValueError, match="negative dimension"):
        unipool._C.empty([2, -1], torch.float32)
    # Sizes whose product wraps would have handed out a small block.
    with pytest.raises(OverflowError, match="below 2"):
        unipool.empty(2**64)
    with pytest.raises(OverflowError, match="overflows"):
        unipool.empty(2**40, 2**40)
    with pytest.raises(OverflowError, match="overflows 64 bits"):
        unipool.empty(2**62, dtype=torch.float64)
    with pytest.raises(TypeError, match="must be a torch.Tensor"):
        unipool.empty_like([1, 2])
    with pytest.raises(TypeError):
        unipool._C.empty([2], "float32")
