"""unipool as torch's allocators (docs/pytorch.md).

``install(device_conf=..., host_conf=...)`` before CUDA initialises: unipool's
device pool becomes torch's CUDA caching allocator (a full CUDAAllocator, so
memory_stats, max_memory_allocated, snapshots, cudnn.benchmark's cacheInfo and
MemPool keep working) and unipool's host pool torch's pinned host allocator.

Processes whose code cannot change: ``UNIPOOL_INSTALL=1`` (with
``UNIPOOL_DEVICE_CONF`` / ``UNIPOOL_HOST_CONF``) installs it when Python
starts, through the ``unipool_install.pth`` file the package ships.
"""
from __future__ import annotations

import contextlib as _contextlib
from collections.abc import Iterable as _Iterable

import torch as _torch

from . import _C

if _C._has_cuda_allocator:
    AsleepError = _C.AsleepError
else:
    class AsleepError(RuntimeError):
        """A tag asleep (or awake, for wake) where it must not be."""


def install(device_conf: str = "", host_conf: str = "") -> None:
    """Installs unipool as torch's CUDA allocator and pinned host allocator.

    device_conf / host_conf: the UNIPOOL_DEVICE_CONF / UNIPOOL_HOST_CONF
    syntax ("backend=cuda_vmm,memory_fraction=0.9"; "" = the environment's or
    the defaults). Idempotent with the same configuration. Raises RuntimeError
    once CUDA is initialised: torch's own allocator already holds memory.
    """
    if _torch.cuda.is_initialized() and not _C.installed():
        raise RuntimeError(
            "unipool.torch.install() must run before CUDA is initialised (torch.cuda.is_initialized() is True: "
            "a CUDA tensor, stream or device query already ran, and torch's own allocator may hold memory). "
            "Call it first thing in the process, or start the process with UNIPOOL_INSTALL=1.")
    _C.install(device_conf, host_conf)


def installed() -> bool:
    """True once install() ran in this process."""
    return bool(_C.installed())


def has_cuda_allocator() -> bool:
    """Whether this build has the CUDA allocator (torch and unipool with CUDA)."""
    return bool(_C._has_cuda_allocator)


def pluggable_allocator():
    """The pluggable route: a torch.cuda.memory.CUDAPluggableAllocator over
    libunipool's exported unipool_alloc / unipool_free (pass it to
    torch.cuda.memory.change_current_allocator before CUDA initialises)."""
    from . import library_path
    return _torch.cuda.memory.CUDAPluggableAllocator(library_path(), "unipool_alloc", "unipool_free")


# ---- tags, sleep and wake (docs/pytorch.md, "Sleep and wake") ----------------------

def _require_cuda_allocator(what: str) -> None:
    if not _C._has_cuda_allocator:
        raise RuntimeError(f"unipool.torch.{what}: the CUDA allocator is not built (torch without CUDA, or unipool "
                           "built with UNIPOOL_CUDA=OFF)")


def _tag_names(value, argument: str) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str) or not isinstance(value, _Iterable):
        raise TypeError(f"unipool.torch: {argument} must be a list of tag names, got {type(value).__name__} "
                        f"{value!r}")
    names = list(value)
    for name in names:
        if not isinstance(name, str):
            raise TypeError(f"unipool.torch: {argument} must hold tag names (str), got {type(name).__name__} {name!r}")
    return names


@_contextlib.contextmanager
def tag(name: str):
    """Tags the CUDA memory this thread allocates inside the block::

        with unipool.torch.tag("weights"):
            model = build_model().cuda()

    Blocks of different tags never share a segment, so each tag can be put to
    sleep on its own. Tags nest; "default" is the tag outside any block.
    Names have 1 to 64 characters; at most 64 tags exist in a process.
    """
    _require_cuda_allocator("tag")
    if not isinstance(name, str):
        raise TypeError(f"unipool.torch.tag: name must be a str, got {type(name).__name__} {name!r}")
    previous = _C._set_device_tag(name)
    try:
        yield name
    finally:
        _C._restore_device_tag(previous)


def current_tag() -> str:
    """The tag this thread's CUDA allocations get now."""
    _require_cuda_allocator("current_tag")
    return _C._current_device_tag()


def sleep(offload: _Iterable[str] = (), discard: _Iterable[str] = ()) -> dict:
    """Gives the GPU memory of tags back, keeping their addresses.

    Blocks of ``offload`` tags are copied to pinned host memory first; those
    of ``discard`` tags lose their contents. Every tensor, data_ptr() and
    captured CUDA graph of those tags stays valid and must not be used until
    wake(). Needs ``backend=cuda_vmm`` (cudaMalloc cannot keep addresses).
    Returns {"offloaded_bytes", "discarded_bytes", "released_bytes", "seconds"}.

    Raises ValueError (no tag, a tag in both lists, a backend that cannot
    keep addresses), AsleepError (a tag already asleep), MemoryError (host
    memory for the offload), RuntimeError (a driver failure part way: the
    message says whether to call sleep again or wake).
    """
    _require_cuda_allocator("sleep")
    return _C._sleep(_tag_names(offload, "offload"), _tag_names(discard, "discard"))


def wake(tags: _Iterable[str] | None = None) -> dict:
    """Maps the memory of sleeping tags again at the same addresses and copies
    offloaded contents back; ``tags=None`` wakes every sleeping tag. Raises
    AsleepError when a tag named is awake, or when nothing sleeps."""
    _require_cuda_allocator("wake")
    return _C._wake(_tag_names(tags, "tags"))


def tag_stats(device: int | None = None) -> dict[str, dict]:
    """Per tag on ``device`` (the current one by default), over its default
    and private pools: {"weights": {"state", "allocated_bytes", "blocks",
    "reserved_bytes", "offloaded_bytes", "discarded_bytes", "released_bytes",
    "host_bytes", "sleeps", "wakes", "last_sleep_seconds",
    "last_wake_seconds"}, ...}."""
    _require_cuda_allocator("tag_stats")
    if device is None:
        device = _torch.cuda.current_device()
    if isinstance(device, bool) or not isinstance(device, int):
        raise TypeError(f"unipool.torch.tag_stats: device must be an int, got {type(device).__name__} {device!r}")
    return _C._tag_stats(device)
