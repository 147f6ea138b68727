"""Sleep and wake through torch on the null GPU (tests/nullgpu): tensors
allocated under unipool.torch.tag(...) give their GPU memory back and take it
again at the same addresses. Copies on the null GPU move real bytes, so
offloaded contents are checked bit for bit, and a captured CUDA graph's
device copy shows its memory is mapped again where it was. Free memory is
the null GPU's own (cudaMemGetInfo)."""
import pytest

from conftest import needs_gpu, run_py

MiB = 1 << 20


def install(expandable: bool) -> str:
    return f"""
import torch, unipool, unipool._testing, unipool.torch
from unipool.torch import tag, sleep, wake, tag_stats, AsleepError
unipool.torch.install(device_conf="backend=cuda_vmm,expandable_segments={str(expandable).lower()}")
MiB = 1 << 20

def free_bytes():
    return torch.cuda.mem_get_info()[0]

def as_bytes(t):
    return t.detach().cpu().contiguous().view(torch.uint8)
"""


@needs_gpu
@pytest.mark.parametrize("expandable", [True, False], ids=["expandable", "plain"])
def test_offloaded_tensors_come_back_bit_for_bit_at_the_same_addresses(expandable):
    run_py(install(expandable) + """
g = torch.Generator().manual_seed(7)
with tag("weights"):
    cpu = [torch.randn(n, generator=g).to(torch.bfloat16) for n in (1000, 300_000, 3_000_000)]
    weights = [t.cuda() for t in cpu]
with tag("kv_cache"):
    kv = torch.empty(16 * MiB, dtype=torch.uint8, device="cuda")
    scratch = torch.empty(2 * MiB, dtype=torch.uint8, device="cuda")
del scratch                                         # cached: released too
other = torch.arange(1 << 18, dtype=torch.int32).cuda()          # "default": never slept
ptrs = [t.data_ptr() for t in weights] + [kv.data_ptr()]
host_before = unipool.host_stats()["allocated_bytes"]
reserved_before = torch.cuda.memory_reserved()
tags_before = tag_stats()
assert set(tags_before) >= {"weights", "kv_cache", "default"}, tags_before
tagged_reserved = tags_before["weights"]["reserved_bytes"] + tags_before["kv_cache"]["reserved_bytes"]
free_before = free_bytes()

r = sleep(offload=["weights"], discard=["kv_cache"])
assert r["offloaded_bytes"] == sum(t.numel() * t.element_size() for t in weights), r
assert r["discarded_bytes"] >= 16 * MiB, r
assert r["released_bytes"] == tagged_reserved, (r, tagged_reserved)
assert free_bytes() == free_before + r["released_bytes"]
assert torch.cuda.memory_reserved() == reserved_before - r["released_bytes"]
s = tag_stats()
assert s["weights"]["state"] == "asleep" and s["weights"]["reserved_bytes"] == 0, s
assert s["weights"]["host_bytes"] == r["offloaded_bytes"]
assert s["default"]["state"] == "awake"
assert torch.equal(other.cpu(), torch.arange(1 << 18, dtype=torch.int32))
try:
    with tag("weights"):
        torch.empty(MiB, device="cuda")
    raise SystemExit("allocation from a sleeping tag succeeded")
except RuntimeError as e:
    assert "asleep" in str(e) and "'weights'" in str(e), e
unipool._testing.cuda_validate()

w = wake()
assert w["released_bytes"] == r["released_bytes"] and w["offloaded_bytes"] == r["offloaded_bytes"], w
assert [t.data_ptr() for t in weights] + [kv.data_ptr()] == ptrs
for t, c in zip(weights, cpu):
    assert torch.equal(as_bytes(t), as_bytes(c)), "offloaded contents changed"
kv.copy_(torch.full((16 * MiB,), 3, dtype=torch.uint8))    # mapped again: usable
assert int(kv.cpu().sum()) == 3 * 16 * MiB
assert free_bytes() == free_before
assert unipool.host_stats()["allocated_bytes"] == host_before, "host memory of the offload was kept"
s = tag_stats()
assert s["weights"]["state"] == "awake" and s["weights"]["sleeps"] == 1 and s["weights"]["wakes"] == 1
unipool._testing.cuda_validate()
""")


@needs_gpu
def test_a_graph_captured_before_sleep_replays_after_wake_at_the_same_addresses():
    run_py(install(True) + """
with tag("weights"):
    static_in = torch.zeros(1 << 20, device="cuda")
side = torch.cuda.Stream()
side.wait_stream(torch.cuda.current_stream())
with torch.cuda.stream(side):
    out = static_in * 2                                     # warm-up outside capture
torch.cuda.current_stream().wait_stream(side)
g = torch.cuda.CUDAGraph()
with tag("cuda_graph"):
    with torch.cuda.graph(g):
        out = static_in * 2
        copied = torch.empty(1 << 20, device="cuda")
        copied.copy_(static_in)                             # a captured device copy
def segments_of(ptrs):
    return sorted((s["address"], s["total_size"]) for s in torch.cuda.memory_snapshot()
                  if any(b["address"] in ptrs for b in s["blocks"]))
graph_segments = segments_of((out.data_ptr(), copied.data_ptr()))
ptrs = (static_in.data_ptr(), out.data_ptr(), copied.data_ptr())
graph_reserved = tag_stats()["cuda_graph"]["reserved_bytes"]
assert graph_reserved > 0
static_in.copy_(torch.arange(float(1 << 20)))
torch.cuda.synchronize()
free_before = free_bytes()

r = sleep(offload=["weights"], discard=["cuda_graph"])
s = tag_stats()
assert s["cuda_graph"]["reserved_bytes"] == 0 and s["cuda_graph"]["released_bytes"] == graph_reserved, s
assert r["released_bytes"] >= 0.99 * (graph_reserved + s["weights"]["released_bytes"]), r
assert free_bytes() == free_before + r["released_bytes"]

wake()
assert (static_in.data_ptr(), out.data_ptr(), copied.data_ptr()) == ptrs
copied.copy_(torch.zeros(1 << 20))                          # (kernels do nothing on the null GPU)
g.replay()
torch.cuda.synchronize()
assert torch.equal(copied.cpu(), torch.arange(float(1 << 20))), "the replay did not copy where it used to"
assert segments_of((out.data_ptr(), copied.data_ptr())) == graph_segments
unipool._testing.cuda_validate()
""")


@needs_gpu
def test_misuse_gets_a_clear_error():
    run_py(install(True) + """
with tag("weights"):
    w = torch.ones(1024).cuda()
def raises(kind, needle, f, *args, **kwargs):
    try:
        f(*args, **kwargs)
    except kind as e:
        assert needle in str(e), (needle, str(e))
        return
    raise SystemExit(f"{f.__name__}{args}{kwargs} did not raise {kind.__name__}")
raises(AsleepError, "is awake", wake, ["weights"])
raises(AsleepError, "no tag is asleep", wake)
raises(ValueError, "at least one tag", sleep)
raises(ValueError, "both offloaded and discarded", sleep, offload=["weights"], discard=["weights"])
raises(TypeError, "list of tag names", sleep, offload="weights")
raises(TypeError, "tag names (str)", sleep, discard=[3])
raises(ValueError, "1 to 64 characters", lambda: tag("").__enter__())
raises(TypeError, "must be a str", lambda: tag(None).__enter__())
sleep(offload=["weights"])
raises(AsleepError, "already asleep", sleep, offload=["weights"])
assert issubclass(AsleepError, RuntimeError)
wake(["weights"])
assert torch.equal(w.cpu(), torch.ones(1024))
with tag("a"):
    with tag("b"):
        assert unipool.torch.current_tag() == "b"
    assert unipool.torch.current_tag() == "a"
assert unipool.torch.current_tag() == "default"
""")


@needs_gpu
def test_cuda_malloc_cannot_sleep_and_says_which_backend_can():
    run_py("""
import torch, unipool.torch
unipool.torch.install(device_conf="backend=cuda_malloc")
with unipool.torch.tag("weights"):
    w = torch.ones(1024).cuda()
try:
    unipool.torch.sleep(offload=["weights"])
    raise SystemExit("sleep on cuda_malloc succeeded")
except ValueError as e:
    assert "backend=cuda_vmm" in str(e), e
assert torch.equal(w.cpu(), torch.ones(1024))
""")
