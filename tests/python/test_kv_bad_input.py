"""unipool.KVBlockPool: bad input is refused with a clear error before
anything is built."""
import pytest
import torch

from unipool import KVBlockPool, _C


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
