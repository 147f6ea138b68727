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

import torch as _torch

from . import _C


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
