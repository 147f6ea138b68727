"""Serves Llama-3.2-1B's shape (random weights) on the null GPU under each
device allocator, each in its own process, and compares what they reserve:

    python3 bench/model/live.py [--quick] [--json FILE] [--only NAME,...]

Allocators: torch (its CUDA caching allocator as shipped), torch:expandable
(expandable_segments:True), unipool (unipool.torch.install, cuda_malloc
backend), unipool:expandable (cuda_vmm backend, expandable segments).

On the null GPU (tests/nullgpu) no kernel computes: peaks and call counts
are those a GPU run would show for the same requests, times are host-side
only (Python, torch's dispatch, the allocator), never GPU times.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
NULLGPU_CONFIG = "capacity=80GiB"
ALLOCATORS = {
    # name: (PYTORCH_ALLOC_CONF, unipool device_conf or None for torch's own)
    "torch": ("", None),
    "torch:expandable": ("expandable_segments:True", None),
    "unipool": ("", "backend=cuda_malloc"),
    "unipool:expandable": ("", "backend=cuda_vmm,expandable_segments=true"),
}
# (allocator, the one it should not reserve more than)
TARGETS = [("unipool", "torch"), ("unipool:expandable", "torch:expandable")]
GiB = 1 << 30


def child(name: str, quick: bool) -> dict:
    """Runs the schedule in this process under allocator `name`; returns
    its figures."""
    _, device_conf = ALLOCATORS[name]
    if device_conf is not None:
        import unipool.torch
        unipool.torch.install(device_conf=device_conf)   # before CUDA initialises
    import torch
    from schedule import QUICK_SCHEDULE, SCHEDULE, llama

    backend = torch.cuda.memory.get_allocator_backend()
    assert backend == ("unipool" if device_conf else "native"), backend
    wall, cpu = time.perf_counter(), time.process_time()
    model = llama.build(llama.LLAMA_1B, "cuda")
    tokens = llama.serve(model, QUICK_SCHEDULE if quick else SCHEDULE)
    del model
    torch.cuda.synchronize()
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    s = torch.cuda.memory_stats()
    if device_conf is not None:
        import unipool._testing
        unipool._testing.cuda_validate()                       # the pool's books are consistent
    return {
        "allocator": name, "backend": backend, "tokens": tokens,
        "peak_reserved": torch.cuda.max_memory_reserved(),
        "peak_allocated": torch.cuda.max_memory_allocated(),
        "allocations": s["allocation.all.allocated"],
        "device_allocs": s["num_device_alloc"], "device_frees": s["num_device_free"],
        "allocated_at_end": torch.cuda.memory_allocated(),
        "wall_s": wall, "cpu_s": cpu,
    }


def run_child(name: str, quick: bool) -> dict:
    """One allocator in a fresh process on the null GPU: an allocator must be
    chosen before CUDA initialises, and peaks must not carry over."""
    from unipool.testing import nullgpu
    env = nullgpu.environment(config=os.environ.get("UNIPOOL_NULLGPU", NULLGPU_CONFIG))
    for key in ("UNIPOOL_INSTALL", "PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF"):
        env.pop(key, None)
    if ALLOCATORS[name][0]:
        env["PYTORCH_ALLOC_CONF"] = ALLOCATORS[name][0]
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", name] + (["--quick"] if quick else [])
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=1800)
    if r.returncode != 0:
        raise RuntimeError(f"{name} failed ({r.returncode}):\n{r.stdout}\n{r.stderr}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def table(results: list[dict]) -> list[str]:
    head = (f"{'allocator':<20}{'peak reserved':>14}{'peak alloc':>12}{'util':>8}{'allocations':>13}"
            f"{'dev calls':>11}{'wall s':>9}{'cpu s':>8}")
    rows = [head, "-" * len(head)]
    for r in results:
        util = r["peak_allocated"] / r["peak_reserved"] if r["peak_reserved"] else 0.0
        rows.append(f"{r['allocator']:<20}{r['peak_reserved'] / GiB:>10.3f} GiB{r['peak_allocated'] / GiB:>8.3f} GiB"
                    f"{util:>8.4f}{r['allocations']:>13}{r['device_allocs'] + r['device_frees']:>11}"
                    f"{r['wall_s']:>9.2f}{r['cpu_s']:>8.2f}")
    return rows


def targets(results: list[dict]) -> list[str]:
    by = {r["allocator"]: r for r in results}
    lines = []
    for mine, peer in TARGETS:
        if mine in by and peer in by:
            a, b = by[mine]["peak_reserved"], by[peer]["peak_reserved"]
            lines.append(f"[{'met' if a <= b else 'missed':<6}] peak reserved {mine} <= {peer}: "
                         f"{a / GiB:.3f} GiB vs {b / GiB:.3f} GiB ({a / b:.4f} x)")
    return lines


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="a much smaller schedule (CI smoke run)")
    parser.add_argument("--json", type=Path, help="write the results here")
    parser.add_argument("--only", help="comma-separated allocators (default: all)")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    sys.path.insert(0, str(HERE))
    if args.child:
        print(json.dumps(child(args.child, args.quick)))
        return 0
    from schedule import QUICK_SCHEDULE, SCHEDULE, describe, llama
    names = args.only.split(",") if args.only else list(ALLOCATORS)
    unknown = [n for n in names if n not in ALLOCATORS]
    if unknown:
        parser.error(f"unknown allocator(s) {unknown}; known: {list(ALLOCATORS)}")
    schedule = QUICK_SCHEDULE if args.quick else SCHEDULE
    print(f"model: {llama.LLAMA_1B.name} ({llama.LLAMA_1B.num_parameters() / 1e9:.2f}e9 parameters, bf16), "
          f"KV cache grown by torch.cat, greedy decode")
    print(f"schedule{' (quick)' if args.quick else ''} (batch x prompt + decode steps): {describe(schedule)}")
    print("ran on the null GPU (no kernel computes): memory figures are the allocators' own, "
          "times are host-side only (not GPU times)\n")
    results = [run_child(name, args.quick) for name in names]
    print("\n".join(table(results)))
    print("\nallocations: torch's requests (allocation.all.allocated); dev calls: "
          "num_device_alloc + num_device_free\n")
    print("\n".join(targets(results)))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({
            "platform": "null GPU (host-side times only)", "quick": args.quick,
            "schedule": [[r.batch, r.prompt_len, r.decode_steps] for r in schedule],
            "results": results, "targets": targets(results)}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
