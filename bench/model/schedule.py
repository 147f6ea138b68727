"""The serving schedule bench/model runs: requests served one after the
other, each a batch of prompts of one length, prefilled, then decoded.

It covers batch sizes 1 to 64 and prompt lengths 128 to 4096, in an order
that makes sizes go up and down as a server's traffic does. The largest
prefill is 65,536 tokens (64 x 1024, 32 x 2048, 16 x 4096): about 7 GiB of
activations of the 1B model plus 2 GiB of KV cache, well inside an 80 GiB
device, so no schedule entry depends on how an allocator handles running
out of memory.
"""
import importlib.util
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def import_llama():
    """unipool.testing.llama: the installed package's, else (an install older
    than the model) the checkout's file, registered under the same name."""
    try:
        from unipool.testing import llama
        return llama
    except ImportError:
        name = "unipool.testing.llama"
        spec = importlib.util.spec_from_file_location(name, REPO / "torch_ext/unipool/testing/llama.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
        return module


llama = import_llama()
Request = llama.Request

SCHEDULE = [Request(b, p, d) for b, p, d in [
    (1, 128, 128), (8, 512, 64), (64, 128, 128), (4, 4096, 64), (16, 1024, 96), (2, 2048, 128),
    (32, 256, 128), (1, 4096, 64), (64, 1024, 32), (16, 4096, 32), (8, 128, 256), (32, 2048, 32),
    (48, 512, 64), (4, 1024, 128), (2, 256, 256), (64, 512, 64),
]]

# For CI smoke runs: the same extremes of batch and prompt, few steps.
QUICK_SCHEDULE = [Request(b, p, d) for b, p, d in [
    (1, 128, 4), (64, 128, 4), (4, 4096, 2), (16, 1024, 4), (64, 512, 2),
]]


def describe(schedule: list[Request]) -> str:
    return " ".join(f"{r.batch}x{r.prompt_len}+{r.decode_steps}" for r in schedule)
