"""The pinned host allocator (at::HostAllocator over the host pool),
registered by install() for kCUDA and driven directly (pin_memory() needs a
driver in torch itself). install() pins (pinned=on), which needs a device
to pin with: these run on a GPU or the null GPU."""
from conftest import SIM, needs_gpu, run_py

INSTALL = f"""
import torch, unipool, unipool.torch as ut
from unipool import _C
from unipool import _testing
ut.install(device_conf="{SIM}", host_conf="pinned=on,thread_cache=none")
assert _testing.host_allocator_is_unipool()
"""


@needs_gpu
def test_exact_sizes_and_stats():
    run_py(INSTALL + """
sizes = [1, 100, 4097, 1 << 20, (1 << 20) + 1, (5 << 20) + 17]
hs = [_testing.host_alloc(n) for n in sizes]
s = _testing.host_allocator_stats()
assert s["active_requests.current"] == len(sizes)
# No power-of-two rounding: (5 MiB + 17) costs about 5 MiB, not 8.
assert s["active_bytes.current"] < sum(sizes) * 1.13 + 64 * len(sizes), s["active_bytes.current"]
assert s["active_bytes.current"] >= sum(sizes)
for h, _ in hs:
    _testing.host_free(h)
s = _testing.host_allocator_stats()
assert s["active_requests.current"] == 0 and s["active_requests.peak"] == len(sizes)
assert s["num_host_free"] == len(sizes)
_testing.host_allocator_reset_peak()
assert _testing.host_allocator_stats()["active_requests.peak"] == 0
_testing.host_allocator_reset_accumulated()
assert _testing.host_allocator_stats()["allocations.allocated"] == 0
_testing.host_allocator_empty_cache()
unipool.host_validate()
""")


@needs_gpu
def test_record_event_holds_the_block_until_the_fence():
    run_py(INSTALL + """
h, p = _testing.host_alloc(1 << 20)
assert _testing.host_record_event(h, 3, False)         # our ctx: recorded
assert _testing.host_record_event(h, 4, False)         # a second stream
assert not _testing.host_record_event(h, 3, True)      # a ctx it did not create: refused, no crash
before = unipool.host_stats()["deferred_blocks"]
_testing.host_free(h)
assert unipool.host_stats()["deferred_blocks"] == before + 1
# Held (not reusable) until the copies' fences complete.
assert unipool.host_stats()["deferred_bytes"] >= 1 << 20
assert _testing.sim_outstanding_fences() == 2
_testing.sim_complete_all()
_testing.host_allocator_empty_cache()                  # collects completed deferrals
assert unipool.host_stats()["deferred_blocks"] == before
assert _testing.sim_outstanding_fences() == 0
unipool.host_validate()
""")


def test_zero_size_is_a_null_dataptr():
    run_py(INSTALL + """
h, p = _testing.host_alloc(0)
assert p == 0
_testing.host_free(h)
""")


@needs_gpu
def test_pin_memory_uses_unipool():
    run_py(INSTALL.replace(SIM, "") + """
x = torch.empty(1000, pin_memory=True)
assert x.is_pinned() and _testing.host_owns(x.data_ptr())
y = x.to("cuda", non_blocking=True); torch.cuda.synchronize()
""")


@needs_gpu
def test_pinned_requests_up_to_max_pin_come_from_the_registered_arenas():
    # A block above huge_threshold gets a mapping (and a registration) of its
    # own; install() raises the threshold to max_pin unless told otherwise,
    # so a request's worth of KV blocks (64 MiB here) reuses arena memory.
    code = """
import torch, unipool, unipool.torch as ut
ut.install(host_conf={conf!r})
for _ in range(4):
    x = torch.empty(64 << 20, dtype=torch.uint8, pin_memory=True)
    assert x.is_pinned()
s = unipool.host_stats()                       # x, the last one, is live
print(s["huge_blocks"], s["large_blocks"], s["pin_registrations"])
del x
unipool.host_validate()
"""
    huge, large, _ = map(int, run_py(code.format(conf="pinned=on")).split())
    assert (huge, large) == (0, 1)
    # An explicit threshold is kept: the same requests are huge blocks then.
    huge, large, _ = map(int, run_py(code.format(conf="pinned=on,huge_threshold=32MiB")).split())
    assert huge == 1 and large == 0
