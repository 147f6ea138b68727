"""cudagraph-tree checkpoints through torch's own Python bindings
(torch._C._cuda_getCheckpointState / _cuda_setCheckpointPoolState, the calls
torch/_inductor/cudagraph_trees.py makes) on the sim device backend, with the
graph pool filled through torch's allocator pointer. No GPU: no graph is
captured or replayed, the pool is driven the way cudagraph trees drive it."""
from conftest import SIM, run_py

INSTALL = f"""
import torch, unipool.torch as ut
from unipool import _C
from unipool import _testing
ut.install(device_conf="{SIM},expandable_segments=false")
MiB = 1 << 20
POOL = (1, 0)
def in_pool(*sizes):
    _testing.cuda_pool_begin(0, *POOL)
    try:
        return [_testing.cuda_raw_alloc(n) for n in sizes]
    finally:
        _testing.cuda_pool_end(0, *POOL)
def live(*ptrs):
    return _testing.cuda_pool_check_live(0, *POOL, list(ptrs))
def storage(ptr, nbytes):
    # what cudagraph trees rebuild for a live output of a replay: no deleter
    return torch._C._construct_storage_from_data_pointer(ptr, torch.device("cuda", 0), nbytes)
_testing.cuda_pool_create(0, *POOL)
"""


def test_restore_gives_live_storages_deleters_and_frees_through_unipool():
    run_py(INSTALL + """
a, b, c = in_pool(2 * MiB, 3 * MiB, 1000)
state = torch._C._cuda_getCheckpointState(0, POOL)       # after "recording" a graph
assert type(state).__name__ == "_cuda_CUDAAllocator_AllocatorState"
# Later: b and c died, another recording used the pool and its output died too.
_testing.cuda_raw_delete(b); _testing.cuda_raw_delete(c)
(d,) = in_pool(5 * MiB)
_testing.cuda_raw_delete(d)
assert live(a)
# Back to the checkpoint. a and c are live outputs rebuilt without deleters; b is
# dead since then: its DataPtr is released by torch and cudagraph trees frees it.
sa, sc = storage(a, 2 * MiB), storage(c, 1000)
assert not torch._C._has_Standard_Deleter(sa._cdata)
torch._C._cuda_setCheckpointPoolState(0, state, [], [sa._cdata, sc._cdata])
assert live(a, b, c), "the checkpoint's blocks are allocated again, at their addresses"
assert torch._C._has_Standard_Deleter(sa._cdata) and torch._C._has_Standard_Deleter(sc._cdata)
s = _testing.cuda_device_stats(0)
assert s["allocation.all.current"] == 3, s["allocation.all.current"]
assert s["requested_bytes.all.current"] == 5 * MiB + 1000
torch._C._cuda_cudaCachingAllocator_raw_delete(b)        # "ptrs_to_deallocate"
assert live(a, c)
del sa                                                     # the deleter frees through unipool
assert live(c)
torch._C._free_And_Remove_DeleterFn(sc._cdata)             # frees c, leaves the storage without a deleter
assert live()
del sc
assert _testing.cuda_device_stats(0)["allocation.all.current"] == 0
_testing.cuda_pool_validate(0, *POOL)
_testing.cuda_validate()
""")


def test_blocks_live_now_and_in_the_checkpoint_are_both_freed_and_allocated():
    # PyTorch's contract (CheckpointDelta: "a pointer may appear in both"): a block
    # live before and after is reported in both lists; a stale storage holding it
    # loses its deleter and the new DataPtr goes to the rebuilt storage.
    run_py(INSTALL + """
a, b = in_pool(4 * MiB, 1 * MiB)
state = torch._C._cuda_getCheckpointState(0, POOL)
sa = storage(a, 4 * MiB)
torch._C._cuda_setCheckpointPoolState(0, state, [], [sa._cdata])
assert live(a, b) and torch._C._has_Standard_Deleter(sa._cdata)
assert _testing.cuda_device_stats(0)["allocation.all.current"] == 2
del sa
assert live(b)
_testing.cuda_raw_delete(b)
_testing.cuda_pool_validate(0, *POOL)
""")


def test_a_block_not_in_the_checkpoint_must_be_passed_as_stale():
    # torch's own check: a block freed by the restore that nobody owns any more.
    out = run_py(INSTALL + """
(a,) = in_pool(2 * MiB)
state = torch._C._cuda_getCheckpointState(0, POOL)
(x,) = in_pool(6 * MiB)          # live now, not in the checkpoint (after a: another address)
_testing.cuda_raw_delete(a)
try:
    torch._C._cuda_setCheckpointPoolState(0, state, [], [])
    raise SystemExit("no error")
except RuntimeError as e:
    print(e)
# The allocator restored before torch's check failed: x was freed, and a, handed
# back in a DataPtr nobody took, was freed again by that DataPtr's deleter.
assert live()
assert _testing.cuda_device_stats(0)["allocation.all.current"] == 0
_testing.cuda_pool_validate(0, *POOL)
""")
    assert "stale tensors" in out


def test_restore_after_the_segment_was_given_back_is_refused():
    out = run_py(INSTALL + """
(a,) = in_pool(6 * MiB)
state = torch._C._cuda_getCheckpointState(0, POOL)
_testing.cuda_raw_delete(a)
_testing.cuda_pool_empty_cache(*POOL)     # the pool's segment goes back to the device
try:
    torch._C._cuda_setCheckpointPoolState(0, state, [], [])
    raise SystemExit("no error")
except RuntimeError as e:
    print(e)
assert live()
_testing.cuda_pool_validate(0, *POOL)
""")
    assert "setCheckpointPoolState" in out and "given back" in out


def test_checkpoint_of_an_unknown_pool_is_refused():
    out = run_py(INSTALL + """
try:
    torch._C._cuda_getCheckpointState(0, (7, 7))
    raise SystemExit("no error")
except RuntimeError as e:
    print(e)
""")
    assert "could not find private pool (7, 7)" in out
