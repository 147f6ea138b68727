"""The pluggable route: libunipool's exported entry points."""
import os
import signal
import subprocess
import sys

import pytest

from conftest import SIM, needs_gpu, run_py


def test_pluggable_allocator_constructs_and_installs():
    out = run_py("""
import torch, unipool, unipool.torch as ut
alloc = torch.cuda.memory.CUDAPluggableAllocator(unipool.library_path(), "unipool_alloc", "unipool_free")
torch.cuda.memory.change_current_allocator(alloc)
print(torch.cuda.memory.get_allocator_backend())
""", env={"UNIPOOL_DEVICE_CONF": SIM})
    assert out.strip() == "pluggable"


def test_exported_functions_allocate_and_free_on_sim():
    run_py("""
import ctypes, unipool
lib = ctypes.CDLL(unipool.library_path())
lib.unipool_alloc.restype = ctypes.c_void_p
lib.unipool_alloc.argtypes = [ctypes.c_size_t, ctypes.c_int, ctypes.c_void_p]
lib.unipool_free.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_void_p]
lib.unipool_record_stream.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
lib.unipool_memory_fraction.argtypes = [ctypes.c_double, ctypes.c_int]
lib.unipool_device_stat.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_char_p, ctypes.POINTER(ctypes.c_int64)]
lib.unipool_last_error.restype = ctypes.c_char_p
def stat(key):
    v = ctypes.c_int64()
    assert lib.unipool_device_stat(None, 0, key.encode(), ctypes.byref(v)) == 0
    return v.value
lib.unipool_init(1)
p = lib.unipool_alloc(3 << 20, 0, None)
q = lib.unipool_alloc(1000, 0, ctypes.c_void_p(0x55))
assert p and q and p != q
assert stat("allocated_bytes.all.current") == (3 << 20) + 1024
assert stat("requested_bytes.all.current") == (3 << 20) + 1000
lib.unipool_record_stream(p, ctypes.c_void_p(0x77))
lib.unipool_free(p, 3 << 20, 0, None)
lib.unipool_free(q, 1000, 0, ctypes.c_void_p(0x55))
assert stat("allocated_bytes.all.current") == 0
lib.unipool_memory_fraction(0.5, 0)
assert lib.unipool_alloc(700 << 20, 0, None) is None   # over half of the 1 GiB sim device
assert b"out of memory" in lib.unipool_last_error().lower()
assert lib.unipool_alloc(0, 0, None) is None
lib.unipool_reset()
assert lib.unipool_device_validate(None) == 0
""", env={"UNIPOOL_DEVICE_CONF": SIM})


@pytest.mark.parametrize("ptr", ["q", "q + 64", "0x1000"])
def test_exported_free_of_a_pointer_it_does_not_hold_ends_the_process_saying_why(ptr):
    # A double free, an interior pointer, a foreign one: torch's deleters
    # cannot be told, so the process stops with the reason (torch's allocator
    # does the same for an invalid device pointer).
    code = f"""
import ctypes, unipool
lib = ctypes.CDLL(unipool.library_path())
lib.unipool_alloc.restype = ctypes.c_void_p
lib.unipool_alloc.argtypes = [ctypes.c_size_t, ctypes.c_int, ctypes.c_void_p]
lib.unipool_free.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_void_p]
lib.unipool_init(1)
q = lib.unipool_alloc(1000, 0, None)
keep = lib.unipool_alloc(1000, 0, None)
lib.unipool_free(q, 1000, 0, None)
print("freed", flush=True)
lib.unipool_free({ptr}, 1000, 0, None)
print("survived", flush=True)
"""
    env = dict(os.environ, UNIPOOL_DEVICE_CONF=SIM)
    env.pop("UNIPOOL_INSTALL", None)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60)
    assert r.stdout.split() == ["freed"], (r.stdout, r.stderr)
    assert r.returncode == -signal.SIGABRT, (r.returncode, r.stderr)
    assert "unipool_free(" in r.stderr and "device 0" in r.stderr, r.stderr


@needs_gpu
def test_pluggable_gpu_tensors():
    # Contents are checked through copies: the null GPU's kernels compute
    # nothing, its copies move real bytes.
    run_py("""
import ctypes, torch, unipool, unipool.torch as ut
torch.cuda.memory.change_current_allocator(ut.pluggable_allocator())
lib = ctypes.CDLL(unipool.library_path())
def allocated():
    v = ctypes.c_int64()
    assert lib.unipool_device_stat(None, 0, b"allocated_bytes.all.current", ctypes.byref(v)) == 0
    return v.value
src = torch.arange(1 << 20, dtype=torch.float32)
x = src.to("cuda")
assert allocated() >= 4 << 20                  # torch's tensor came from unipool
assert torch.equal(x.cpu(), src)
assert torch.cuda.memory.get_allocator_backend() == "pluggable"
del x
assert allocated() == 0
torch.cuda.empty_cache()
assert lib.unipool_device_validate(None) == 0
""")
