"""What the full route does at process exit, on the sim device backend: the
atexit hook install() registers gives every cached segment back (default and
private pools), leaves live blocks alone, and the allocator itself is never
destroyed, so a block freed during the static destructors that follow (here
one held by the extension's own test table) still finds it."""
from conftest import SIM, run_py

# An atexit function registered *before* install() runs *after* unipool's
# hook (atexit is last in, first out): it reports what the hook left.
PROBE = f"""
import atexit, torch, unipool.torch as ut
from unipool import _C
from unipool import _testing
def report():
    s = _testing.cuda_device_stats(0)
    print("exit_releases", _testing.cuda_exit_releases())
    print("reserved", s["reserved_bytes.all.current"], "allocated", s["allocated_bytes.all.current"])
    print("sim_used", _testing.sim_used_bytes())
    print("num_device_free", s["num_device_free"])
atexit.register(report)
ut.install(device_conf="{SIM},expandable_segments=false")
MiB = 1 << 20
"""


def values(out: str) -> dict:
    d = {}
    for line in out.splitlines():
        words = line.split()
        for k, v in zip(words[::2], words[1::2]):
            if v.lstrip("-").isdigit():
                d[k] = int(v)
    return d


def test_cached_segments_go_back_at_exit_and_live_blocks_stay():
    out = run_py(PROBE + """
keep = _testing.cuda_raw_alloc(3 * MiB)                       # live at exit: its 20 MiB segment stays
h, p = _testing.cuda_allocate(1 * MiB)                        # there too; held in a static table until static destruction
for n in (30, 40, 50):
    _testing.cuda_raw_delete(_testing.cuda_raw_alloc(n * MiB))     # cached segments of their own
_testing.cuda_raw_delete(_testing.cuda_raw_alloc(4096))            # a cached small segment
_testing.cuda_pool_create(0, 1, 0); _testing.cuda_pool_begin(0, 1, 0)
_testing.cuda_raw_delete(_testing.cuda_raw_alloc(8 * MiB))         # a cached segment of a private pool
_testing.cuda_pool_end(0, 1, 0)
s = _testing.cuda_device_stats(0)
print("before_reserved", s["reserved_bytes.all.current"], "before_used", _testing.sim_used_bytes())
""")
    v = values(out)
    assert v["exit_releases"] == 1, out
    # Before: 20 (keep and the 1 MiB block share it) + 30 + 40 + 50 + 2 + 20 (private) MiB.
    assert v["before_reserved"] == (20 + 30 + 40 + 50 + 2 + 20) << 20, out
    assert v["before_used"] == v["before_reserved"]
    # After the hook: only the segment holding live blocks is left, on the device too.
    assert v["reserved"] == 20 << 20 and v["sim_used"] == 20 << 20, out
    assert v["allocated"] == 4 << 20, out
    assert v["num_device_free"] == 5, out


def test_exit_without_any_allocation_is_quiet():
    out = run_py(PROBE)
    v = values(out)
    assert v["exit_releases"] == 1 and v["reserved"] == 0 and v["num_device_free"] == 0, out
