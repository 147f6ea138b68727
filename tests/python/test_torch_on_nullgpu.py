"""unipool under torch's own CUDA code, on the null GPU (tests/nullgpu):
torch's public API only, unipool installed with unipool.torch.install() (or
UNIPOOL_INSTALL=1) on the production backends cuda_malloc and cuda_vmm.
Contents are checked through copies, which move real bytes; kernels compute
nothing on the null GPU."""
import pytest

from conftest import needs_gpu, run_py

pytestmark = needs_gpu
BACKENDS = ["cuda_malloc", "cuda_vmm"]


def install(backend: str, host_conf: str = "") -> str:
    return f"""
import torch, unipool, unipool._testing, unipool.torch as ut
ut.install(device_conf="backend={backend}", host_conf="{host_conf}")
assert torch.cuda.memory.get_allocator_backend() == "unipool"
MiB = 1 << 20
"""


@pytest.mark.parametrize("backend", BACKENDS)
def test_tensors_views_and_stats_agree_with_the_device(backend):
    run_py(install(backend) + """
src = torch.arange(3 * MiB // 4, dtype=torch.float32)
x = src.to("cuda")
v = x[1024:2048]                                   # a view shares the block
assert v.data_ptr() == x.data_ptr() + 4096
assert torch.equal(v.cpu(), src[1024:2048]) and torch.equal(x.cpu(), src)
assert torch.cuda.memory_allocated() == 3 * MiB
assert torch.cuda.memory_stats()["allocated_bytes.all.current"] == 3 * MiB
free, total = torch.cuda.mem_get_info()            # the null GPU's own books
assert torch.cuda.memory_reserved() == total - free > 0
y = torch.empty(5 * MiB, dtype=torch.uint8, device="cuda")
assert torch.cuda.max_memory_allocated() == 8 * MiB
del x, v, y
assert torch.cuda.memory_allocated() == 0 and torch.cuda.max_memory_allocated() == 8 * MiB
torch.cuda.reset_peak_memory_stats()
assert torch.cuda.max_memory_allocated() == 0
torch.cuda.empty_cache()
free, total = torch.cuda.mem_get_info()
assert torch.cuda.memory_reserved() == total - free == 0
""")


@pytest.mark.parametrize("backend", BACKENDS)
def test_record_stream_keeps_a_block_until_its_event_completes(backend):
    # Events stay pending until a synchronize: a block used on another
    # stream must not be handed out again before.
    run_py(install(backend) + """
side = torch.cuda.Stream()
x = torch.empty(4 * MiB, dtype=torch.uint8, device="cuda")
p = x.data_ptr()
x.record_stream(side)
del x
y = torch.empty(4 * MiB, dtype=torch.uint8, device="cuda")
assert y.data_ptr() != p, "reused while the side stream may still use it"
side.synchronize()
z = torch.empty(4 * MiB, dtype=torch.uint8, device="cuda")
assert z.data_ptr() == p, "the block came back once its stream was done"
""", env={"UNIPOOL_NULLGPU": "event_lag=never"})


@pytest.mark.parametrize("backend", BACKENDS)
def test_mem_pool_use_and_destruction(backend):
    run_py(install(backend) + """
pool = torch.cuda.MemPool()
assert pool.use_count() == 1
with torch.cuda.use_mem_pool(pool):
    a = torch.ones(MiB, dtype=torch.uint8).cuda()
    assert pool.use_count() == 2                   # the context holds a reference, as in PyTorch
b = torch.empty(MiB, dtype=torch.uint8, device="cuda")
assert pool.use_count() == 1
pools = {s["segment_pool_id"] for s in torch.cuda.memory._snapshot()["segments"]}
assert tuple(pool.id) in pools and (0, 0) in pools, pools
assert torch.equal(a.cpu(), torch.ones(MiB, dtype=torch.uint8))
assert torch.cuda.memory_allocated() == 2 * MiB
del a, pool                                        # ~MemPool must not raise
assert torch.cuda.memory_allocated() == MiB
try:
    torch.cuda.MemPool(use_on_oom=True)
    raise SystemExit("use_on_oom=True was accepted")
except RuntimeError as e:
    assert "setUseOnOOM" in str(e)
""")


@pytest.mark.parametrize("backend", BACKENDS)
def test_cuda_graph_capture_and_replay(backend):
    run_py(install(backend) + """
static_in = torch.zeros(1024, device="cuda")
side = torch.cuda.Stream()
side.wait_stream(torch.cuda.current_stream())
with torch.cuda.stream(side):
    out = static_in * 2                            # warm-up outside capture
torch.cuda.current_stream().wait_stream(side)
g = torch.cuda.CUDAGraph()
with torch.cuda.graph(g):
    out = static_in * 2
    copied = torch.empty(1024, device="cuda")
    copied.copy_(static_in)                        # a captured device copy
ptrs = (static_in.data_ptr(), out.data_ptr(), copied.data_ptr())
assert torch.cuda.memory_allocated() > 0
static_in.copy_(torch.arange(1024.0))
g.replay()
torch.cuda.synchronize()
assert torch.equal(copied.cpu(), torch.arange(1024.0)), "the replay did not move the bytes"
assert ptrs == (static_in.data_ptr(), out.data_ptr(), copied.data_ptr())
del g, out, copied
torch.cuda.empty_cache()
""")


@pytest.mark.parametrize("backend", BACKENDS)
def test_caching_allocator_alloc_and_delete(backend):
    run_py(install(backend) + """
p = torch.cuda.caching_allocator_alloc(3 * MiB)
assert p != 0 and torch.cuda.memory_allocated() == 3 * MiB
torch.cuda.caching_allocator_delete(p)
assert torch.cuda.memory_allocated() == 0
""")


@pytest.mark.parametrize("backend", BACKENDS)
def test_oom_raises_and_a_retry_after_empty_cache_succeeds(backend):
    run_py(install(backend) + """
keep = [torch.empty(256 * MiB, dtype=torch.uint8, device="cuda") for _ in range(3)]
del keep[1:]                                       # cached, not given back
try:
    torch.empty(900 * MiB, dtype=torch.uint8, device="cuda")
    raise SystemExit("no OOM on a 1 GiB device")
except torch.cuda.OutOfMemoryError as e:
    assert "unipool" in str(e), str(e)
torch.cuda.empty_cache()                           # a server's catch and retry
x = torch.empty(512 * MiB, dtype=torch.uint8, device="cuda")
assert torch.cuda.memory_stats()["num_ooms"] >= 1
""", env={"UNIPOOL_NULLGPU": "capacity=1GiB"})


@pytest.mark.parametrize("backend", BACKENDS)
def test_snapshot_is_read_by_memory_viz(backend):
    run_py(install(backend) + """
from torch.cuda import _memory_viz
xs = [torch.empty(n, dtype=torch.uint8, device="cuda") for n in (1000, 3 * MiB, 7 * MiB)]
del xs[1]
snap = torch.cuda.memory._snapshot()
assert snap["segments"], snap
html = _memory_viz.segment_plot(snap)
assert "<html" in html.lower() or len(html) > 1000
text = _memory_viz.segsum(snap)
assert "segment" in text.lower() or len(text) > 0
""")


@pytest.mark.parametrize("before_init", [True, False])
def test_pinned_host_memory_is_unipools_and_pinned(before_init):
    run_py(install("cuda_malloc") + f"""
if not {before_init}:
    torch.cuda.init()
a = torch.arange(MiB, dtype=torch.float32).pin_memory()
b = torch.empty(MiB, dtype=torch.float32, pin_memory=True)
for t in (a, b):
    assert t.is_pinned() and unipool._testing.host_owns(t.data_ptr())
assert unipool.host_stats()["pinned_bytes"] >= 8 * MiB
d = a.to("cuda", non_blocking=True)
b.copy_(d, non_blocking=True)
torch.cuda.synchronize()
assert torch.equal(b, torch.arange(MiB, dtype=torch.float32))
""")


def test_pinned_block_waits_for_its_copy_event():
    run_py(install("cuda_malloc") + """
h = torch.empty(4 * MiB, dtype=torch.uint8, pin_memory=True)
d = h.to("cuda", non_blocking=True)               # torch records an event on the pinned block
before = unipool.host_stats()["deferred_blocks"]
del h
assert unipool.host_stats()["deferred_blocks"] == before + 1, "reusable before its copy completed"
torch.cuda.synchronize()
h2 = torch.empty(4 * MiB, dtype=torch.uint8, pin_memory=True)  # collects the completed deferral
assert unipool.host_stats()["deferred_blocks"] == before
unipool.host_validate()
""", env={"UNIPOOL_NULLGPU": "event_lag=never"})


def test_install_refuses_a_host_pool_that_does_not_pin():
    run_py("""
import torch, unipool.torch as ut
for conf in ("pinned=off", "pinned=best_effort"):
    try:
        ut.install(device_conf="backend=cuda_malloc", host_conf=conf)
        raise SystemExit(conf + " accepted")
    except ValueError as e:
        assert "pinned" in str(e)
assert not ut.installed()
ut.install(device_conf="backend=cuda_malloc")     # a refused install left nothing behind
x = torch.empty(10, pin_memory=True)
assert x.is_pinned()
""")


def test_kv_block_pool_round_trip_through_the_device():
    run_py(install("cuda_vmm") + """
from unipool import KVBlockPool
pool = KVBlockPool(block_shape=(4, 256), dtype=torch.float16, num_blocks=8, pinned=True)
ids = pool.alloc(3)
for i in ids:
    pool.view(i).copy_(torch.full((4, 256), float(i) + 0.5, dtype=torch.float16))
dev = torch.empty((3, 4, 256), dtype=torch.float16, device="cuda")
pool.copy_to_device(ids, dev)
back = pool.alloc(3)
pool.copy_from_device(back, dev)
torch.cuda.synchronize()
for src, dst in zip(ids, back):
    assert torch.equal(pool.view(src), pool.view(dst))
""")


def test_autoinstall_from_the_environment():
    out = run_py("""
import torch
x = torch.ones(1000).cuda()
print(torch.cuda.memory.get_allocator_backend(), torch.cuda.memory_allocated() > 0)
""", env={"UNIPOOL_INSTALL": "1", "UNIPOOL_DEVICE_CONF": "backend=cuda_vmm"})
    assert out.split() == ["unipool", "True"]
