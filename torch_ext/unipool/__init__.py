"""unipool: a memory pool for LLM inference runtimes, for PyTorch.

- ``unipool.torch.install()``: unipool as torch's CUDA allocator and pinned
  host allocator (docs/pytorch.md).
- ``unipool.library_path()``: libunipool for ``CUDAPluggableAllocator``.
- ``unipool.empty / zeros / ones / full``: CPU tensors from the host pool.
- ``unipool.KVBlockPool``: the KV-cache offload block pool (docs/kv_offload.md).
- ``unipool.SharedKVBlockPool``: one such pool for the processes of a node,
  safe against any of them being killed (docs/kv_offload.md).
- ``unipool.nixl``: pools registered with NIXL, KV blocks moved between
  processes (docs/transfer.md; needs `pip install nixl`).
"""
from __future__ import annotations

import json as _json
import operator as _operator
import os as _os

import torch as _torch  # loads libtorch before the extension

from . import _C
from ._C import (KVDoubleFreeError, KVPoolExhaustedError, host_reset_peak_stats, host_stats, host_trim,
                 host_validate)
from .kv import KVBlockPool
from .shared_kv import SharedKVBlockPool

__all__ = ["KVBlockPool", "SharedKVBlockPool", "KVPoolExhaustedError", "KVDoubleFreeError", "empty", "zeros", "ones", "full",
           "empty_like", "host_stats", "host_reset_peak_stats", "host_trim", "host_validate", "host_record_history",
           "host_history", "library_path"]
__version__ = "0.1.0"


def _shape(size) -> list[int]:
    if len(size) == 1 and isinstance(size[0], (tuple, list, _torch.Size)):
        size = size[0]
    shape = [_dim(d) for d in size]
    if any(d < 0 for d in shape):
        raise ValueError(f"unipool: tensor sizes must be >= 0, got size {tuple(shape)}")
    if any(d >= 2**63 for d in shape):  # the extension takes int64 (and checks their product)
        raise OverflowError(f"unipool: tensor sizes must be below 2^63, got size {tuple(shape)}")
    return shape


def _dim(d) -> int:
    # operator.index, not int(): int(1.5) is 1, a size nobody asked for.
    try:
        return _operator.index(d)
    except TypeError:
        raise TypeError(f"unipool: tensor sizes must be ints, got {type(d).__name__} {d!r}") from None


def empty(*size, dtype: _torch.dtype | None = None) -> _torch.Tensor:
    """A CPU tensor whose memory comes from unipool's host pool; the memory
    goes back to the pool when the last tensor or view of it dies."""
    return _C.empty(_shape(size), dtype or _torch.get_default_dtype())


def zeros(*size, dtype: _torch.dtype | None = None) -> _torch.Tensor:
    return empty(*size, dtype=dtype).zero_()


def ones(*size, dtype: _torch.dtype | None = None) -> _torch.Tensor:
    return empty(*size, dtype=dtype).fill_(1)


def full(size, fill_value, *, dtype: _torch.dtype | None = None) -> _torch.Tensor:
    return empty(size, dtype=dtype).fill_(fill_value)


def empty_like(t: _torch.Tensor) -> _torch.Tensor:
    if not isinstance(t, _torch.Tensor):
        raise TypeError(f"unipool.empty_like: t must be a torch.Tensor, got {type(t).__name__}")
    return empty(list(t.shape), dtype=t.dtype)


def library_path() -> str:
    """libunipool.so in this package: pass it to
    torch.cuda.memory.CUDAPluggableAllocator(path, "unipool_alloc", "unipool_free")."""
    here = _os.path.dirname(__file__)
    for name in sorted(_os.listdir(here)):
        if name.startswith("libunipool.so"):
            return _os.path.join(here, name)
    raise FileNotFoundError(f"libunipool.so is not in {here}")


def host_record_history(max_entries: int | None = 100_000) -> None:
    """From now on the host pool keeps its last ``max_entries`` alloc, free and
    pinning events (what was recorded before is dropped); ``None`` or 0 stops
    recording and drops the history. Off by default."""
    try:
        n = 0 if max_entries is None else _operator.index(max_entries)
    except TypeError:
        raise TypeError(f"unipool.host_record_history: max_entries must be an int or None, "
                        f"got {type(max_entries).__name__} {max_entries!r}") from None
    if n < 0:
        raise ValueError(f"unipool.host_record_history: max_entries must be >= 0 or None, got {n}")
    if n >= 2**64:  # the extension takes a size_t
        raise OverflowError(f"unipool.host_record_history: max_entries={n} is out of range (0 .. 2^64-1)")
    _C._host_record_history(n)


def host_history() -> list[dict]:
    """The host pool's recorded events, oldest first: dicts with ``action``
    ("alloc", "free", "pin", "unpin", "pin_failed"), ``address``, ``size``
    (bytes asked for by an alloc, usable bytes of a freed block, bytes of a
    pinned range, 0 for an unpin) and ``time_ns`` (since the epoch)."""
    return _json.loads(_C._host_history_json())["entries"]


def __getattr__(name: str):
    # unipool.nixl imports NIXL, an optional dependency: loaded on first use,
    # so `import unipool` works without it.
    if name == "nixl":
        import importlib
        return importlib.import_module(".nixl", __name__)
    raise AttributeError(f"module 'unipool' has no attribute {name!r}")
