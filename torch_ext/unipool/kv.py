"""The KV-cache offload block pool: one large host arena (pinned where a GPU
is present) cut into uniform blocks, handed out by id (docs/kv_offload.md)."""
from __future__ import annotations

import math
import operator
from typing import Optional, Sequence, Union

import torch

from . import _C

Ids = Union[torch.Tensor, Sequence[int]]


def _int_arg(name: str, value) -> int:
    # operator.index, not int(): int(4.5) is 4, a size nobody asked for.
    try:
        return operator.index(value)
    except TypeError:
        raise TypeError(f"KVBlockPool: {name} must be an int, got {type(value).__name__} {value!r}") from None


def _block_layout(who: str, block_bytes, block_shape, dtype):
    """(block_bytes, block_shape, dtype) from either block_bytes (uint8
    blocks) or block_shape and dtype, checked."""
    if dtype is not None and not isinstance(dtype, torch.dtype):
        raise TypeError(f"{who}: dtype must be a torch.dtype, got {type(dtype).__name__} {dtype!r}")
    if block_shape is not None:
        if dtype is None:
            raise TypeError(f"{who}: block_shape needs a dtype")
        shape = tuple(_int_arg("block_shape", d) for d in block_shape)
        if any(d < 1 for d in shape):  # (-1, -4) would pass as 4 elements
            raise ValueError(f"{who}: block_shape dimensions must be >= 1, got {shape}")
        nbytes = math.prod(shape) * torch.empty((), dtype=dtype).element_size()
        if block_bytes is not None and block_bytes != nbytes:
            raise ValueError(f"{who}: block_bytes={block_bytes} but block_shape x dtype is {nbytes} bytes")
        return nbytes, shape, dtype
    if block_bytes is None:
        raise TypeError(f"{who}: give block_bytes, or block_shape and dtype")
    if dtype is not None and dtype != torch.uint8:
        raise ValueError(f"{who}: dtype without block_shape; give block_shape too")
    nbytes = _int_arg("block_bytes", block_bytes)
    return nbytes, (nbytes,), torch.uint8


def _check_stream(call: str, stream) -> None:
    # A stream's device and handle are read from it: anything else would
    # raise AttributeError, naming neither the call nor the argument.
    if stream is not None and not isinstance(stream, torch.cuda.Stream):
        raise TypeError(f"KVBlockPool.{call}: stream must be a torch.cuda.Stream or None, "
                        f"got {type(stream).__name__}")


class KVBlockPool(_C._KVCore):
    """``KVBlockPool(block_bytes=..., num_blocks=..., *, pinned=None, numa_node=None)``
    or ``KVBlockPool(block_shape=..., dtype=..., num_blocks=...)``.

    pinned: None pins where a CUDA device is present, True requires pinning,
    False keeps the arena pageable. numa_node binds the arena to a node.

    alloc(n[, out]) -> ids (a list, or `out`, a 1-D int64/int32 tensor, filled)
    free(ids); free_and_alloc(ids, n[, out]) (free, then allocate, one call;
    `out` may be `ids`); free_after(ids, stream); view(id) / view(ids); blocks
    (the whole arena as one tensor); copy_to_device / copy_from_device;
    stats(); validate(); is_live(id) / is_live(ids) (every id handed out and
    not freed). Ids are handed out lowest free first.
    Exhaustion raises KVPoolExhaustedError (a MemoryError); a double free,
    an id out of range or repeated in a batch raise KVDoubleFreeError (a
    ValueError) and free nothing; a refused free_and_alloc frees nothing.
    Sizes must be ints: a float raises TypeError, one out of 0 .. 2^64-1
    OverflowError and one too large for an arena ValueError, each naming
    the argument, before anything is built. view() and the copies refuse
    ids out of range (IndexError; -1 is not the last block); the copies
    also refuse ids not allocated (ValueError) and then copy nothing.
    """

    def __init__(self, block_bytes: Optional[int] = None, num_blocks: Optional[int] = None, *,
                 block_shape: Optional[Sequence[int]] = None, dtype: Optional[torch.dtype] = None,
                 pinned: Optional[bool] = None, numa_node: Optional[int] = None, alignment: int = 256):
        if num_blocks is None:
            raise TypeError("KVBlockPool: num_blocks is required")
        block_bytes, shape, dtype = _block_layout("KVBlockPool", block_bytes, block_shape, dtype)
        # _init refuses sizes out of range before it builds anything.
        self._init(block_bytes, _int_arg("num_blocks", num_blocks),
                   -1 if pinned is None else int(bool(pinned)),
                   -1 if numa_node is None else _int_arg("numa_node", numa_node), _int_arg("alignment", alignment))
        self._view_arena(shape, dtype)

    def _view_arena(self, shape, dtype) -> None:
        self.block_shape = shape
        self.dtype = dtype
        # The whole arena, [num_blocks, *block_shape]: zero-copy; it and its
        # views keep the arena alive after the pool object is gone.
        self.blocks = _C._kv_arena(self, list(shape), dtype)

    def view(self, ids: Union[int, Ids]):
        """A block as a tensor of block_shape (a view into the arena), or a
        list of such views for several ids. An id out of range raises
        IndexError (-1 is not the last block)."""
        if isinstance(ids, torch.Tensor):
            ids = ids.tolist()  # a 0-d tensor gives one int
        if hasattr(ids, "__iter__"):
            return [self.blocks[self._block_id(i)] for i in ids]
        return self.blocks[self._block_id(ids)]

    def _block_id(self, i) -> int:
        # Checked here, not by indexing `blocks`: a tensor counts -1 from the
        # end and would hand out the last block.
        try:
            i = operator.index(i)
        except TypeError:
            raise TypeError(f"KVBlockPool: a block id must be an int, got {type(i).__name__}") from None
        if not 0 <= i < self.num_blocks:
            raise IndexError(f"KVBlockPool: block id {i} out of range (pool of {self.num_blocks} blocks)")
        return i

    def free_after(self, ids: Ids, stream=None) -> None:
        """Frees `ids` once the work queued so far on `stream` (a
        torch.cuda.Stream; default: the current stream) is done, so an async
        copy out of them can still read them. Without CUDA: freed at once
        (the copies were synchronous)."""
        if stream is None and torch.cuda.is_available() and torch.cuda.is_initialized():
            stream = torch.cuda.current_stream()
        _check_stream("free_after", stream)
        if stream is None:
            self.free(ids)
            return
        _C._kv_free_after(self, ids, int(stream.device.index or 0), int(stream.cuda_stream))

    def copy_to_device(self, ids: Ids, device_tensor: torch.Tensor, stream=None, *, dst: Optional[Ids] = None,
                       non_blocking: bool = True) -> None:
        """device_tensor[dst[i]] = block ids[i] (dst defaults to 0..n-1), in
        as few copies as runs of consecutive ids allow, on `stream`. On a CPU
        tensor the same call copies host to host."""
        self._copy(ids, device_tensor, stream, dst, True, non_blocking)

    def copy_from_device(self, ids: Ids, device_tensor: torch.Tensor, stream=None, *, src: Optional[Ids] = None,
                         non_blocking: bool = True) -> None:
        """block ids[i] = device_tensor[src[i]] (src defaults to 0..n-1)."""
        self._copy(ids, device_tensor, stream, src, False, non_blocking)

    def _copy(self, ids, other, stream, slots, to_device, non_blocking):
        name = "copy_to_device" if to_device else "copy_from_device"
        if not isinstance(other, torch.Tensor):
            raise TypeError(f"KVBlockPool.{name}: device_tensor must be a torch.Tensor, got {type(other).__name__}")
        _check_stream(name, stream)
        if other.device.type == "cuda" and stream is not None:
            with torch.cuda.stream(stream):
                _C._kv_copy(self, self.blocks, ids, other, slots, to_device, non_blocking)
        else:
            _C._kv_copy(self, self.blocks, ids, other, slots, to_device, non_blocking and other.device.type != "cpu")

    def __repr__(self) -> str:
        return (f"KVBlockPool(num_blocks={self.num_blocks}, block_shape={self.block_shape}, dtype={self.dtype}, "
                f"free={self.free_blocks}, {self.pinning_state})")
