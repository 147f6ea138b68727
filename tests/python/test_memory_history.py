"""torch's memory history under unipool's CUDA allocator, on the null GPU:
torch.cuda.memory._record_memory_history / _snapshot / _dump_snapshot and
torch.cuda._memory_viz, through torch's public API; trace trackers attached
through torch's C++ entry point. Each test runs in its own interpreter
(install() must precede CUDA's initialisation)."""
import pytest

from conftest import needs_gpu, run_py

pytestmark = needs_gpu

# Plain segments (cudaMalloc) and expandable ones (VMM): what growth and
# release look like in the trace.
GROW = {"cuda_malloc": "segment_alloc", "cuda_vmm": "segment_map"}
SHRINK = {"cuda_malloc": "segment_free", "cuda_vmm": "segment_unmap"}


def install(backend: str) -> str:
    return f"""
import pickle, time
import torch, unipool, unipool.torch as ut
from unipool import _testing
ut.install(device_conf="backend={backend}")
assert torch.cuda.memory.get_allocator_backend() == "unipool"
MiB = 1 << 20
def trace():
    return torch.cuda.memory._snapshot()["device_traces"][0]
def actions(entries):
    return [e["action"] for e in entries]
"""


@pytest.mark.parametrize("backend", ["cuda_malloc", "cuda_vmm"])
def test_a_workload_is_recorded_in_order_with_addresses_and_sizes(backend):
    grow, shrink = GROW[backend], SHRINK[backend]
    run_py(install(backend) + f"""
torch.cuda.memory._record_memory_history(max_entries=10000, stacks="python")
assert torch._C._cuda_isHistoryEnabled()
stream = torch.cuda.current_stream().cuda_stream
def allocate_weights():
    return torch.empty(3 * MiB, dtype=torch.uint8, device="cuda")
start_us = time.time() * 1e6
a = allocate_weights()
b = torch.empty(1000, dtype=torch.uint8, device="cuda")
pa, pb = a.data_ptr(), b.data_ptr()
del a                                       # used on its own stream only: complete at once
side = torch.cuda.Stream()
c = torch.empty(2 * MiB, dtype=torch.uint8, device="cuda")
pc = c.data_ptr()
c.record_stream(side)
del c                                       # waits for the side stream's event
first = torch.cuda.memory._snapshot()
got = first["device_traces"][0]
assert actions(got) == ["{grow}", "alloc", "{grow}", "alloc", "free_requested", "free_completed",
                        "alloc", "free_requested", "snapshot"], actions(got)
assert [(e["addr"], e["size"]) for e in got if e["action"] == "alloc"] == [
    (pa, 3 * MiB), (pb, 1024), (pc, 2 * MiB)]
assert (got[4]["addr"], got[5]["addr"], got[7]["addr"]) == (pa, pa, pc)
assert all(e["stream"] == stream for e in got if e["action"] != "snapshot")
assert got[-1]["size"] == 2 * MiB + 1024    # the snapshot entry: active bytes then
pending = [b for s in first["segments"] for b in s["blocks"] if b["state"] == "active_pending_free"]
assert [b["size"] for b in pending] == [2 * MiB], pending
# Times are microseconds since the epoch, in order.
times = [e["time_us"] for e in got]
assert times == sorted(times) and start_us - 1e6 < times[0] <= time.time() * 1e6 + 1e6, (start_us, times)
# The alloc of a carries the Python stack that allocated it.
names = [f["name"] for f in got[1]["frames"]]
assert "allocate_weights" in names, names

side.synchronize()
d = torch.empty(512, dtype=torch.uint8, device="cuda")   # this allocation completes c's free
pd = d.data_ptr()
del b, d
torch.cuda.empty_cache()
try:
    torch.empty(4 << 30, dtype=torch.uint8, device="cuda")
    raise SystemExit("no OOM on a 1 GiB device")
except torch.cuda.OutOfMemoryError:
    pass
got = trace()
tail = got[9:]
assert actions(tail[:7]) == ["free_completed", "alloc", "free_requested", "free_completed",
                             "free_requested", "free_completed", "{shrink}"], actions(tail)
assert (tail[0]["addr"], tail[1]["addr"]) == (pc, pd)
assert sorted(actions(tail[6:-2])) == ["{shrink}"] * len(tail[6:-2]) and len(tail[6:-2]) == 2, actions(tail)
released = sum(e["size"] for e in got if e["action"] == "{shrink}")
assert released == sum(e["size"] for e in got if e["action"] == "{grow}")
oom = tail[-2]
assert oom["action"] == "oom" and oom["size"] == 4 << 30 and oom["device_free"] > 0, oom
assert tail[-1]["action"] == "snapshot"
_testing.cuda_validate()
""", env={"UNIPOOL_NULLGPU": "capacity=1GiB,event_lag=never"})


def test_memory_viz_renders_and_the_dump_loads(tmp_path):
    path = tmp_path / "snapshot.pickle"
    run_py(install("cuda_vmm") + f"""
from torch.cuda import _memory_viz
torch.cuda.memory._record_memory_history(max_entries=1000, stacks="python")
xs = [torch.empty(n, dtype=torch.uint8, device="cuda") for n in (1000, 3 * MiB, 7 * MiB, 5 * MiB)]
del xs[2], xs[1]                            # the 7 MiB and 3 MiB blocks
torch.cuda.memory._dump_snapshot({str(path)!r})
with open({str(path)!r}, "rb") as f:
    snap = pickle.load(f)
assert {{"segments", "device_traces"}} <= set(snap), list(snap)
entries = snap["device_traces"][0]
assert actions(entries).count("alloc") == 4 and actions(entries).count("free_completed") == 2
for e in entries:
    assert {{"action", "addr", "size", "stream", "time_us"}} <= set(e), e
for s in snap["segments"]:
    assert {{"address", "total_size", "stream", "segment_type", "blocks", "device"}} <= set(s), s
    for b in s["blocks"]:
        assert {{"size", "state", "requested_size"}} <= set(b), b
html = _memory_viz.trace_plot(snap)
assert "Active Memory Timeline" in html and len(html) > 1000
assert "Active Cached Memory Timeline" in _memory_viz.trace_plot(snap, plot_segments=True)
assert len(_memory_viz.segment_plot(snap)) > 1000
# torch's text rendering of the trace: the four allocations, two frees.
text = _memory_viz.trace(snap)
assert text.count("del ") == 2 and text.count("# free completed for ") == 2, text
""")


def test_the_ring_keeps_the_newest_max_entries():
    run_py(install("cuda_malloc") + """
torch.cuda.memory._record_memory_history(max_entries=5, context=None)
sizes = [(i + 1) * MiB for i in range(10)]
ptrs = []
for n in sizes:
    x = torch.empty(n, dtype=torch.uint8, device="cuda")
    ptrs.append(x.data_ptr())
    del x
got = trace()
assert len(got) == 5, actions(got)
# The newest four events, then the snapshot: the 9 MiB block's completed free,
# the 10 MiB block's alloc and free.
assert actions(got) == ["free_completed", "alloc", "free_requested", "free_completed", "snapshot"], actions(got)
assert got[0]["addr"] == ptrs[-2] and got[0]["size"] == sizes[-2]
assert got[-2]["addr"] == ptrs[-1] and got[-2]["size"] == sizes[-1]
assert all("frames" not in e or not e["frames"] for e in got)   # context=None: no stacks
# A larger max_entries keeps what is there and lets more in.
torch.cuda.memory._record_memory_history(max_entries=100, context=None)
y = torch.empty(MiB, dtype=torch.uint8, device="cuda")
got = trace()
assert len(got) == 5 + 2 and actions(got)[5:] == ["alloc", "snapshot"], actions(got)   # the old five kept
try:
    torch.cuda.memory._record_memory_history(max_entries=0)
    raise SystemExit("max_entries=0 accepted")
except (ValueError, RuntimeError) as e:
    assert "max_entries" in str(e), str(e)
_testing.cuda_validate()
""")


def test_disabling_stops_and_clears_and_state_keeps_block_stacks():
    run_py(install("cuda_malloc") + """
torch.cuda.memory._record_memory_history(max_entries=100, stacks="python")
x = torch.empty(MiB, dtype=torch.uint8, device="cuda")
torch.cuda.memory._record_memory_history(enabled=None)
assert not torch._C._cuda_isHistoryEnabled()
y = torch.empty(MiB, dtype=torch.uint8, device="cuda")
del x
assert torch.cuda.memory._snapshot()["device_traces"] == [[]]

# context="state": trace entries carry no stack, live blocks do.
torch.cuda.memory._record_memory_history(context="state", stacks="python", max_entries=100)
def make_cache():
    return torch.empty(3 * MiB, dtype=torch.uint8, device="cuda")
kv = make_cache()
snap = torch.cuda.memory._snapshot()
assert all(not e.get("frames") for e in snap["device_traces"][0])
live = [b for s in snap["segments"] for b in s["blocks"] if b["state"] == "active_allocated"]
by_size = {b["size"]: b for b in live}
assert "make_cache" in [f["name"] for f in by_size[3 * MiB]["frames"]], by_size[3 * MiB]
assert not by_size[MiB]["frames"], by_size[MiB]   # y: allocated while history was off
del kv
snap = torch.cuda.memory._snapshot()
assert [e["action"] for e in snap["device_traces"][0]][-3:] == ["free_requested", "free_completed", "snapshot"]
_testing.cuda_validate()
""")


def test_skip_actions_and_clear_history():
    run_py(install("cuda_malloc") + """
torch.cuda.memory._record_memory_history(max_entries=100, context=None, skip_actions=["free_requested", "snapshot"])
x = torch.empty(MiB, dtype=torch.uint8, device="cuda")
del x
assert actions(trace()) == ["segment_alloc", "alloc", "free_completed"], actions(trace())
torch.cuda.memory._record_memory_history(max_entries=100, context=None, clear_history=True)
assert actions(trace()) == ["snapshot"]
try:
    torch.cuda.memory._record_memory_history(skip_actions=["frees"])
    raise SystemExit("an unknown action was accepted")
except RuntimeError as e:
    assert "frees" in str(e), str(e)
""")


def test_trackers_attached_through_torch_see_every_entry():
    run_py(install("cuda_malloc") + """
first = _testing.cuda_attach_trace_tracker()
# History off: trackers are still told, as torch's allocator does.
x = torch.empty(MiB, dtype=torch.uint8, device="cuda")
px = x.data_ptr()
del x
seen = _testing.cuda_trace_tracker_entries(first)
assert [(a, addr, size) for a, _, addr, size, _ in seen][1:] == [
    ("alloc", px, MiB), ("free_requested", px, MiB), ("free_completed", px, MiB)], seen
assert seen[0][0] == "segment_alloc" and seen[0][3] == 20 * MiB
second = _testing.cuda_attach_trace_tracker()
torch.cuda.memory._record_memory_history(max_entries=100, context=None)
y = torch.empty(3 * MiB, dtype=torch.uint8, device="cuda")
del y
torch.cuda.empty_cache()
ring = [(e["action"], e["addr"], e["size"]) for e in trace()]
for t in (first, second):
    told = [(a, addr, size) for a, _, addr, size, _ in _testing.cuda_trace_tracker_entries(t)]
    assert told[-len(ring):] == ring, (told, ring)
assert len(_testing.cuda_trace_tracker_entries(second)) == len(ring)
""")


def test_private_pool_events_are_in_the_device_trace():
    run_py(install("cuda_malloc") + """
torch.cuda.memory._record_memory_history(max_entries=100, context=None)
pool = torch.cuda.MemPool()
with torch.cuda.use_mem_pool(pool):
    a = torch.empty(MiB, dtype=torch.uint8, device="cuda")
pa = a.data_ptr()
del a
got = trace()
assert [(e["action"], e["addr"]) for e in got if e["action"] in ("alloc", "free_requested", "free_completed")] == [
    ("alloc", pa), ("free_requested", pa), ("free_completed", pa)], got
_testing.cuda_validate()
""")
