"""The full route: unipool as torch's CUDA allocator, driven through torch's
own allocator pointer on the sim device backend (no GPU here)."""
import pytest

from conftest import SIM, needs_gpu, run_py

INSTALL = f"""
import torch, unipool, unipool.torch as ut
from unipool import _C
from unipool import _testing
ut.install(device_conf="{SIM}")
"""


def test_install_before_cuda_init_switches_torch_backend():
    out = run_py(INSTALL + """
assert not torch.cuda.is_initialized()
print(torch.cuda.memory.get_allocator_backend())
print(_testing.torch_allocator_name(), _testing.torch_get_allocator_is_unipool(), _testing.host_allocator_is_unipool())
ut.install(device_conf="%s")   # idempotent with the same config
print(ut.installed())
""" % SIM)
    assert out.split() == ["unipool", "unipool", "True", "True", "True"]


def test_allocate_free_record_stream_and_stats_through_torch_pointer():
    run_py(INSTALL + """
MiB = 1 << 20
h, p = _testing.cuda_allocate(3 * MiB)
assert p != 0 and p % 512 == 0
s = _testing.cuda_device_stats(0)
assert s["allocated_bytes.all.current"] == 3 * MiB
assert s["requested_bytes.all.current"] == 3 * MiB
assert s["allocation.large_pool.current"] == 1 and s["allocation.small_pool.current"] == 0
assert s["reserved_bytes.all.current"] >= 3 * MiB and s["num_device_alloc"] >= 1
# Used on another stream: after the free the block waits for that stream's fence.
_testing.cuda_record_stream(h, 0x1234)
_testing.cuda_free(h)
s = _testing.cuda_device_stats(0)
assert s["allocated_bytes.all.current"] == 0
assert s["active_bytes.all.current"] == 3 * MiB, s["active_bytes.all.current"]
assert _testing.sim_outstanding_fences() == 1
_testing.sim_complete_all()
_testing.cuda_empty_cache()
s = _testing.cuda_device_stats(0)
assert s["active_bytes.all.current"] == 0 and s["reserved_bytes.all.current"] == 0
assert s["allocated_bytes.all.peak"] == 3 * MiB
_testing.cuda_reset_peak(0)
assert _testing.cuda_device_stats(0)["allocated_bytes.all.peak"] == 0
_testing.cuda_reset_accumulated(0)
assert _testing.cuda_device_stats(0)["allocation.all.allocated"] == 0
# raw_alloc / raw_alloc_with_stream / raw_delete; small blocks from the small pool.
a = _testing.cuda_raw_alloc(1000)
b = _testing.cuda_raw_alloc_with_stream(2 * MiB, 77)
s = _testing.cuda_device_stats(0)
assert s["allocation.small_pool.current"] == 1 and s["allocation.large_pool.current"] == 1
assert s["requested_bytes.all.current"] == 1000 + 2 * MiB
base, size = _testing.cuda_base_allocation(a + 512)
assert base <= a < base + size
_testing.cuda_raw_delete(a); _testing.cuda_raw_delete(b)
try:
    _testing.cuda_raw_delete(b)
    raise SystemExit("double free was not refused")
except RuntimeError as e:
    assert "double free" in str(e)
assert _testing.cuda_cache_info(0) > 0   # cudnn.benchmark's question: the largest cached block
_testing.cuda_validate()
""")


def test_stats_keys_are_torchs_memory_stats_keys():
    out = run_py(INSTALL + """
h, p = _testing.cuda_allocate(5 << 20)
ours = _testing.cuda_device_stats(0)
# torch's own memory_stats() code (it returns {} before CUDA init; the
# allocator behind it is ours), flattening torch's C++ dict.
torch.cuda.memory.is_initialized = lambda: True
theirs = torch.cuda.memory_stats(0)
assert theirs["allocated_bytes.all.current"] == 5 << 20, theirs["allocated_bytes.all.current"]
assert torch.cuda.memory_allocated(0) == 5 << 20
assert torch.cuda.max_memory_allocated(0) == 5 << 20
assert torch.cuda.memory_reserved(0) == ours["reserved_bytes.all.current"]
missing = set(ours) - set(theirs)
assert not missing, missing
for k in ours:
    assert ours[k] == theirs[k], (k, ours[k], theirs[k])
extra = sorted({k.split(".")[0] for k in set(theirs) - set(ours)})
print(" ".join(extra))
""")
    # What torch has that the device pool does not count (reported as 0).
    assert out.split() == ["max_split_size", "num_oom_rejections", "oversize_allocations", "oversize_segments"]


def test_memory_fraction_and_oom_through_torch():
    run_py(INSTALL + """
_testing.cuda_set_memory_fraction(0.25, 0)
assert _testing.cuda_get_memory_fraction(0) == 0.25
try:
    _testing.cuda_raw_alloc(512 << 20)       # 512 MiB > a quarter of the 1 GiB sim device
    raise SystemExit("no OOM")
except torch.OutOfMemoryError as e:
    assert "out of memory" in str(e).lower(), str(e)
assert _testing.cuda_device_stats(0)["num_ooms"] == 1
""")


def test_mempool_calls_route_to_a_private_pool():
    run_py(INSTALL + """
_testing.cuda_pool_create(0, 1, 0)
assert _testing.cuda_pool_use_count(0, 1, 0) == 1
_testing.cuda_pool_begin(0, 1, 0)
assert _testing.cuda_pool_use_count(0, 1, 0) == 2       # begin takes a reference, as in PyTorch
a = _testing.cuda_raw_alloc(4 << 20)
_testing.cuda_pool_end(0, 1, 0)
b = _testing.cuda_raw_alloc(4 << 20)
segs = _testing.cuda_snapshot(1, 0)
assert segs and all(tuple(s["pool"]) == (1, 0) for s in segs)
assert any(s["address"] <= a < s["address"] + s["total_size"] for s in segs)
assert not any(s["address"] <= b < s["address"] + s["total_size"] for s in segs)
assert _testing.cuda_pool_check_live(0, 1, 0, [a]) and not _testing.cuda_pool_check_live(0, 1, 0, [])
assert _testing.cuda_device_stats(0)["allocated_bytes.all.current"] == 8 << 20
_testing.cuda_raw_delete(a); _testing.cuda_raw_delete(b)
_testing.cuda_pool_release(0, 1, 0)                       # the context's reference
assert _testing.cuda_pool_use_count(0, 1, 0) == 1
_testing.cuda_pool_release(0, 1, 0)                       # the creator's
assert _testing.cuda_pool_use_count(0, 1, 0) == 0
assert _testing.cuda_snapshot(1, 0) == []
_testing.cuda_validate()
""")


@pytest.mark.parametrize("method", ["shareIpcHandle", "setUseOnOOM"])
def test_unsupported_methods_raise_naming_the_method(method):
    run_py(INSTALL + f"""
try:
    _testing.cuda_call_unsupported("{method}")
    raise SystemExit("no error")
except (RuntimeError, NotImplementedError) as e:
    assert "{method}" in str(e), str(e)
""")


def test_install_after_cuda_init_is_refused():
    # No GPU: make torch *think* CUDA was initialised; the message says why and what to do.
    out = run_py("""
import torch, unipool.torch as ut
torch.cuda.is_initialized = lambda: True
try:
    ut.install(device_conf="backend=sim")
except RuntimeError as e:
    print(e)
""")
    assert "before CUDA is initialised" in out and "UNIPOOL_INSTALL=1" in out


def test_bad_config_is_refused_with_the_key():
    out = run_py("""
import unipool.torch as ut
try:
    ut.install(device_conf="backend=sim,no_such_key=1")
except ValueError as e:
    print(e)
""")
    assert "no_such_key" in out


def test_environment_route():
    out = run_py("""
import torch
from unipool import _C
print(torch.cuda.memory.get_allocator_backend(), _C.installed())
""", env={"UNIPOOL_INSTALL": "1", "UNIPOOL_DEVICE_CONF": SIM})
    assert out.split() == ["unipool", "True"]


@needs_gpu
def test_gpu_tensors_use_unipool():
    run_py(INSTALL.replace(SIM, "") + """
x = torch.empty(1 << 20, device="cuda")
assert torch.cuda.memory_allocated() >= 4 << 20
y = (x + 1).sum(); torch.cuda.synchronize()
pool = torch.cuda.MemPool()
with torch.cuda.use_mem_pool(pool):
    z = torch.empty(1 << 20, device="cuda")
del z, x
torch.cuda.empty_cache()
""")


def test_a_refused_install_leaves_the_host_pool_alone():
    # The device side cannot be made (no device): install() raises, and the
    # host configuration it was given must not have been applied either.
    run_py("""
import torch, unipool, unipool.torch as ut
try:
    ut.install("", "limit=4MiB")
except RuntimeError as e:
    assert "device" in str(e), e
else:
    raise AssertionError("install() succeeded without a device")
x = unipool.empty(4 << 20, dtype=torch.float32)   # 16 MiB: limit=4MiB would refuse this
assert unipool.host_stats()["committed_bytes"] > 4 << 20
""", env={"UNIPOOL_NULLGPU": "devices=0"})
    run_py("""
import unipool, unipool._testing, unipool.torch as ut
try:
    ut.install("", "limit=4MiB")
except RuntimeError:
    pass
unipool._testing.configure_host("pinned=off,limit=1GiB")  # the pool is not in use yet
""", env={"UNIPOOL_NULLGPU": "devices=0"})
