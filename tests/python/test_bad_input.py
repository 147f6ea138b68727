"""Bad input to every public name of unipool, unipool.torch and
unipool.KVBlockPool is refused with the exception docs/api.md names
(MemoryError / ValueError / TypeError / OverflowError / IndexError
subclasses, torch.OutOfMemoryError for host tensors, RuntimeError for an
install that comes too late) and a message naming the argument; the pool
stays valid. Each test says which public names it covers (@covers, from
conftest), and test_every_public_name_has_a_case fails for a public name
without one. unipool.nixl's cases are in test_nixl.py and
unipool.SharedKVBlockPool's in test_shared_kv_pool.py, beside their
fixtures: imported here, so that their @covers count when this file runs
alone.

install() changes the whole process and must come before CUDA initialises,
so its cases run in a child interpreter (run_py)."""
from __future__ import annotations

import pytest
import torch

import unipool
import unipool.torch
import test_nixl  # noqa: F401 - unipool.nixl's bad-input cases, which register themselves in COVERED
import test_shared_kv_pool  # noqa: F401 - unipool.SharedKVBlockPool's, likewise
from conftest import COVERED, SIM, covers, needs_gpu, run_py
from test_api_names import public_python_names
from unipool import KVBlockPool, KVDoubleFreeError, KVPoolExhaustedError


def kv(num_blocks=8):
    return KVBlockPool(block_shape=(2, 4, 16), dtype=torch.float16, num_blocks=num_blocks, pinned=False)


def staging(n=4):
    return torch.zeros((n, 2, 4, 16), dtype=torch.float16)


# ---- unipool: host tensors ---------------------------------------------------------

HOST_TENSORS = [unipool.empty, unipool.zeros, unipool.ones, lambda *s, **k: unipool.full(s, 1.0, **k)]


@covers("unipool.empty", "unipool.zeros", "unipool.ones", "unipool.full")
@pytest.mark.parametrize("make", HOST_TENSORS)
@pytest.mark.parametrize("size, error, text", [
    ((1.5,), TypeError, "sizes must be ints"),
    ((2, "3"), TypeError, "sizes must be ints"),
    ((-1,), ValueError, "size"),
    ((4, -2), ValueError, "size"),
    ((2**70,), OverflowError, "size"),
    ((2**40, 2**40), OverflowError, "size"),
])
def test_host_tensor_bad_sizes(make, size, error, text):
    before = unipool.host_stats()["allocated_bytes"]
    with pytest.raises(error, match=text):
        make(*size)
    assert unipool.host_stats()["allocated_bytes"] == before
    unipool.host_validate()


@covers("unipool.empty", "unipool.zeros", "unipool.ones", "unipool.full")
@pytest.mark.parametrize("make", HOST_TENSORS)
def test_host_tensor_bad_dtype(make):
    with pytest.raises(TypeError, match="dtype"):
        make(4, dtype="float32")


@covers("unipool.empty")
def test_host_tensor_larger_than_memory_is_torchs_oom():
    with pytest.raises(torch.OutOfMemoryError, match="host pool cannot allocate"):
        unipool.empty(2**40, dtype=torch.float64)  # 8 TiB
    unipool.host_validate()


@covers("unipool.full")
def test_full_with_a_fill_value_that_is_not_a_number():
    with pytest.raises(TypeError, match="value"):
        unipool.full((2,), "x")


@covers("unipool.empty_like")
def test_empty_like_needs_a_tensor():
    for bad in ([1, 2], None, 3):
        with pytest.raises(TypeError, match="empty_like"):
            unipool.empty_like(bad)


# ---- unipool: host pool functions and the library -------------------------------------

@covers("unipool.host_stats", "unipool.host_reset_peak_stats", "unipool.host_trim", "unipool.host_validate")
@pytest.mark.parametrize("name", ["host_stats", "host_reset_peak_stats", "host_trim", "host_validate"])
def test_host_pool_functions_take_no_arguments(name):
    with pytest.raises(TypeError, match=name):
        getattr(unipool, name)(1)
    unipool.host_validate()


@covers("unipool.host_record_history", "unipool.host_history")
def test_host_history_refuses_bad_sizes():
    for bad, error, text in ((1.5, TypeError, "max_entries must be an int"), ("10", TypeError, "max_entries"),
                             (-1, ValueError, "max_entries must be >= 0"), (2**64, OverflowError, "max_entries"),
                             (2**62, MemoryError, "cannot map")):
        with pytest.raises(error, match=text):
            unipool.host_record_history(bad)
    assert unipool.host_history() == []  # still off
    with pytest.raises(TypeError, match="host_history"):
        unipool.host_history(10)
    unipool.host_validate()


@covers("unipool.library_path")
def test_library_path_says_where_it_looked(monkeypatch):
    with pytest.raises(TypeError):
        unipool.library_path("x")
    monkeypatch.setattr(unipool._os, "listdir", lambda d: [])
    with pytest.raises(FileNotFoundError, match="libunipool.so is not in"):
        unipool.library_path()


# ---- unipool.torch ---------------------------------------------------------------

def install_error(call: str, env: dict | None = None) -> str:
    """The type and message of what `call` (on unipool.torch as ut) raises, in a child."""
    return run_py(f"""
import torch, unipool.torch as ut
try:
    {call}
except Exception as e:
    print(type(e).__name__, e)
else:
    print("no error")
""", env)


@covers("unipool.torch.install")
@pytest.mark.parametrize("call, error, text", [
    ('ut.install(device_conf="backend=sim,no_such_key=1")', "ValueError", "no_such_key"),
    ('ut.install(device_conf="backend=sim,memory_fraction=7")', "ValueError", "memory_fraction"),
    ('ut.install(device_conf="backend=nope")', "ValueError", "nope"),
    ('ut.install(host_conf="bogus=1")', "ValueError", "bogus"),
    ('ut.install(host_conf="pinned=off")', "ValueError", "pinned=off"),
    ('ut.install(device_conf=5)', "TypeError", "device_conf"),
    ('ut.install(host_conf=None)', "TypeError", "host_conf"),
])
def test_install_refuses_bad_configurations(call, error, text):
    out = install_error(call)
    assert out.startswith(error) and text in out, out


@covers("unipool.torch.install")
def test_install_after_cuda_initialised_says_what_to_do():
    out = install_error(f'torch.cuda.is_initialized = lambda: True; ut.install(device_conf="{SIM}")')
    assert out.startswith("RuntimeError") and "before CUDA is initialised" in out, out


@needs_gpu
@covers("unipool.torch.install")
def test_install_again_with_another_device_conf_is_refused():
    out = install_error(f'ut.install(device_conf="{SIM}"); ut.install(device_conf="backend=sim,sim_capacity=2GiB")')
    assert out.startswith("RuntimeError") and "already installed" in out, out


@covers("unipool.torch.installed", "unipool.torch.has_cuda_allocator", "unipool.torch.pluggable_allocator")
@pytest.mark.parametrize("name", ["installed", "has_cuda_allocator", "pluggable_allocator"])
def test_torch_queries_take_no_arguments(name):
    with pytest.raises(TypeError, match=name):
        getattr(unipool.torch, name)(1)


@covers("unipool.torch.pluggable_allocator")
def test_pluggable_allocator_without_the_library(monkeypatch):
    monkeypatch.setattr(unipool._os, "listdir", lambda d: [])
    with pytest.raises(FileNotFoundError, match="libunipool.so"):
        unipool.torch.pluggable_allocator()


# ---- unipool.torch: tags, sleep and wake (their behaviour: test_sleep_wake.py) ---

@covers("unipool.torch.tag")
@pytest.mark.parametrize("name, error, text", [
    ("", ValueError, "1 to 64 characters"),
    ("x" * 65, ValueError, "1 to 64 characters"),
    (None, TypeError, "name must be a str"),
    (b"weights", TypeError, "name must be a str"),
])
def test_tag_refuses_bad_names(name, error, text):
    with pytest.raises(error, match=text):
        with unipool.torch.tag(name):
            pass
    assert unipool.torch.current_tag() == "default", "a refused tag was left current"


@covers("unipool.torch.current_tag")
def test_current_tag_takes_no_arguments():
    with pytest.raises(TypeError, match="current_tag"):
        unipool.torch.current_tag("weights")


@covers("unipool.torch.sleep", "unipool.torch.wake")
@pytest.mark.parametrize("call, error, text", [
    (lambda: unipool.torch.sleep(offload="weights"), TypeError, "offload must be a list of tag names"),
    (lambda: unipool.torch.sleep(discard=[b"kv"]), TypeError, "discard must hold tag names"),
    (lambda: unipool.torch.sleep(offload=7), TypeError, "offload must be a list"),
    (lambda: unipool.torch.wake("weights"), TypeError, "tags must be a list of tag names"),
    (lambda: unipool.torch.wake([None]), TypeError, "tags must hold tag names"),
])
def test_sleep_and_wake_refuse_bad_tag_lists(call, error, text):
    with pytest.raises(error, match=text):
        call()


@covers("unipool.torch.sleep", "unipool.torch.wake", "unipool.torch.tag_stats")
def test_sleep_wake_and_tag_stats_before_install_say_so():
    for call in (lambda: unipool.torch.sleep(offload=["weights"]), lambda: unipool.torch.wake(),
                 lambda: unipool.torch.tag_stats(0)):
        with pytest.raises(RuntimeError, match="install"):
            call()


@covers("unipool.torch.tag_stats")
@pytest.mark.parametrize("device, error, text", [("0", TypeError, "device must be an int"),
                                                 (True, TypeError, "device must be an int")])
def test_tag_stats_refuses_a_bad_device(device, error, text):
    with pytest.raises(error, match=text):
        unipool.torch.tag_stats(device)


@needs_gpu
@covers("unipool.torch.tag_stats")
def test_tag_stats_of_a_device_that_does_not_exist():
    run_py(f"""
import torch, unipool.torch
unipool.torch.install(device_conf="{SIM}")
try:
    unipool.torch.tag_stats(5)
    raise SystemExit("tag_stats(5) returned")
except ValueError as e:
    assert "device 5 does not exist" in str(e), e
""")


# ---- KVBlockPool: construction -----------------------------------------------------

@covers("unipool.KVBlockPool", "unipool.KVBlockPool.block_shape", "unipool.KVBlockPool.dtype",
        "unipool.KVBlockPool.block_bytes", "unipool.KVBlockPool.num_blocks")
@pytest.mark.parametrize("kwargs, error, text", [
    (dict(block_bytes=4096), TypeError, "num_blocks"),
    (dict(block_shape=(2, 4), num_blocks=4), TypeError, "dtype"),
    (dict(block_shape=(2, 4), dtype="float16", num_blocks=4), TypeError, "dtype"),
    (dict(block_shape=(2, -4), dtype=torch.float16, num_blocks=4), ValueError, "block_shape"),
    (dict(block_shape=(2, 4), dtype=torch.float16, block_bytes=7, num_blocks=4), ValueError, "block_bytes"),
    (dict(block_bytes=4096, dtype=torch.float16, num_blocks=4), ValueError, "dtype"),
    (dict(block_bytes=0, num_blocks=4), ValueError, "block_bytes"),
    (dict(block_bytes=4096, num_blocks=0), ValueError, "num_blocks"),
    (dict(block_bytes=4096.0, num_blocks=4), TypeError, "block_bytes"),
    (dict(block_bytes=4096, num_blocks=2**64), OverflowError, "num_blocks"),
    (dict(block_bytes=4096, num_blocks=4, alignment=3), ValueError, "alignment"),
    (dict(block_bytes=4096, num_blocks=4, numa_node=1.5), TypeError, "numa_node"),
])
def test_kv_constructor_refuses(kwargs, error, text):
    with pytest.raises(error, match=text):
        KVBlockPool(**{"pinned": False, **kwargs})


# ---- KVBlockPool: ids --------------------------------------------------------------

@covers("unipool.KVBlockPool.alloc", "unipool.KVPoolExhaustedError")
@pytest.mark.parametrize("args, kwargs, error, text", [
    ((), {}, TypeError, r"alloc\(n"),
    ((-1,), {}, ValueError, "n must be >= 0"),
    ((1.5,), {}, TypeError, "n must be an int"),
    (("2",), {}, TypeError, "n must be an int"),
    ((2**70,), {}, OverflowError, "n"),
    ((9,), {}, KVPoolExhaustedError, "9 blocks asked, 8 free"),
    ((2**40,), {}, KVPoolExhaustedError, "blocks asked"),
    ((2,), {"outt": None}, TypeError, "unexpected keyword"),
    ((2,), {"out": torch.zeros(4)}, TypeError, "out must be"),
    ((2,), {"out": torch.zeros((2, 2), dtype=torch.int64)}, TypeError, "out must be"),
    ((4,), {"out": torch.zeros(3, dtype=torch.int64)}, TypeError, "at least n elements"),
    ((2,), {"out": [0, 0]}, TypeError, "out must be"),
])
def test_alloc_refuses(args, kwargs, error, text):
    p = kv()
    with pytest.raises(error, match=text):
        p.alloc(*args, **kwargs)
    assert p.free_blocks == 8, "a refused alloc took blocks"
    p.validate()
    assert issubclass(KVPoolExhaustedError, MemoryError)


@covers("unipool.KVBlockPool.free", "unipool.KVDoubleFreeError")
@pytest.mark.parametrize("ids, error, text", [
    ("freed", KVDoubleFreeError, "double free"),
    ([8], KVDoubleFreeError, "out of range"),
    ([-1], KVDoubleFreeError, "out of range"),
    ("repeated", KVDoubleFreeError, "appears twice"),
    ([0.5], TypeError, "block ids"),
    (torch.tensor([0.0]), TypeError, "block ids"),
    (torch.zeros((1, 1), dtype=torch.int64), TypeError, "block ids"),
    ("abc", TypeError, "block ids"),
    (None, TypeError, "block ids"),
    ([2**70], OverflowError, "block ids"),
])
def test_free_refuses(ids, error, text):
    p = kv()
    live = p.alloc(3)
    if isinstance(ids, str) and ids == "freed":
        p.free([live[0]])
        ids = [live[0]]
    elif isinstance(ids, str) and ids == "repeated":
        ids = [live[1], live[1]]
    before = p.free_blocks
    with pytest.raises(error, match=text):
        p.free(ids)
    assert p.free_blocks == before, "a refused free freed something"
    p.validate()
    assert issubclass(KVDoubleFreeError, ValueError)


@covers("unipool.KVBlockPool.free_and_alloc")
@pytest.mark.parametrize("make_args, error, text", [
    (lambda live: ([99], 1), KVDoubleFreeError, "out of range"),
    (lambda live: (live[:1] + live[:1], 1), KVDoubleFreeError, "appears twice"),
    (lambda live: (live[:1], 9), KVPoolExhaustedError, "blocks asked"),
    (lambda live: (live[:1], 2**40), KVPoolExhaustedError, "blocks asked"),
    (lambda live: (live[:1], -1), ValueError, "n must be >= 0"),
    (lambda live: (live[:1], 1.5), TypeError, "n must be an int"),
    (lambda live: ([1.5], 1), TypeError, "block ids"),
    (lambda live: (live[:1], 1, torch.zeros(1)), TypeError, "out must be"),
    (lambda live: (live[:1],), TypeError, "free_and_alloc"),
])
def test_free_and_alloc_refuses_as_a_whole(make_args, error, text):
    p = kv()
    live = p.alloc(3)
    with pytest.raises(error, match=text):
        p.free_and_alloc(*make_args(live))
    assert p.free_blocks == 5 and all(p.view(i) is not None for i in live)
    p.free(live)  # still live: nothing was freed
    p.validate()


@covers("unipool.KVBlockPool.free_after")
def test_free_after_refuses_bad_ids_and_streams():
    p = kv()
    live = p.alloc(2)
    for bad in ("s", 3, torch.zeros(1)):
        with pytest.raises(TypeError, match="stream"):
            p.free_after(live, bad)
    p.free(live[:1])
    with pytest.raises(KVDoubleFreeError, match="double free"):
        p.free_after(live[:1])
    with pytest.raises(TypeError, match="block ids"):
        p.free_after([0.5])
    assert p.free_blocks == 7
    p.validate()


@needs_gpu
@covers("unipool.KVBlockPool.free_after")
def test_free_after_on_a_stream_refuses_freed_ids():
    p = kv()
    live = p.alloc(2)
    p.free(live)
    s = torch.cuda.Stream()
    with pytest.raises(KVDoubleFreeError, match="double free"):
        p.free_after(live, s)
    assert p.free_blocks == 8
    p.validate()


@covers("unipool.KVBlockPool.is_live")
@pytest.mark.parametrize("ids, error, text", [
    (1.5, TypeError, "block ids must be a tensor, a list or a tuple of ints, got float"),
    (None, TypeError, "got NoneType"),
    ("0", TypeError, "got str"),
    ([0.5], TypeError, "block ids must be ints"),
    (torch.tensor([0.0]), TypeError, "1-D tensor of integers"),
    (torch.zeros((1, 1), dtype=torch.int64), TypeError, "1-D tensor of integers"),
    (2**70, OverflowError, "too big"),
])
def test_is_live_refuses(ids, error, text):
    p = kv()
    live = p.alloc(2)
    with pytest.raises(error, match=text):
        p.is_live(ids)
    assert p.free_blocks == 6 and p.is_live(live)
    p.validate()


@covers("unipool.KVBlockPool.is_live")
def test_is_live_of_ids_out_of_range_or_freed_is_false():
    p = kv()
    live = p.alloc(3)
    p.free(live[2:])
    assert p.is_live(live[0]) and p.is_live(live[:2]) and p.is_live(torch.tensor(live[:2], dtype=torch.int32))
    for ids in (-1, 8, 2**40, live[2], live, [live[0], 8], [live[0], -1], torch.tensor([live[0], -1]),
                torch.tensor([live[1], 8], dtype=torch.int32)):
        assert p.is_live(ids) is False, ids  # -1 is not the last block
    assert p.free_blocks == 6
    p.validate()


@covers("unipool.KVBlockPool.collect_deferred", "unipool.KVBlockPool.stats", "unipool.KVBlockPool.reset_peak_stats",
        "unipool.KVBlockPool.validate")
@pytest.mark.parametrize("name", ["collect_deferred", "stats", "reset_peak_stats", "validate"])
def test_kv_queries_take_no_arguments(name):
    p = kv()
    with pytest.raises(TypeError, match=name):
        getattr(p, name)(1)
    p.validate()


@covers("unipool.KVBlockPool.block_bytes", "unipool.KVBlockPool.stride", "unipool.KVBlockPool.num_blocks",
        "unipool.KVBlockPool.free_blocks", "unipool.KVBlockPool.pinned", "unipool.KVBlockPool.pinning_state")
@pytest.mark.parametrize("name", ["block_bytes", "stride", "num_blocks", "free_blocks", "pinned", "pinning_state"])
def test_kv_properties_are_read_only(name):
    p = kv()
    with pytest.raises(AttributeError, match=name):
        setattr(p, name, 1)
    assert p.num_blocks == 8 and p.free_blocks == 8


@covers("unipool.KVBlockPool.alloc", "unipool.KVBlockPool.free", "unipool.KVBlockPool.stats",
        "unipool.KVBlockPool.validate", "unipool.KVBlockPool.num_blocks")
def test_a_pool_whose_init_never_ran_says_so():
    p = KVBlockPool.__new__(KVBlockPool)
    for call in (lambda: p.alloc(1), lambda: p.free([0]), p.stats, p.validate, lambda: p.num_blocks):
        with pytest.raises(RuntimeError, match="not initialised"):
            call()


# ---- KVBlockPool: memory ------------------------------------------------------------

@covers("unipool.KVBlockPool.view")
@pytest.mark.parametrize("ids, error, text", [
    (-1, IndexError, "out of range"),
    (8, IndexError, "out of range"),
    (2**70, IndexError, "out of range"),
    ([0, 8], IndexError, "out of range"),
    (torch.tensor([3, -1]), IndexError, "out of range"),
    (1.5, TypeError, "block id must be an int"),
    (None, TypeError, "block id must be an int"),
])
def test_view_refuses(ids, error, text):
    with pytest.raises(error, match=text):
        kv().view(ids)


@covers("unipool.KVBlockPool.blocks")
def test_blocks_is_the_arena_and_nothing_past_it():
    p = kv()
    assert p.blocks.shape == (8, 2, 4, 16)
    with pytest.raises(IndexError):
        p.blocks[8]


def copy_cases(slots_name):
    return [
        (dict(device_tensor=torch.zeros((4, 2, 4, 16), dtype=torch.float32)), ValueError, "dtype"),
        (dict(device_tensor=torch.zeros((4, 2, 4, 8), dtype=torch.float16)), ValueError, "block shape"),
        (dict(device_tensor="x"), TypeError, "tensor"),
        (dict(ids="freed"), ValueError, "is not allocated"),
        (dict(ids=[8]), IndexError, "block id 8 out of range"),
        (dict(ids=[-1]), IndexError, "out of range"),
        (dict(ids=[0.5]), TypeError, "block ids"),
        ({slots_name: [4]}, IndexError, "slot 4 out of range"),
        ({slots_name: [0, 1]}, ValueError, "differ in length"),
    ]


@covers("unipool.KVBlockPool.copy_to_device")
@pytest.mark.parametrize("case, error, text", copy_cases("dst"))
def test_copy_to_device_refuses(case, error, text):
    check_copy_refused("copy_to_device", "dst", case, error, text)


@covers("unipool.KVBlockPool.copy_from_device")
@pytest.mark.parametrize("case, error, text", copy_cases("src"))
def test_copy_from_device_refuses(case, error, text):
    check_copy_refused("copy_from_device", "src", case, error, text)


def check_copy_refused(method, slots_name, case, error, text):
    p = kv()
    live = p.alloc(2)
    p.view(live[0]).fill_(3)
    p.free(live[1:])
    ids = case.get("ids", live[:1])
    if ids == "freed":
        ids = live[1:]
    tensor = case.get("device_tensor", staging())
    slots = {k: v for k, v in case.items() if k == slots_name}
    with pytest.raises(error, match=text):
        getattr(p, method)(ids, tensor, **slots)
    if isinstance(tensor, torch.Tensor) and tensor.dtype == torch.float16 and tensor.shape[1:] == (2, 4, 16):
        assert bool((tensor == 0).all()), "a refused copy wrote the tensor"
    assert bool((p.view(live[0]) == 3).all()), "a refused copy wrote the block"
    p.validate()


@needs_gpu
@covers("unipool.KVBlockPool.copy_to_device", "unipool.KVBlockPool.copy_from_device")
def test_copies_to_a_cuda_tensor_refuse_freed_ids_and_bad_streams():
    p = kv()
    live = p.alloc(2)
    p.free(live[1:])
    dev = torch.zeros((4, 2, 4, 16), dtype=torch.float16, device="cuda")
    with pytest.raises(ValueError, match="is not allocated"):
        p.copy_to_device(live[1:], dev)
    with pytest.raises(TypeError, match="stream"):
        p.copy_from_device(live[:1], dev, "not a stream")
    p.validate()


# ---- coverage ------------------------------------------------------------------------

def test_every_public_name_has_a_case():
    missing = public_python_names() - COVERED
    assert missing == set(), "public names without a bad-input case here or in test_nixl.py"
    stale = COVERED - public_python_names()
    assert stale == set(), "cases for names that are not public (renamed?)"
