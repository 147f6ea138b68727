"""PyTorch's own allocators, the benchmarks' peers, on the null GPU: its
CUDACachingAllocator with and without expandable segments (which reach the
null GPU's VMM calls and its NVML) and its pinned CachingHostAllocator,
with torch's public API only and nothing of unipool installed."""
import pytest

from conftest import needs_gpu, run_py

pytestmark = needs_gpu

ROUND_TRIP = """
import torch
MiB = 1 << 20
assert torch.cuda.memory.get_allocator_backend() == "native"
src = torch.arange(3 * MiB, dtype=torch.int32)
x = src.to("cuda")
y = torch.empty(100 * MiB, dtype=torch.uint8, device="cuda")
assert torch.equal(x.cpu(), src)
free, total = torch.cuda.mem_get_info()          # the null GPU's books
print(torch.cuda.memory_reserved(), total - free, y.data_ptr() - x.data_ptr())
del x, y
torch.cuda.empty_cache()
assert torch.cuda.memory_reserved() == 0
free, total = torch.cuda.mem_get_info()
assert total - free == 0, "empty_cache left device memory mapped"
"""


@pytest.mark.parametrize("conf", ["", "expandable_segments:True"])
def test_torch_caching_allocator_runs_on_the_null_gpu(conf):
    out = run_py(ROUND_TRIP, env={"PYTORCH_ALLOC_CONF": conf})
    reserved, device_used, distance = map(int, out.split())
    assert reserved == device_used >= 112 * (1 << 20)  # 12 MiB + 100 MiB asked
    if conf:
        # One expandable segment holds both, mapped back to back.
        assert 0 < distance < 32 * (1 << 20)


def test_torch_expandable_segments_warn_about_nothing():
    # NVML answers the fabric query as a device outside any fabric does.
    code = ROUND_TRIP.replace("import torch", "import torch, warnings\nwarnings.simplefilter('error')")
    run_py(code, env={"PYTORCH_ALLOC_CONF": "expandable_segments:True"})


def test_torch_pinned_host_allocator_runs_on_the_null_gpu():
    run_py("""
import torch
x = torch.empty(3 << 20, dtype=torch.uint8, pin_memory=True)
assert x.is_pinned()
x.fill_(7)
d = x.to("cuda", non_blocking=True)
assert torch.equal(d.cpu(), x)
stats = torch.cuda.host_memory_stats()
assert stats["allocated_bytes.current"] == 4 << 20     # rounded to a power of two
""")
