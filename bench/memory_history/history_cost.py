"""What torch's memory history costs under unipool's CUDA allocator: alloc+free
pairs of a small tensor through torch (torch.empty, then del) with history
off, on without stacks, and on with Python stacks at context=alloc and
context=all (and C++ stacks too), interleaved in one process so every mode
sees the same machine state. Run on the null GPU (tests/nullgpu):

    scripts/nullgpu.sh python3 bench/memory_history/history_cost.py [--quick] [--json out.json]

The figures are host-side CPU time per alloc+free pair (torch's dispatch,
the allocator, the history), never GPU time: no GPU is involved.
"""
from __future__ import annotations

import argparse
import json
import sys
import time

import torch

import unipool.torch as ut

# (label, _record_memory_history keyword arguments, or None for off)
MODES = [
    ("off", None),
    ("on, no stacks", dict(context=None, max_entries=100_000)),
    ("context=alloc", dict(context="alloc", stacks="python", max_entries=100_000)),
    ("context=all", dict(context="all", stacks="python", max_entries=100_000)),
    ("context=all, C++ stacks", dict(context="all", stacks="all", max_entries=100_000)),
]


def pairs_ns(n: int) -> float:
    """ns per torch.empty + del of a 4 KiB CUDA tensor, n times."""
    empty = torch.empty
    start = time.perf_counter_ns()
    for _ in range(n):
        x = empty(4096, dtype=torch.uint8, device="cuda")
        del x
    return (time.perf_counter_ns() - start) / n


def set_mode(kwargs) -> None:
    if kwargs is None:
        torch.cuda.memory._record_memory_history(enabled=None)
    else:
        torch.cuda.memory._record_memory_history(**kwargs)


def measure(rounds: int, pairs: int) -> dict:
    never_enabled = [pairs_ns(pairs) for _ in range(rounds)]  # before any history: no observer was ever set
    samples = {label: [] for label, _ in MODES}
    for _ in range(rounds):
        for label, kwargs in MODES:
            set_mode(kwargs)
            # C++ stack unwinding is two orders slower: fewer pairs keep the run short.
            n = pairs // 20 if kwargs and kwargs.get("stacks") == "all" else pairs
            samples[label].append(pairs_ns(n))
    set_mode(None)
    # The fastest round: on a shared machine the others only add noise.
    out = {"off, never enabled": min(never_enabled)}
    out.update({label: min(v) for label, v in samples.items()})
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="reduced counts (the CI smoke)")
    ap.add_argument("--json", help="write the figures here")
    args = ap.parse_args()
    ut.install(device_conf="backend=cuda_malloc")
    if not torch.cuda.is_available():
        print("history_cost: no CUDA device: run under scripts/nullgpu.sh", file=sys.stderr)
        return 2
    rounds, pairs = (3, 2_000) if args.quick else (15, 10_000)
    for _ in range(5):
        pairs_ns(pairs)  # warm-up: segments, torch's dispatch caches, the CPU's clock
    ns = measure(rounds, pairs)
    base = ns["off"]
    print("memory history cost: torch.empty(4096, device='cuda') + del, unipool allocator")
    print("null GPU, host-side CPU time (never GPU time); fastest of", rounds, "rounds")
    print(f"{'mode':<28}{'ns/pair':>10}{'vs off':>9}")
    for label, v in ns.items():
        print(f"{label:<28}{v:>10.0f}{v / base:>8.2f}x")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"unit": "ns per alloc+free pair, host CPU on the null GPU", "rounds": rounds,
                       "pairs": pairs, "modes": ns}, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
