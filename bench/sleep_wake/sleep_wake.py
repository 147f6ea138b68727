"""Sleep and wake of a served model's GPU memory, on the null GPU:

    python3 bench/sleep_wake/sleep_wake.py [--quick] [--json FILE] [--only NAME,...]

Each allocator runs in a process of its own on the null GPU (tests/nullgpu),
with Llama-3.2-1B's shape (random bf16 weights, 1.24e9 parameters), a KV
cache and a captured CUDA graph of an MLP step:

- unipool: unipool.torch.install(backend=cuda_vmm, expandable segments), the
  weights under tag("weights"), the KV cache under tag("kv_cache"), the
  graph under tag("cuda_graph"); sleep(offload=["weights"],
  discard=["kv_cache", "cuda_graph"]), then wake().
- unipool:plain: the same with plain segments (cuda_vmm, no expandable).
- torch_memory_saver (PyPI), its "torch" hook mode: regions "weights" (with
  CPU backup), "kv_cache" and a graph region; pause() then resume().

What is measured, in the same process: the bytes the device got back
(cudaMemGetInfo of the null GPU), sleep and wake time, and the copies of
the offloaded bytes they cannot avoid, through torch on the same device:
"copy out" (device to a warm host buffer) for sleep, "copy in" (host into
device memory allocated just before, which the null GPU, like any host
memory mapped anew, zeroes on first touch) for wake; and the machine's
host memcpy. Also a discard-only sleep of a large KV cache, per 10 GiB.
Times are host CPU times on the null GPU, where device copies are memcpy:
never GPU times.
"""
from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
GiB = 1 << 30
PEERS = ["unipool", "unipool:plain", "torch_memory_saver"]


def best(samples: list[float]) -> float:
    return min(samples)  # a shared, noisy machine only ever adds time


# ---- the child: one allocator, one process ----------------------------------------

def build_model(quick: bool):
    import torch
    from unipool.testing import llama
    config = llama.LLAMA_1B
    if quick:
        config = dataclasses.replace(config, name="llama-3.2-1b-2layers", num_layers=2)
    torch.manual_seed(0)
    return llama, config, llama.build(config, "cuda")


def capture_step(llama, model, impl):
    """A CUDA graph of one MLP step on a static input, and its outputs."""
    import torch
    x = torch.zeros(8, model.config.hidden_size, dtype=torch.bfloat16, device="cuda")
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        llama.mlp(model.layers[0], x)                # warm-up: cuBLAS handles, workspaces
    torch.cuda.current_stream().wait_stream(side)
    g = torch.cuda.CUDAGraph()
    with impl.graph(g, "cuda_graph"):
        y = llama.mlp(model.layers[0], x)
    return g, x, y


def weight_tensors(model):
    import torch
    seen, out = set(), []
    stack = [model]
    while stack:
        obj = stack.pop()
        if isinstance(obj, torch.Tensor):
            if obj.is_cuda and obj.data_ptr() not in seen:
                seen.add(obj.data_ptr())
                out.append(obj)
        elif isinstance(obj, (list, tuple)):
            stack.extend(obj)
        elif hasattr(obj, "__dict__"):
            stack.extend(vars(obj).values())
    return out


def copy_seconds(nbytes: int, rounds: int) -> dict:
    """The copies a sleep and a wake cannot avoid, of nbytes, through torch
    on the same null GPU: device to a warm host buffer (sleep's), host into
    device memory allocated just before (wake's: on the null GPU memory
    mapped anew is zeroed by the kernel on first touch), and host to host
    (the machine's memcpy)."""
    import torch
    host = torch.ones(nbytes, dtype=torch.uint8)
    other = torch.empty(nbytes, dtype=torch.uint8)
    other.copy_(host)
    device = torch.empty(nbytes, dtype=torch.uint8, device="cuda")
    device.copy_(host)
    out, into, memcpy = [], [], []
    for _ in range(rounds):
        torch.cuda.synchronize()
        start = time.perf_counter()
        other.copy_(device)
        torch.cuda.synchronize()
        out.append(time.perf_counter() - start)
        start = time.perf_counter()
        fresh = torch.empty(nbytes, dtype=torch.uint8, device="cuda")
        fresh.copy_(host)
        torch.cuda.synchronize()
        into.append(time.perf_counter() - start)
        del fresh
        torch.cuda.empty_cache()
        start = time.perf_counter()
        other.copy_(host)
        memcpy.append(time.perf_counter() - start)
    del device
    torch.cuda.empty_cache()
    return {"copy_out_s": best(out), "copy_in_s": best(into), "memcpy_s": best(memcpy)}


def checksum(tensors) -> int:
    import torch
    return sum(int(t.detach().view(torch.uint8).cpu().to(torch.int64).sum()) for t in tensors)


class Unipool:
    def __init__(self, expandable: bool):
        import unipool.torch
        unipool.torch.install(device_conf=f"backend=cuda_vmm,expandable_segments={str(expandable).lower()}")
        self.ut = unipool.torch

    def region(self, tag: str, backup: bool):
        return self.ut.tag(tag)

    @contextlib.contextmanager
    def graph(self, g, tag: str):
        import torch
        with self.ut.tag(tag), torch.cuda.graph(g):
            yield

    def sleep(self, offload, discard):
        return self.ut.sleep(offload=offload, discard=discard)

    def wake(self, tags):
        return self.ut.wake(tags)

    def reserved(self, tags) -> int:
        stats = self.ut.tag_stats()
        return sum(stats[t]["reserved_bytes"] for t in tags if t in stats)


class MemorySaver:
    def __init__(self):
        from torch_memory_saver import torch_memory_saver as tms
        tms.hook_mode = "preload"  # its only mode that can pause CUDA graphs
        self.tms = tms

    def region(self, tag: str, backup: bool):
        return self.tms.region(tag=tag, enable_cpu_backup=backup)

    def graph(self, g, tag: str):
        return self.tms.cuda_graph(cuda_graph=g, tag=tag)

    def sleep(self, offload, discard):
        for t in offload + discard:
            self.tms.pause(t)

    def wake(self, tags):
        for t in tags:
            self.tms.resume(t)

    def reserved(self, tags) -> None:
        return None  # not reported per tag


def cycle(impl, offload, discard, free_bytes) -> dict:
    import torch
    torch.cuda.synchronize()
    before = free_bytes()
    start = time.perf_counter()
    impl.sleep(offload, discard)
    slept = time.perf_counter() - start
    released = free_bytes() - before
    start = time.perf_counter()
    impl.wake(offload + discard)
    torch.cuda.synchronize()
    woke = time.perf_counter() - start
    return {"sleep_s": slept, "wake_s": woke, "released_bytes": released}


def child(name: str, quick: bool, rounds: int) -> dict:
    import torch
    impl = MemorySaver() if name == "torch_memory_saver" else Unipool(expandable=name == "unipool")
    free_bytes = lambda: torch.cuda.mem_get_info()[0]  # noqa: E731
    with impl.region("weights", True):
        llama, config, model = build_model(quick)
    weights = weight_tensors(model)
    weight_bytes = sum(t.numel() * t.element_size() for t in weights)
    kv_bytes = (1 if quick else 4) * GiB
    with impl.region("kv_cache", False):
        kv = torch.empty(kv_bytes, dtype=torch.uint8, device="cuda")
    g, x, y = capture_step(llama, model, impl)
    g.replay()
    torch.cuda.synchronize()
    tags = ["weights", "kv_cache", "cuda_graph"]
    tagged = impl.reserved(tags)
    ptrs = [t.data_ptr() for t in weights] + [kv.data_ptr(), x.data_ptr(), y.data_ptr()]
    expect = checksum(weights)
    cycles = [cycle(impl, ["weights"], ["kv_cache", "cuda_graph"], free_bytes) for _ in range(rounds)]
    assert [t.data_ptr() for t in weights] + [kv.data_ptr(), x.data_ptr(), y.data_ptr()] == ptrs, "moved"
    assert checksum(weights) == expect, "the weights changed across sleep and wake"
    g.replay()                                       # the graph's memory is back where it was
    torch.cuda.synchronize()
    discard = [cycle(impl, [], ["kv_cache"], free_bytes) for _ in range(rounds)]
    copies = copy_seconds(weight_bytes, rounds)
    return {
        "allocator": name, "weight_bytes": weight_bytes, "kv_bytes": kv_bytes, "tagged_reserved_bytes": tagged,
        "released_bytes": cycles[0]["released_bytes"],
        "sleep_s": best([c["sleep_s"] for c in cycles]), "wake_s": best([c["wake_s"] for c in cycles]),
        **copies, "memcpy_gbps": weight_bytes / copies["memcpy_s"] / 1e9,
        "discard_sleep_s": best([c["sleep_s"] for c in discard]),
        "discard_released_bytes": discard[0]["released_bytes"],
        "discard_wake_s": best([c["wake_s"] for c in discard]),
    }


# ---- the parent: one child per allocator, then the table --------------------------

def memory_saver_preload(env: dict) -> str | None:
    """LD_PRELOAD for torch_memory_saver's preload mode on the null GPU: its
    hook first, then the null GPU's libraries, ':'-separated (it looks for
    itself among LD_PRELOAD's ':'-separated entries). None without it."""
    import importlib.util
    spec = importlib.util.find_spec("torch_memory_saver")
    if spec is None:
        return None
    site = Path(spec.origin).parents[1]
    hook = site / "torch_memory_saver_hook_mode_preload_cu13.abi3.so"
    lib = Path(env.get("UNIPOOL_NULLGPU_LIB_DIR", ROOT / "build" / "release" / "nullgpu"))
    libs = [lib / n for n in ("libcudart.so.13", "libcublas.so.13", "libcublasLt.so.13") if (lib / n).exists()]
    return ":".join(str(p) for p in [hook, *libs]) if hook.exists() else None


def run_child(name: str, quick: bool, rounds: int) -> dict:
    env = dict(os.environ, UNIPOOL_NULLGPU=os.environ.get("UNIPOOL_NULLGPU", "capacity=80GiB"))
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", name, "--rounds", str(rounds)]
    cmd += ["--quick"] if quick else []
    if name == "torch_memory_saver":
        preload = memory_saver_preload(env)
        if preload is None:
            return {"allocator": name, "error": "torch_memory_saver is not installed (pip install torch-memory-saver)"}
        lib = Path(env.get("UNIPOOL_NULLGPU_LIB_DIR", ROOT / "build" / "release" / "nullgpu"))
        env.update(LD_PRELOAD=preload, LD_LIBRARY_PATH=f"{lib}:{env.get('LD_LIBRARY_PATH', '')}".rstrip(":"))
    else:
        cmd = [str(ROOT / "scripts" / "nullgpu.sh")] + cmd
    r = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=1800)
    if r.returncode != 0:
        tail = (r.stderr.strip().splitlines() or ["(no output)"])[-1]
        return {"allocator": name, "error": tail}
    return json.loads(r.stdout.strip().splitlines()[-1])


def table(results: list[dict]) -> str:
    rows = ["| allocator | released / tagged | sleep | copy out | sleep / copy out | wake | copy in "
            "| wake / copy in | host memcpy | discard-only sleep per 10 GiB |",
            "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in results:
        if "error" in r:
            rows.append(f"| {r['allocator']} | did not run: {r['error']} |" + " |" * 8)
            continue
        tagged = r["tagged_reserved_bytes"]
        share = f"{r['released_bytes'] / tagged:.1%}" if tagged else f"{r['released_bytes'] / GiB:.2f} GiB (no tags)"
        per10 = r["discard_sleep_s"] * 10 * GiB / max(r["discard_released_bytes"], 1)
        ms = lambda s: f"{s * 1e3:.0f} ms"  # noqa: E731
        rows.append(f"| {r['allocator']} | {share} | {ms(r['sleep_s'])} | {ms(r['copy_out_s'])} "
                    f"| {r['sleep_s'] / r['copy_out_s']:.2f}x | {ms(r['wake_s'])} | {ms(r['copy_in_s'])} "
                    f"| {r['wake_s'] / r['copy_in_s']:.2f}x | {ms(r['memcpy_s'])} ({r['memcpy_gbps']:.1f} GB/s) "
                    f"| {per10 * 1e3:.2f} ms |")
    return "\n".join(rows)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="two layers, a 1 GiB KV cache, fewer rounds")
    ap.add_argument("--json", help="write the results here")
    ap.add_argument("--only", help="comma-separated allocators (" + ", ".join(PEERS) + ")")
    ap.add_argument("--rounds", type=int, default=None)
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args()
    rounds = args.rounds or (2 if args.quick else 3)
    if args.child:
        print(json.dumps(child(args.child, args.quick, rounds)))
        return 0
    names = args.only.split(",") if args.only else PEERS
    results = [run_child(n, args.quick, rounds) for n in names]
    print(f"Sleep and wake on the null GPU (host CPU times; device copies are memcpy), best of {rounds}:")
    print(table(results))
    if args.json:
        Path(args.json).write_text(json.dumps({"rounds": rounds, "quick": args.quick, "results": results,
                                               "table": table(results)}, indent=1))
    return 0 if all("error" not in r for r in results if r["allocator"].startswith("unipool")) else 1


if __name__ == "__main__":
    sys.exit(main())
