"""The host pool's history from Python: unipool.host_record_history() and
unipool.host_history(), off by default, bounded, with pinning events when
torch's pinned allocator is unipool's (on the null GPU). Each test runs in
its own interpreter: the host pool is process-wide."""
from conftest import needs_gpu, run_py


def test_tensors_are_recorded_in_order_and_off_by_default():
    run_py("""
import torch, unipool
assert unipool.host_history() == []
x = unipool.empty(1000, dtype=torch.uint8)       # history off: not recorded
unipool.host_record_history(100)
a = unipool.empty(3000, dtype=torch.uint8)
b = unipool.empty(4 << 20, dtype=torch.uint8)
pa, pb, px = a.data_ptr(), b.data_ptr(), x.data_ptr()
del a, x                                         # x's free is recorded: it happens while on
h = unipool.host_history()
assert [(e["action"], e["address"]) for e in h] == [("alloc", pa), ("alloc", pb), ("free", pa), ("free", px)], h
assert [e["size"] for e in h[:2]] == [3000, 4 << 20] and h[2]["size"] >= 3000, h
assert [e["time_ns"] for e in h] == sorted(e["time_ns"] for e in h)
unipool.host_validate()
""")


def test_the_ring_is_bounded_and_none_stops():
    run_py("""
import torch, unipool
unipool.host_record_history(4)
ts = [unipool.empty(100 * (i + 1), dtype=torch.uint8) for i in range(10)]
h = unipool.host_history()
assert [e["size"] for e in h] == [700, 800, 900, 1000], h
assert h[-1]["address"] == ts[-1].data_ptr()
unipool.host_record_history(None)
del ts
assert unipool.host_history() == []
for bad in (-1, 2.5):
    try:
        unipool.host_record_history(bad)
        raise SystemExit(f"max_entries={bad!r} accepted")
    except (ValueError, TypeError) as e:
        assert "max_entries" in str(e) or "integer" in str(e), str(e)
""")


@needs_gpu
def test_pinning_is_recorded_for_torchs_pinned_memory():
    run_py("""
import torch, unipool, unipool.torch as ut
ut.install(device_conf="backend=cuda_malloc")
unipool.host_record_history(1000)
x = torch.empty(1 << 20, dtype=torch.uint8).pin_memory()
assert x.is_pinned()
h = unipool.host_history()
pins = [e for e in h if e["action"] == "pin"]
assert pins, h
p = x.data_ptr()
assert any(e["address"] <= p and p + (1 << 20) <= e["address"] + e["size"] for e in pins), (p, pins)
allocs = [e for e in h if e["action"] == "alloc"]
assert [e["address"] for e in allocs] == [p] and allocs[0]["size"] == 1 << 20, allocs
# The pin comes before the block it makes room for.
assert h.index(pins[0]) < h.index(allocs[0])
""")
