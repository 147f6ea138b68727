"""One KV block pool for the processes of a node, which survives any of them
being killed (docs/kv_offload.md#one-pool-for-the-processes-of-a-node)."""
from __future__ import annotations

from typing import Optional, Sequence

import torch

from . import _C
from .kv import Ids, KVBlockPool, _block_layout, _int_arg


def _name_arg(name) -> str:
    if not isinstance(name, str):
        raise TypeError(f"SharedKVBlockPool: name must be a str, got {type(name).__name__}")
    return name


class SharedKVBlockPool(KVBlockPool):
    """``SharedKVBlockPool.create(name, block_bytes=..., num_blocks=..., *, pinned=None,
    numa_node=None, lifetime="while_attached", max_members=64)`` in one process,
    ``SharedKVBlockPool.attach(name)`` in the others (block_shape and dtype
    as for KVBlockPool, in each process).

    Everything KVBlockPool does, with the same ids and checks, on one memfd
    every member maps (nothing is left in /dev/shm, whatever happens).
    Blocks belong to the process that allocated them; a process that dies,
    SIGKILL included, never blocks the others, and its blocks are reclaimed
    (reclaim_dead(), or the next shortage). hand_over(ids, pid) and the
    receiver's take_over(ids) move blocks between processes; until taken
    they stay the giver's. lifetime="creator" closes the pool when its
    creator exits; the default keeps it while any member is attached.

    attach() refuses, with RuntimeError, a name nobody serves and a pool of
    another layout (block_bytes or num_blocks, when given) or version.
    """

    def __init__(self, *args, **kwargs):
        raise TypeError("SharedKVBlockPool: use SharedKVBlockPool.create(name, ...) or SharedKVBlockPool.attach(name)")

    @classmethod
    def create(cls, name: str, block_bytes: Optional[int] = None, num_blocks: Optional[int] = None, *,
               block_shape: Optional[Sequence[int]] = None, dtype: Optional[torch.dtype] = None,
               pinned: Optional[bool] = None, numa_node: Optional[int] = None, alignment: int = 256,
               lifetime: str = "while_attached", max_members: int = 64) -> "SharedKVBlockPool":
        name = _name_arg(name)
        if num_blocks is None:
            raise TypeError("SharedKVBlockPool: num_blocks is required")
        block_bytes, shape, dtype = _block_layout("SharedKVBlockPool", block_bytes, block_shape, dtype)
        self = cls.__new__(cls)
        _C._kv_create_shared(self, name, block_bytes, _int_arg("num_blocks", num_blocks),
                             -1 if pinned is None else int(bool(pinned)),
                             -1 if numa_node is None else _int_arg("numa_node", numa_node),
                             _int_arg("alignment", alignment), lifetime, _int_arg("max_members", max_members))
        self._view_arena(shape, dtype)
        return self

    @classmethod
    def attach(cls, name: str, *, block_shape: Optional[Sequence[int]] = None, dtype: Optional[torch.dtype] = None,
               block_bytes: Optional[int] = None, num_blocks: Optional[int] = None,
               pinned: Optional[bool] = None) -> "SharedKVBlockPool":
        name = _name_arg(name)
        expected = None
        if block_shape is not None or block_bytes is not None:
            expected, shape, dtype = _block_layout("SharedKVBlockPool", block_bytes, block_shape, dtype)
        self = cls.__new__(cls)
        _C._kv_attach_shared(self, name, -1 if pinned is None else int(bool(pinned)), expected or 0,
                             0 if num_blocks is None else _int_arg("num_blocks", num_blocks))
        if expected is None:
            shape, dtype = (self.block_bytes,), torch.uint8
        self._view_arena(shape, dtype)
        return self

    @property
    def name(self) -> str:
        return _C._kv_shared_name(self)

    def hand_over(self, ids: Ids, to_pid: int) -> None:
        """Hands blocks this process owns to the member process `to_pid`;
        they stay this process's until it calls take_over(ids). A block not
        live, not this process's, already handed over or repeated raises
        KVDoubleFreeError; a pid that is not a member ValueError. Nothing
        moves then."""
        _C._kv_hand_over(self, ids, _int_arg("to_pid", to_pid))

    def take_over(self, ids: Ids) -> None:
        """Makes blocks handed to this process its own. An id not in transit
        to it (never handed, taken already, or freed because its giver died)
        raises KVDoubleFreeError, and nothing moves."""
        _C._kv_take_over(self, ids)

    def handed_to_me(self) -> list:
        """The blocks in transit to this process, lowest first."""
        return _C._kv_handed_to_me(self)

    def reclaim_dead(self) -> int:
        """Frees the blocks of members that died; returns how many."""
        return _C._kv_reclaim_dead(self)

    def owner_of(self, block_id: int) -> int:
        """The pid owning the block (0 when free)."""
        return _C._kv_owner_of(self, self._block_id(block_id))

    def member_pids(self) -> list:
        """The pids attached."""
        return _C._kv_member_pids(self)

    @property
    def closed(self) -> bool:
        """Whether the pool closed (lifetime="creator" and its creator is gone)."""
        return _C._kv_closed(self)

    def stats(self) -> dict:
        """KVBlockPool's counters, and transit_blocks, reclaimed_blocks,
        owned_blocks (this process's), members, dead_members, recoveries."""
        s = super().stats()
        s.update(_C._kv_shared_stats(self))
        return s

    def __repr__(self) -> str:
        return (f"SharedKVBlockPool({self.name!r}, num_blocks={self.num_blocks}, block_shape={self.block_shape}, "
                f"dtype={self.dtype}, free={self.free_blocks}, {self.pinning_state})")
