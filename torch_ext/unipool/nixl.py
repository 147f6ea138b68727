"""unipool's pools registered with NIXL, and KV blocks moved between
processes by NIXL (docs/transfer.md).

- ``RegionCache``: memory chunks registered with a NIXL agent when they are
  mapped and deregistered before they are unmapped (``on_map`` /
  ``before_unmap``, the shape of unipool's segment hooks), split so that no
  region passes ``max_region_bytes``, with an O(1) address -> (region,
  offset) lookup.
- ``KVAgent``: a NIXL agent attached to a ``unipool.KVBlockPool``: its arena
  registered in regions of at most ``max_region_bytes``, one prepared
  descriptor per block, so a transfer of a list of block ids is an index
  array; metadata to hand to a peer; WRITE and READ of block lists with
  notifications; book-keeping that refuses freed blocks before posting.

- ``HostAgent``: a NIXL agent attached to unipool's pinned host pool: each
  piece the pool pins registered once (HostPool's region hooks, applied at
  sync()), host tensors cut into rows inside regions, WRITE and READ.

NIXL (PyPI ``nixl``) is imported when this module is; its C++ headers are
not in the wheel, so there is no C++ face of this module: a C++ runtime
registers from the pools' hooks with its own NIXL build.
"""
from __future__ import annotations

import json
import numbers
import threading
import time
from collections import deque
from typing import Optional, Sequence, Union

import numpy as np
import torch

try:
    from nixl._api import nixl_agent, nixl_agent_config
except ImportError as e:  # the module is optional; say what to install
    raise ImportError(f"unipool.nixl needs NIXL: pip install nixl ({e})") from e

from .kv import KVBlockPool

__all__ = ["NixlError", "PeerLostError", "RegionCache", "HostAgent", "DeviceAgent", "KVAgent", "KVPeer", "Transfer", "make_agent",
           "DEFAULT_MAX_REGION"]

DEFAULT_MAX_REGION = 4 << 30  # NIXL/UCX throughput falls beyond 4 GiB per region
_GRANULE_SHIFT = 21           # the range cache's index: one entry per 2 MiB of a region
Ids = Union[torch.Tensor, np.ndarray, Sequence[int]]


class NixlError(RuntimeError):
    """A NIXL call failed; the message carries NIXL's."""


class PeerLostError(NixlError):
    """A transfer failed or did not complete in time: the peer is gone or
    unreachable. The transfer's handle is released; registrations stay
    owned by their KVAgent / RegionCache and go with close()."""


def _nixl_call(what: str, fn, *args, **kwargs):
    # NIXL raises its own exception types (nixlBind errors, RuntimeError,
    # ValueError) with its message: kept in ours, which names the step.
    try:
        return fn(*args, **kwargs)
    except Exception as e:  # noqa: BLE001 - every NIXL failure is reported the same way
        raise NixlError(f"unipool.nixl: {what} failed: {type(e).__name__}: {e}") from e


def _lost_or(e: NixlError) -> NixlError:
    # NIXL says a peer vanished with NIXL_ERR_REMOTE_DISCONNECT: that is a
    # lost peer for the caller, whichever call noticed it.
    if "DISCONNECT" in str(e).upper():
        return PeerLostError(f"{e} (the peer is gone or unreachable)")
    return e


def _as_ids(ids: Ids, what: str) -> np.ndarray:
    if isinstance(ids, torch.Tensor):
        ids = ids.numpy() if ids.device.type == "cpu" else ids.cpu().numpy()
    arr = np.asarray(ids)
    if arr.ndim != 1 or (arr.size and arr.dtype.kind not in "iu"):
        raise TypeError(f"unipool.nixl: {what} must be a 1-D list, array or tensor of ints")
    return arr.astype(np.int64, copy=False)


def _seconds(timeout, what: str) -> float:
    # NaN would never be passed (a wait with no end); a str fails in the
    # arithmetic with a message that names no argument.
    if isinstance(timeout, bool) or not isinstance(timeout, numbers.Real):
        raise TypeError(f"unipool.nixl: {what}: timeout must be a number of seconds, got {type(timeout).__name__}")
    if not timeout >= 0:
        raise ValueError(f"unipool.nixl: {what}: timeout must be >= 0 seconds, got {timeout}")
    return float(timeout)


def make_agent(name: str, *, backends: Sequence[str] = ("UCX",)) -> "nixl_agent":
    """A NIXL agent with `backends`; a backend NIXL cannot create is an error
    here (NIXL itself only warns and goes on without it)."""
    agent = _nixl_call(f"creating agent {name!r}", nixl_agent, name, nixl_agent_config(backends=list(backends)))
    missing = [b for b in backends if b not in agent.backends]
    if missing:
        raise NixlError(f"unipool.nixl: agent {name!r}: backend(s) {missing} unavailable "
                        f"(NIXL plugins found: {agent.get_plugin_list()})")
    return agent


class RegionCache:
    """Chunks of memory registered with a NIXL agent, one registration per
    region, and an O(1) address -> (region, offset) lookup.

    on_map(address, nbytes, device=0) registers a chunk just mapped, cut into
    regions of at most max_region_bytes; before_unmap(address) deregisters
    the chunk that starts there. locate(address) finds the region holding a
    byte: a dict keyed by the 2 MiB granule, each entry holding the (at most
    a few) regions that touch it. registrations / deregistrations count the
    NIXL calls made, for the "one per chunk" book-keeping.
    """

    def __init__(self, agent, *, mem_type: str = "DRAM", max_region_bytes: int = DEFAULT_MAX_REGION):
        if mem_type not in ("DRAM", "VRAM"):
            raise ValueError(f"RegionCache: mem_type must be 'DRAM' or 'VRAM', got {mem_type!r}")
        if int(max_region_bytes) < 1:
            raise ValueError(f"RegionCache: max_region_bytes must be >= 1, got {max_region_bytes}")
        self.agent, self.mem_type, self.max_region_bytes = agent, mem_type, int(max_region_bytes)
        self.regions: list[Optional[tuple[int, int, int]]] = []  # (start, bytes, device); None once gone
        self._reg: list = []                                    # NIXL's descriptor list of each region
        self._chunks: dict[int, list[int]] = {}                 # chunk start -> its region indices
        self._granules: dict[int, list[int]] = {}
        self.registrations = 0
        self.deregistrations = 0

    def on_map(self, address: int, nbytes: int, device: int = 0, *, piece_bytes: Optional[int] = None) -> list[int]:
        """Registers [address, address + nbytes) in regions of at most
        max_region_bytes (or piece_bytes, which must not pass it); returns
        their indices. A chunk that overlaps one registered is refused."""
        address, nbytes = int(address), int(nbytes)
        piece = self.max_region_bytes if piece_bytes is None else int(piece_bytes)
        if address <= 0 or nbytes <= 0:
            raise ValueError(f"RegionCache.on_map: bad chunk (address={address:#x}, nbytes={nbytes})")
        if not 0 < piece <= self.max_region_bytes:
            raise ValueError(f"RegionCache.on_map: piece_bytes={piece} not in 1 .. {self.max_region_bytes}")
        if self._overlaps(address, nbytes):
            raise ValueError(f"RegionCache.on_map: chunk at {address:#x} overlaps a registered one")
        done: list[int] = []
        try:
            for start in range(address, address + nbytes, piece):
                done.append(self._register(start, min(piece, address + nbytes - start), device))
        except NixlError:
            for idx in done:  # all or nothing: no region of a refused chunk stays registered
                self._deregister(idx)
            raise
        self._chunks[address] = done
        return done

    def before_unmap(self, address: int) -> None:
        """Deregisters every region of the chunk that starts at `address`
        (all of them, even when NIXL refuses one: then the first refusal is
        raised after)."""
        idxs = self._chunks.pop(int(address), None)
        if idxs is None:
            raise KeyError(f"RegionCache.before_unmap: no chunk registered at {int(address):#x}")
        refused = None
        for idx in idxs:
            try:
                self._deregister(idx)
            except NixlError as e:
                refused = refused or e
        if refused is not None:
            raise refused

    def locate(self, address: int) -> tuple[int, int]:
        """(region index, offset in it) of the byte at `address`; KeyError
        when no registered region holds it."""
        idx = self._find(int(address))
        if idx is None:
            raise KeyError(f"RegionCache.locate: {int(address):#x} is in no registered region")
        return idx, int(address) - self.regions[idx][0]

    def close(self) -> None:
        """Deregisters every chunk still registered."""
        for address in list(self._chunks):
            self.before_unmap(address)

    @property
    def live_regions(self) -> int:
        return self.registrations - self.deregistrations

    def _overlaps(self, address: int, nbytes: int) -> bool:
        # Any region in a granule the chunk spans (a 4 GiB chunk: 2,048 lookups).
        for g in range(address >> _GRANULE_SHIFT, ((address + nbytes - 1) >> _GRANULE_SHIFT) + 1):
            for idx in self._granules.get(g, ()):
                start, size, _ = self.regions[idx]
                if start < address + nbytes and address < start + size:
                    return True
        return False

    def _find(self, address: int) -> Optional[int]:
        for idx in self._granules.get(address >> _GRANULE_SHIFT, ()):
            start, nbytes, _ = self.regions[idx]
            if start <= address < start + nbytes:
                return idx
        return None

    def _register(self, start: int, nbytes: int, device: int) -> int:
        desc = np.array([[start, nbytes, device]], dtype=np.uint64)
        reg = _nixl_call(f"registering {nbytes} bytes at {start:#x} ({self.mem_type})",
                         self.agent.register_memory, desc, self.mem_type)
        if reg is None:  # NIXL logs and returns None for descriptors it cannot build
            raise NixlError(f"unipool.nixl: registering {nbytes} bytes at {start:#x}: NIXL built no descriptor")
        self.registrations += 1
        idx = len(self.regions)
        self.regions.append((start, nbytes, device))
        self._reg.append(reg)
        for g in range(start >> _GRANULE_SHIFT, ((start + nbytes - 1) >> _GRANULE_SHIFT) + 1):
            self._granules.setdefault(g, []).append(idx)
        return idx

    def _deregister(self, idx: int) -> None:
        start, nbytes, _ = self.regions[idx]
        reg, self._reg[idx], self.regions[idx] = self._reg[idx], None, None
        for g in range(start >> _GRANULE_SHIFT, ((start + nbytes - 1) >> _GRANULE_SHIFT) + 1):
            entry = self._granules[g]
            entry.remove(idx)
            if not entry:
                del self._granules[g]
        self.deregistrations += 1  # counted even if NIXL refuses: the region is gone from our books
        _nixl_call(f"deregistering {nbytes} bytes at {start:#x}", self.agent.deregister_memory, reg)


def _span(t) -> tuple[int, int]:
    # A tensor's bytes, or an (address, nbytes) pair.
    if isinstance(t, torch.Tensor):
        if not t.is_contiguous():
            raise ValueError("unipool.nixl: a tensor to transfer must be contiguous")
        return t.data_ptr(), t.numel() * t.element_size()
    address, nbytes = t
    return int(address), int(nbytes)


def _paired(local: np.ndarray, remote: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Two Nx3 piece lists over the same number of bytes, cut at the union
    of their boundaries, so that row i of each has the same length and lies
    in one registered region of its side."""
    lc, rc = np.cumsum(local[:, 1]), np.cumsum(remote[:, 1])
    lbytes, rbytes = (int(lc[-1]) if lc.size else 0), (int(rc[-1]) if rc.size else 0)
    if lbytes == 0:
        raise ValueError("unipool.nixl: nothing to transfer (no bytes on the local side)")
    if lbytes != rbytes:
        raise ValueError(f"unipool.nixl: the local side has {lbytes} bytes and the remote side {rbytes}: "
                         f"a transfer moves the same bytes on both")
    ends = np.union1d(lc, rc)
    ends = ends[ends > 0]  # a zero-length row first would make a zero-length piece
    starts = np.concatenate((np.zeros(1, dtype=np.uint64), ends[:-1]))
    out = []
    for pieces, cum in ((local, lc), (remote, rc)):
        i = np.searchsorted(cum, starts, side="right")
        first = cum[i] - pieces[i, 1]  # where piece i starts in the byte stream
        rows = np.empty((starts.size, 3), dtype=np.uint64)
        rows[:, 0], rows[:, 1], rows[:, 2] = pieces[i, 0] + (starts - first), ends - starts, pieces[i, 2]
        out.append(rows)
    return out[0], out[1]


def _start(agent, handle, peer: str, n: int, op: str, what: str) -> "Transfer":
    xfer = Transfer(agent, handle, peer, n, op)
    try:
        state = _nixl_call(f"posting {what}", agent.transfer, handle)
    except NixlError as e:
        xfer._state = "ERR"
        xfer._release()
        raise _lost_or(e) from e.__cause__
    if state == "ERR":
        xfer._state = "ERR"
        xfer._release()
        raise PeerLostError(f"unipool.nixl: posting {what} failed (NIXL reported an error)")
    return xfer


class _PoolAgent:
    """What HostAgent and DeviceAgent share: a NIXL agent, a RegionCache fed
    by a journal of the pools' events (the extension's region_journal),
    rows inside regions, peers and transfers."""

    _kind = ""  # "host" / "device"

    def __init__(self, name: str, *, agent, max_region_bytes: int, backends: Sequence[str], mem_type: str):
        from . import _C

        self.agent = agent if agent is not None else make_agent(name, backends=backends)
        self.name = self.agent.name
        self.cache = RegionCache(self.agent, mem_type=mem_type, max_region_bytes=max_region_bytes)
        self.peers: set[str] = set()
        self._backlog: list = []  # events a failed sync() did not apply yet
        self._sync_lock = threading.Lock()
        self._attach, self._detach = getattr(_C, f"_{self._kind}_region_journal"), getattr(_C, f"_{self._kind}_region_detach")
        self._journal = self._attach()  # ValueError: nothing to report, or an agent attached already
        try:
            self.sync()
        except BaseException:
            self.close()
            raise

    def sync(self) -> int:
        """Registers the memory the pools mapped and deregisters what they
        unmapped since the last call; returns how many chunks were
        registered. On a failure the events not applied yet are kept for
        next time (what stays mapped of a chunk cut by an unmap included)."""
        with self._sync_lock:  # NIXL calls let the GIL go: two threads must not interleave batches
            pending = deque(self._backlog + self._journal.drain())
            self._backlog = []
            made = 0
            while pending:
                event = pending.popleft()
                mapped, address, nbytes, device = event
                try:
                    if mapped:
                        self.cache.on_map(address, nbytes, device)
                        made += 1
                    else:
                        leftovers, refused = self._unmapped(address, nbytes)
                        pending.extendleft(reversed(leftovers))
                        if refused is not None:
                            raise refused
                except BaseException:
                    self._backlog = ([event] if mapped else []) + list(pending)
                    raise
            return made

    def _unmapped(self, address: int, nbytes: int) -> tuple[list, Optional[NixlError]]:
        # Deregisters the chunks [address, +nbytes) touches. Returns what of
        # them stays mapped (the device pools give granules back in runs of
        # their own), as map events to apply next, and NIXL's first refusal.
        leftovers, refused = [], None
        for start in [c for c in self.cache._chunks if self._chunk_overlaps(c, address, nbytes)]:
            end = max(self.cache.regions[i][0] + self.cache.regions[i][1] for i in self.cache._chunks[start])
            device = self.cache.regions[self.cache._chunks[start][0]][2]
            leftovers += [(True, lo, hi - lo, device) for lo, hi in ((start, address), (address + nbytes, end)) if lo < hi]
            try:
                self.cache.before_unmap(start)
            except NixlError as e:
                refused = refused or e
        return leftovers, refused

    def _chunk_overlaps(self, start: int, address: int, nbytes: int) -> bool:
        return any(s < address + nbytes and address < s + n for s, n, _ in
                   (self.cache.regions[i] for i in self.cache._chunks[start]))

    def pieces(self, tensors) -> np.ndarray:
        """The tensors' bytes (or (address, nbytes) pairs'), in order, as an
        Nx3 uint64 array (address, bytes, device) whose rows each lie in one
        registered region. ValueError for memory the pools did not map."""
        self.sync()
        rows = []
        for t in tensors:
            address, nbytes = _span(t)
            end = address + nbytes
            while address < end:
                try:
                    idx, _ = self.cache.locate(address)
                except KeyError:
                    raise ValueError(f"{type(self).__name__}.pieces: {address:#x} is not in {self._memory}") from None
                start, size, device = self.cache.regions[idx]
                take = min(end, start + size) - address
                rows.append((address, take, device))
                address += take
        return np.array(rows, dtype=np.uint64).reshape(-1, 3)

    def metadata(self) -> bytes:
        """This agent's NIXL metadata, for the peer's connect()."""
        return self.agent.get_agent_metadata()

    def connect(self, metadata: bytes) -> str:
        """Adds the peer whose NIXL metadata this is; returns its name."""
        name = _nixl_call("adding a peer", self.agent.add_remote_agent, metadata)
        name = name.decode() if isinstance(name, bytes) else name
        self.peers.add(name)
        return name

    def disconnect(self, peer: str) -> None:
        """Forgets a peer; one not connected is left as it is."""
        if peer in self.peers:
            self.peers.discard(peer)
            _nixl_call(f"removing peer {peer!r}", self.agent.remove_remote_agent, peer)

    def write(self, tensors, peer: str, remote_pieces, notif: bytes = b"", remote_mem_type: str = "DRAM") -> Transfer:
        """Copies the tensors' bytes, in order, into the peer's rows."""
        return self._post("WRITE", tensors, peer, remote_pieces, notif, remote_mem_type)

    def read(self, tensors, peer: str, remote_pieces, notif: bytes = b"", remote_mem_type: str = "DRAM") -> Transfer:
        """Copies the peer's rows, in order, into the tensors."""
        return self._post("READ", tensors, peer, remote_pieces, notif, remote_mem_type)

    def _post(self, op: str, tensors, peer: str, remote_pieces, notif: bytes, remote_mem_type: str) -> Transfer:
        if peer not in self.peers:
            raise ValueError(f"{type(self).__name__}: peer {peer!r} is not connected")
        local, remote = _paired(self.pieces(tensors), np.asarray(remote_pieces, dtype=np.uint64).reshape(-1, 3))
        what = f"{op} of {int(local[:, 1].sum())} bytes with peer {peer!r}"
        try:
            handle = _nixl_call(f"preparing {what}", self.agent.initialize_xfer, op,
                                self.agent.get_xfer_descs(local, self.cache.mem_type),
                                self.agent.get_xfer_descs(remote, remote_mem_type), peer, notif)
        except NixlError as e:
            raise _lost_or(e) from e.__cause__
        return _start(self.agent, handle, peer, local.shape[0], op, what)

    def close(self) -> None:
        """Detaches from the pools, forgets the peers and deregisters every
        region. Idempotent."""
        journal, self._journal = getattr(self, "_journal", None), None
        if journal is not None:
            self._detach(journal)
        for peer in list(self.peers):
            self.disconnect(peer)
        self._backlog = []
        self.cache.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self):
        if getattr(self, "_journal", None) is not None:
            self._detach(self._journal)  # the pools stop queueing for an agent nobody holds

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r}, {self.cache.live_regions} regions, peers={sorted(self.peers)})"


class HostAgent(_PoolAgent):
    """A NIXL agent attached to unipool's pinned host pool: the memory of
    ``unipool.empty`` tensors, and of torch's pinned tensors once
    ``unipool.torch`` is installed.

    ``HostAgent(name, *, agent=None, max_region_bytes=4 GiB, backends=("UCX",))``

    Each piece the pool pins is registered once (``cache``, a RegionCache):
    the pieces pinned now at once, later ones at the next sync(), which
    also deregisters what the pool unpinned meanwhile. The pool's hooks only
    queue (they run where the pool pins, where Python cannot be called
    safely); every lookup syncs first, so none uses a stale registration.
    One HostAgent at a time: the pool reports to one; close() detaches.

    pieces(tensors) -> Nx3 (address, bytes, 0) rows, cut where regions end;
    metadata() / connect(metadata) -> peer name; write(tensors, peer,
    remote_pieces, notif) / read(...) -> Transfer, where remote_pieces are
    the peer's rows (its pieces(), or a KVAgent's descs()); sync(); close().
    """

    _kind = "host"
    _memory = "the host pool's pinned memory (use unipool.empty, or pinned tensors with unipool.torch installed)"

    def __init__(self, name: str, *, agent=None, max_region_bytes: int = DEFAULT_MAX_REGION,
                 backends: Sequence[str] = ("UCX",)):
        super().__init__(name, agent=agent, max_region_bytes=max_region_bytes, backends=backends, mem_type="DRAM")


class DeviceAgent(_PoolAgent):
    """A NIXL agent attached to unipool's CUDA allocator (``unipool.torch``
    installed): every segment of its device pools, default and private
    (CUDA graph pools, MemPools), registered as it is mapped, in regions of
    at most max_region_bytes, and deregistered once unmapped (at sync()).
    Expandable segments map and unmap granule runs: a run unmapped out of a
    registered chunk deregisters it and registers what stays mapped.

    ``DeviceAgent(name, *, agent=None, max_region_bytes=4 GiB, backends=("UCX",), mem_type="VRAM")``

    mem_type="DRAM" registers the segments as host memory: only right on the
    null GPU, whose device memory is host memory (the tests use it there,
    since UCX refuses it as VRAM). Otherwise as HostAgent.
    """

    _kind = "device"
    _memory = "a segment of unipool's device pools (is unipool.torch installed?)"

    def __init__(self, name: str, *, agent=None, max_region_bytes: int = DEFAULT_MAX_REGION,
                 backends: Sequence[str] = ("UCX",), mem_type: str = "VRAM"):
        from . import torch as _unipool_torch

        if not _unipool_torch.installed():
            raise ValueError("DeviceAgent: unipool.torch is not installed: the device pools are not torch's")
        super().__init__(name, agent=agent, max_region_bytes=max_region_bytes, backends=backends, mem_type=mem_type)


_META_MAGIC = b"unipool-kv-nixl/1\n"


class Transfer:
    """A posted transfer. wait() returns once it is done; a failure or a
    timeout raises PeerLostError. Either way the handle is released."""

    def __init__(self, agent, handle, peer: str, n: int, op: str):
        self._agent, self._handle, self.peer, self.blocks, self.op = agent, handle, peer, n, op
        self._state = "PROC"

    def done(self) -> bool:
        """True once the transfer completed; raises PeerLostError if it failed."""
        if self._state == "PROC":
            self._state = self._agent.check_xfer_state(self._handle)
            if self._state != "PROC":
                self._release()
        if self._state == "ERR":
            raise PeerLostError(f"unipool.nixl: {self.op} of {self.blocks} blocks with peer {self.peer!r} failed "
                                f"(NIXL reported an error: the peer is gone or unreachable)")
        return self._state == "DONE"

    def wait(self, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + _seconds(timeout, "Transfer.wait")
        while not self.done():
            if time.monotonic() > deadline:
                self._state = "ERR"
                self._release()
                raise PeerLostError(f"unipool.nixl: {self.op} of {self.blocks} blocks with peer {self.peer!r} "
                                    f"did not complete in {timeout:g} s (the peer is gone or unreachable)")

    def _release(self) -> None:
        handle, self._handle = self._handle, None
        if handle is not None:
            try:  # an in-flight transfer to a dead peer may refuse release; its memory stays registered with us
                self._agent.release_xfer_handle(handle)
            except Exception:  # noqa: BLE001 - the transfer's own error is the one to report
                pass


class KVPeer:
    """A remote KV pool: its agent's name, its geometry, its blocks prepared
    as NIXL descriptors, and which of its blocks this side may write or read
    (grant / revoke: the peer says which ids it handed over)."""

    def __init__(self, name: str, geometry: dict, dlist):
        self.name = name
        self.num_blocks, self.block_bytes = int(geometry["num_blocks"]), int(geometry["block_bytes"])
        self.granted = np.zeros(self.num_blocks, dtype=bool)
        self._granted_t = torch.from_numpy(self.granted)  # the same bytes, as the extension reads them
        self._out = np.empty(self.num_blocks, dtype=np.int32)  # descriptor indices, reused by each transfer
        self._out_t = torch.from_numpy(self._out)
        self._dlist = dlist

    def grant(self, ids: Ids) -> None:
        """The peer handed these of its blocks to this side."""
        self.granted[self._checked(ids, "grant")] = True

    def revoke(self, ids: Ids) -> None:
        """The peer freed (or took back) these blocks: transfers to them are refused from now on."""
        self.granted[self._checked(ids, "revoke")] = False

    def _checked(self, ids: Ids, what: str) -> np.ndarray:
        arr = _as_ids(ids, f"KVPeer.{what}: ids")
        if arr.size and (arr.min() < 0 or arr.max() >= self.num_blocks):
            raise IndexError(f"KVPeer.{what}: a block id out of range (peer {self.name!r} has {self.num_blocks})")
        return arr


class KVAgent:
    """A NIXL agent attached to a ``unipool.KVBlockPool``.

    ``KVAgent(pool, name, *, agent=None, max_region_bytes=4 GiB, backends=("UCX",))``

    The arena is registered at once, in regions of whole blocks of at most
    max_region_bytes (``cache``, a RegionCache), and deregistered by close()
    (or ``with``), before the pool may unmap it. Every block is prepared as a
    NIXL descriptor once, so a transfer of a list of ids is an index array.

    metadata() -> bytes to hand to a peer; connect(metadata) -> KVPeer;
    write(ids, peer, peer_ids, notif) / read(...) -> Transfer; locate(ids) ->
    (region, offset) arrays; descs(ids) -> an Nx3 (address, bytes, device)
    array; wait_notification(peer, tag); disconnect(peer); close().
    """

    def __init__(self, pool: KVBlockPool, name: str, *, agent=None, max_region_bytes: int = DEFAULT_MAX_REGION,
                 backends: Sequence[str] = ("UCX",)):
        if not isinstance(pool, KVBlockPool):
            raise TypeError(f"KVAgent: pool must be a unipool.KVBlockPool, got {type(pool).__name__}")
        self.pool, self.stride, self.block_bytes = pool, pool.stride, pool.block_bytes
        self.blocks_per_region = int(max_region_bytes) // self.stride
        if self.blocks_per_region < 1:
            raise ValueError(f"KVAgent: max_region_bytes={max_region_bytes} is smaller than one block "
                             f"(stride {self.stride})")
        self.agent = agent if agent is not None else make_agent(name, backends=backends)
        self.name = self.agent.name
        self.base = pool.blocks.data_ptr()
        self.peers: dict[str, KVPeer] = {}
        self.cache = RegionCache(self.agent, max_region_bytes=max_region_bytes)
        self._dlist = None
        self._out_local = np.empty(pool.num_blocks, dtype=np.int32)  # descriptor indices, reused by each transfer
        self._out_local_t = torch.from_numpy(self._out_local)
        self.cache.on_map(self.base, pool.num_blocks * self.stride, piece_bytes=self.blocks_per_region * self.stride)
        try:
            self._dlist = _nixl_call("preparing the pool's block descriptors", self.agent.prep_xfer_dlist,
                                     "NIXL_INIT_AGENT", self.descs(np.arange(pool.num_blocks)), "DRAM")
        except NixlError:
            self.cache.close()
            raise

    # --- the range cache and descriptors ---------------------------------

    def locate(self, ids: Ids) -> tuple[np.ndarray, np.ndarray]:
        """(region index, offset in the region) of each block: O(1) a block,
        vectorised over the list (regions hold whole blocks)."""
        arr = self._in_range(_as_ids(ids, "KVAgent.locate: ids"), "locate")
        return arr // self.blocks_per_region, (arr % self.blocks_per_region) * self.stride

    def descs(self, ids: Ids) -> np.ndarray:
        """An Nx3 uint64 array (address, block_bytes, device 0) of the blocks,
        the form NIXL's get_xfer_descs and prep_xfer_dlist take."""
        arr = self._in_range(_as_ids(ids, "KVAgent.descs: ids"), "descs").astype(np.uint64)
        out = np.empty((arr.size, 3), dtype=np.uint64)
        out[:, 0] = arr * np.uint64(self.stride) + np.uint64(self.base)
        out[:, 1] = self.block_bytes
        out[:, 2] = 0
        return out

    def _in_range(self, arr: np.ndarray, what: str) -> np.ndarray:
        # One reduction: as uint64 a negative id is above every valid one.
        if arr.size and arr.astype(np.uint64).max() >= self.pool.num_blocks:
            bad = arr[(arr < 0) | (arr >= self.pool.num_blocks)][0]
            raise IndexError(f"KVAgent.{what}: block id {bad} out of range (pool of {self.pool.num_blocks} blocks)")
        return arr

    # --- peers ------------------------------------------------------------

    def metadata(self) -> bytes:
        """This agent's NIXL metadata and the pool's geometry, for connect()
        on the other side (send it over any channel)."""
        geometry = {"name": self.name, "base": self.base, "stride": self.stride, "block_bytes": self.block_bytes,
                    "num_blocks": self.pool.num_blocks}
        return _META_MAGIC + json.dumps(geometry).encode() + b"\n" + self.agent.get_agent_metadata()

    def connect(self, metadata: bytes) -> KVPeer:
        """Adds the peer whose metadata() this is; its blocks become
        addressable by id. Raises ValueError for bytes that are not metadata()."""
        if not isinstance(metadata, (bytes, bytearray)) or not metadata.startswith(_META_MAGIC):
            raise ValueError("KVAgent.connect: not the bytes of a KVAgent.metadata()")
        header, _, agent_meta = bytes(metadata[len(_META_MAGIC):]).partition(b"\n")
        geometry = json.loads(header)
        if geometry["name"] in self.peers:  # a second KVPeer would leave the first's descriptors behind
            raise ValueError(f"KVAgent.connect: peer {geometry['name']!r} is already connected (disconnect it first)")
        name = _nixl_call(f"adding peer {geometry['name']!r}", self.agent.add_remote_agent, agent_meta)
        name = name.decode() if isinstance(name, bytes) else name
        ids = np.arange(int(geometry["num_blocks"]), dtype=np.uint64)
        remote = np.empty((ids.size, 3), dtype=np.uint64)
        remote[:, 0] = ids * np.uint64(geometry["stride"]) + np.uint64(geometry["base"])
        remote[:, 1], remote[:, 2] = int(geometry["block_bytes"]), 0
        try:
            dlist = _nixl_call(f"preparing peer {name!r}'s block descriptors", self.agent.prep_xfer_dlist,
                               name, remote, "DRAM")
        except NixlError:
            self.agent.remove_remote_agent(name)
            raise
        self.peers[name] = KVPeer(name, geometry, dlist)
        return self.peers[name]

    def disconnect(self, peer: KVPeer) -> None:
        """Forgets the peer (its descriptors and its NIXL metadata). A peer
        already disconnected is left as it is; one of another agent is refused."""
        if peer._dlist is None:
            return
        if self.peers.get(peer.name) is not peer:  # its descriptors and the one of this name are not ours
            raise ValueError(f"KVAgent.disconnect: peer {peer.name!r} is not connected to agent {self.name!r}")
        del self.peers[peer.name]
        dlist, peer._dlist = peer._dlist, None
        peer.granted[:] = False
        try:
            self.agent.release_dlist_handle(dlist)
        finally:
            _nixl_call(f"removing peer {peer.name!r}", self.agent.remove_remote_agent, peer.name)

    # --- transfers ----------------------------------------------------------

    def write(self, ids: Ids, peer: KVPeer, peer_ids: Ids, notif: bytes = b"") -> Transfer:
        """Copies block ids[i] of this pool to block peer_ids[i] of the peer;
        the peer is told `notif` when all of it has landed."""
        return self._post("WRITE", ids, peer, peer_ids, notif)

    def read(self, ids: Ids, peer: KVPeer, peer_ids: Ids, notif: bytes = b"") -> Transfer:
        """Copies block peer_ids[i] of the peer into block ids[i] of this pool."""
        return self._post("READ", ids, peer, peer_ids, notif)

    def transfer_indices(self, ids: Ids, peer: KVPeer, peer_ids: Ids) -> tuple[np.ndarray, np.ndarray]:
        """The checked descriptor indices of a transfer (what write and read
        post), as int32 arrays: local ids must be live in the pool, peer ids
        granted by the peer, both lists of one length. Refused with
        ValueError naming the first bad id, before anything is posted."""
        local, remote = self._indices(ids, peer, peer_ids)
        return local.copy(), remote.copy()

    def _indices(self, ids: Ids, peer: KVPeer, peer_ids: Ids) -> tuple[np.ndarray, np.ndarray]:
        # Views of buffers reused by the next call: NIXL copies the indices
        # when it makes the request, so _post needs no copy of its own.
        if peer._dlist is None or self.peers.get(peer.name) is not peer:
            raise ValueError(f"KVAgent: peer {peer.name!r} is not connected")
        try:  # one call into the extension: the checks and both index arrays
            n = self.pool._transfer_indices(ids, peer_ids, peer._granted_t, self._out_local_t, peer._out_t)
        except (ValueError, IndexError) as e:
            raise type(e)(f"KVAgent: {e} (peer {peer.name!r}): transfer refused") from None
        return self._out_local[:n], peer._out[:n]

    def _post(self, op: str, ids: Ids, peer: KVPeer, peer_ids: Ids, notif: bytes) -> Transfer:
        local, remote = self._indices(ids, peer, peer_ids)
        what = f"{op} of {local.size} blocks with peer {peer.name!r}"
        try:
            handle = _nixl_call(f"preparing {what}", self.agent.make_prepped_xfer, op, self._dlist, local,
                                peer._dlist, remote, notif)
        except NixlError as e:
            raise _lost_or(e) from e.__cause__
        return _start(self.agent, handle, peer.name, local.size, op, what)

    def wait_notification(self, peer: Union[KVPeer, str], tag: bytes, timeout: float = 30.0) -> None:
        """Returns once `peer` sent a notification starting with `tag` (and
        consumes it); PeerLostError after `timeout` seconds."""
        name = peer.name if isinstance(peer, KVPeer) else peer
        if not isinstance(tag, (bytes, bytearray)):  # a str would never match: a full timeout, then "peer gone"
            raise TypeError(f"KVAgent.wait_notification: tag must be bytes, got {type(tag).__name__}")
        deadline = time.monotonic() + _seconds(timeout, "KVAgent.wait_notification")
        while not self.agent.check_remote_xfer_done(name, tag):
            if time.monotonic() > deadline:
                raise PeerLostError(f"unipool.nixl: no notification {tag!r} from peer {name!r} in {timeout:g} s "
                                    f"(the peer is gone or unreachable)")
            time.sleep(0.0002)

    def notify(self, peer: KVPeer, message: bytes) -> None:
        """Sends `message` to the peer outside any transfer."""
        _nixl_call(f"notifying {peer.name!r}", self.agent.send_notif, peer.name, message)

    def close(self) -> None:
        """Forgets every peer, releases the prepared descriptors and
        deregisters the arena. Idempotent; the pool stays usable."""
        for peer in list(self.peers.values()):
            self.disconnect(peer)
        dlist, self._dlist = self._dlist, None
        if dlist is not None:
            self.agent.release_dlist_handle(dlist)
        self.cache.close()

    def __enter__(self) -> "KVAgent":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        return (f"KVAgent({self.name!r}, {self.pool.num_blocks} blocks of {self.block_bytes} B, "
                f"{self.cache.live_regions} regions, peers={list(self.peers)})")
