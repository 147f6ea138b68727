"""A transformer served on the null GPU (tests/nullgpu) under unipool's
device allocator (cuda_malloc and cuda_vmm backends) and, as the control,
under torch's own: unipool.testing.llama's prefill and decode steps run
through torch's real CUDA code (cuBLAS, flash attention, cat, argmax) with
every tensor from the allocator under test. Kernels compute nothing there,
so the checks are about shapes and memory, never values; the values are
checked on the CPU, where the same code computes."""
import importlib.util
import sys
from pathlib import Path

import pytest
import torch

from conftest import needs_gpu, run_py

ALLOCATORS = ["torch", "cuda_malloc", "cuda_vmm"]
LLAMA_PY = Path(__file__).resolve().parents[2] / "torch_ext" / "unipool" / "testing" / "llama.py"


def setup(allocator: str) -> str:
    """The child's start: the allocator chosen before CUDA initialises, then
    the model code (the checkout's file when the installed package predates
    it)."""
    install = "" if allocator == "torch" else f'unipool.torch.install(device_conf="backend={allocator}")'
    return f"""
import importlib.util, sys
import torch, unipool, unipool._testing, unipool.torch
{install}
UNIPOOL = {allocator != "torch"}
assert torch.cuda.memory.get_allocator_backend() == ("unipool" if UNIPOOL else "native")
try:
    from unipool.testing import llama
except ImportError:
    spec = importlib.util.spec_from_file_location("unipool.testing.llama", {str(LLAMA_PY)!r})
    llama = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = llama
    spec.loader.exec_module(llama)

def device_used():
    free, total = torch.cuda.mem_get_info()        # the null GPU's own books
    return total - free

def check_pool():
    if UNIPOOL:
        # torch's memory_stats are unipool's counters, and its books hold.
        mine, torchs = unipool._testing.cuda_device_stats(0), torch.cuda.memory_stats()
        for key in ("allocation.all.allocated", "allocated_bytes.all.current", "reserved_bytes.all.peak",
                    "num_device_alloc"):
            assert mine[key] == torchs[key], (key, mine[key], torchs[key])
        assert mine["allocation.all.allocated"] > 0 and mine["num_device_alloc"] > 0
        unipool._testing.cuda_validate()
    assert torch.cuda.memory_reserved() == device_used()
"""


@needs_gpu
@pytest.mark.parametrize("allocator", ALLOCATORS)
def test_prefill_and_decode_steps_with_a_growing_kv_cache(allocator):
    run_py(setup(allocator) + """
c = llama.TINY
model = llama.build(c, "cuda")
weights = torch.cuda.memory_allocated()
assert weights >= 2 * c.num_parameters()          # bf16, plus the rotary tables
B, T, N = 3, 17, 4
calls = torch.cuda.memory_stats()["allocation.all.allocated"]
cache = []
with torch.inference_mode(), llama.sdpa_kernel(llama.ATTENTION_BACKENDS):
    logits = llama.forward(model, torch.randint(0, c.vocab_size, (B, T)).cuda(), 0, cache)
    assert logits.shape == (B, c.vocab_size) and logits.is_cuda
    for step in range(N):
        token = logits.argmax(dim=-1, keepdim=True)
        logits = llama.forward(model, token, T + step, cache)
        assert logits.shape == (B, c.vocab_size)
assert len(cache) == c.num_layers
for k, v in cache:
    assert k.shape == v.shape == (B, c.num_kv_heads, T + N, c.head_dim) and k.is_cuda
kv_bytes = c.kv_bytes_per_token() * B * (T + N)
assert torch.cuda.memory_allocated() >= weights + kv_bytes
served = torch.cuda.memory_stats()["allocation.all.allocated"] - calls
assert served > (1 + N) * c.num_layers * 10, served   # every layer's activations came from it
check_pool()
del cache, logits, token, k, v
assert torch.cuda.memory_allocated() == weights, (torch.cuda.memory_allocated(), weights)
del model
assert torch.cuda.memory_allocated() == 0
check_pool()
torch.cuda.empty_cache()
assert torch.cuda.memory_reserved() == device_used() == 0
""")


@needs_gpu
@pytest.mark.parametrize("allocator", ALLOCATORS)
def test_llama_1b_serves_requests(allocator):
    # The real shape: 2.5 GB of weights (untouched null-GPU memory costs no
    # RAM), a long prompt and a wide batch.
    run_py(setup(allocator) + """
c = llama.LLAMA_1B
model = llama.build(c, "cuda")
weights = torch.cuda.memory_allocated()
assert weights >= 2 * c.num_parameters() > 2.4e9
torch.cuda.reset_peak_memory_stats()
requests = [llama.Request(1, 2048, 3), llama.Request(16, 128, 2)]
tokens = llama.serve(model, requests)
assert tokens == 1 * 4 + 16 * 3
peak = torch.cuda.max_memory_allocated()
assert peak >= weights + c.kv_bytes_per_token() * 2048, peak   # the long prompt's KV cache
assert torch.cuda.memory_allocated() == weights
check_pool()
del model
assert torch.cuda.memory_allocated() == 0
""")


def load_llama():
    try:
        from unipool.testing import llama
    except ImportError:
        spec = importlib.util.spec_from_file_location("unipool.testing.llama", LLAMA_PY)
        llama = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = llama
        spec.loader.exec_module(llama)
    return llama


def test_decoding_with_the_kv_cache_matches_full_forwards_on_the_cpu():
    # What makes the null-GPU runs a real model's: on the CPU the same code
    # computes, and each greedy token from the cached decode is the one a
    # forward over the whole sequence so far picks.
    llama = load_llama()
    c = llama.TINY
    model = llama.build(c, "cpu", dtype=torch.float32)
    prompts = torch.randint(0, c.vocab_size, (3, 11), generator=torch.Generator().manual_seed(1))
    with torch.inference_mode():
        tokens = llama.generate(model, prompts, 5)
        assert tokens.shape == (3, 6)
        sequence = torch.cat([prompts, tokens], dim=1)
        for n in range(6):
            logits = llama.forward(model, sequence[:, :11 + n], 0, [])
            assert torch.equal(logits.argmax(dim=-1), tokens[:, n]), n
    assert llama.LLAMA_1B.num_parameters() == 1_235_814_400   # Llama-3.2-1B's count
