"""Records the device allocation trace of Llama-3.2-1B (shape only, random
weights) served on the null GPU under torch's own CUDA caching allocator,
and writes it in the replay format of bench/device (see README.md here):

    python3 bench/model/record_trace.py [--out FILE] [--quick]

It re-executes itself on the null GPU (unipool.testing.nullgpu, 80 GiB
device) when not already there. Benchmark support: the trace is what torch
asks its allocator for; no figure here is a GPU time.
"""
from __future__ import annotations

import argparse
import gzip
import heapq
import io
import os
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
DEFAULT_OUT = HERE.parent / "device" / "traces" / "model_llama1b.trace.gz"
NULLGPU_CONFIG = "capacity=80GiB"
# torch keeps the trace in a ring buffer of this many entries; the run
# checks it stayed below, so no early event was overwritten.
MAX_ENTRIES = 20_000_000


def ensure_null_gpu(argv: list[str]) -> None:
    """Re-executes this script on the null GPU unless it already runs there."""
    if os.environ.get("UNIPOOL_NULLGPU_LIB_DIR") and "libcudart" in os.environ.get("LD_PRELOAD", ""):
        return
    from unipool.testing import nullgpu
    env = nullgpu.environment(config=os.environ.get("UNIPOOL_NULLGPU", NULLGPU_CONFIG))
    os.execve(sys.executable, [sys.executable, str(Path(__file__).resolve()), *argv], env)


class SlotMap:
    """Addresses to small slot numbers, the lowest free slot first, so a
    replay needs as few slots as blocks were ever live at once."""

    def __init__(self) -> None:
        self.by_addr: dict[int, tuple[int, int]] = {}  # addr -> (slot, size)
        self.free: list[int] = []
        self.slots = 0
        self.live_bytes = 0
        self.peak_bytes = 0

    def alloc(self, addr: int, size: int) -> int:
        slot = heapq.heappop(self.free) if self.free else self.slots
        self.slots = max(self.slots, slot + 1)
        self.by_addr[addr] = (slot, size)
        self.live_bytes += size
        self.peak_bytes = max(self.peak_bytes, self.live_bytes)
        return slot

    def release(self, addr: int) -> int | None:
        entry = self.by_addr.pop(addr, None)
        if entry is None:
            return None
        heapq.heappush(self.free, entry[0])
        self.live_bytes -= entry[1]
        return entry[0]


def convert(events: list[dict], warmup_at: int) -> tuple[list[str], dict]:
    """The trace's lines from torch's device_traces events; counts too.
    warmup_at: index of the first event after warm-up."""
    slots, streams = SlotMap(), {0: 0}
    lines: list[str] = []
    counts = {"allocations": 0, "frees": 0, "freed_at_end": 0, "missed_frees": 0}
    for i, e in enumerate(events):
        if i == warmup_at:
            lines.append("w")
        action, addr = e["action"], e["addr"]
        if action == "alloc":
            if addr in slots.by_addr:      # its free was not recorded
                lines.append(f"- {slots.release(addr)}")
                counts["missed_frees"] += 1
            stream = streams.setdefault(e["stream"], len(streams))
            lines.append(f"+ {slots.alloc(addr, e['size'])} {e['size']} {stream}")
            counts["allocations"] += 1
        elif action in ("free_requested", "free_completed"):
            # The program's free is free_requested; free_completed follows
            # (later, behind a record_stream's events) and finds nothing live.
            slot = slots.release(addr)
            if slot is not None:
                lines.append(f"- {slot}")
                counts["frees"] += 1
    if warmup_at >= len(events):
        lines.append("w")
    for addr in sorted(slots.by_addr, key=lambda a: slots.by_addr[a][0]):
        lines.append(f"- {slots.release(addr)}")
        counts["freed_at_end"] += 1
    counts.update(slots=slots.slots, peak_live_bytes=slots.peak_bytes, streams=len(streams))
    return lines, counts


def record(schedule, quick: bool) -> tuple[list[dict], int, float]:
    """Serves `schedule` with the 1B model under torch's allocator, recording;
    returns the events, the warm-up index and the seconds it took."""
    import torch
    from schedule import llama

    assert torch.cuda.is_available(), "no CUDA device: is the null GPU preloaded?"
    assert torch.cuda.memory.get_allocator_backend() == "native", "expected torch's own allocator"
    torch.cuda.memory._record_memory_history(enabled="all", context=None, stacks="python",
                                             max_entries=MAX_ENTRIES)
    warmup = []

    def on_step(request: int, step: int) -> None:
        # Warm-up ends after the first request's first decode step: the
        # weights are loaded and one prefill and one decode have run.
        if request == 0 and step == 0:
            warmup.append(len(torch.cuda.memory._snapshot()["device_traces"][0]))

    start = time.perf_counter()
    model = llama.build(llama.LLAMA_1B, "cuda")
    llama.serve(model, schedule, on_step)
    del model
    torch.cuda.synchronize()
    seconds = time.perf_counter() - start
    events = torch.cuda.memory._snapshot()["device_traces"][0]
    torch.cuda.memory._record_memory_history(enabled=None)
    if len(events) >= MAX_ENTRIES:
        raise SystemExit(f"the trace filled torch's ring buffer ({MAX_ENTRIES} entries): events were lost")
    return events, (warmup[0] if warmup else len(events)), seconds


def header(schedule, counts: dict) -> list[str]:
    import torch
    from schedule import describe, llama
    c = llama.LLAMA_1B
    return [
        "# unipool device trace: Llama-3.2-1B served without paging (bench/model/record_trace.py)",
        "# recorded on the null GPU (no GPU computed anything) under torch's CUDA caching allocator,",
        f"# torch {torch.__version__}, torch.cuda.memory._record_memory_history device_traces",
        f"# device: {torch.cuda.get_device_name()}, "
        f"{torch.cuda.mem_get_info()[1] >> 30} GiB (UNIPOOL_NULLGPU={os.environ.get('UNIPOOL_NULLGPU', '')})",
        f"# model: {c.name} params={c.num_parameters()} hidden={c.hidden_size} layers={c.num_layers} "
        f"heads={c.num_heads} kv_heads={c.num_kv_heads} intermediate={c.intermediate_size} "
        f"vocab={c.vocab_size} tied={c.tie_embeddings} bf16",
        "# serving: greedy, one request at a time, KV cache grown by torch.cat each step,",
        "#   flash attention, logits of the last position only",
        f"# schedule (batch x prompt + decode steps): {describe(schedule)}",
        f"# allocations={counts['allocations']} peak_live_bytes={counts['peak_live_bytes']} "
        f"slots={counts['slots']} streams={counts['streams']} freed_at_end={counts['freed_at_end']}",
        "# format: '+ SLOT BYTES STREAM' allocates BYTES (as requested) into SLOT on STREAM (0 = default);",
        "#   '- SLOT' frees SLOT's block; 'w' ends the warm-up (after the first decode step)",
    ]


def write(path: Path, lines: list[str]) -> int:
    path.parent.mkdir(parents=True, exist_ok=True)
    buf = io.BytesIO()
    # mtime=0: the same trace gives the same bytes.
    with gzip.GzipFile(fileobj=buf, mode="wb", compresslevel=9, mtime=0) as gz:
        gz.write(("\n".join(lines) + "\n").encode())
    path.write_bytes(buf.getvalue())
    return len(buf.getvalue())


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--quick", action="store_true", help="the short schedule (a smoke run)")
    args = parser.parse_args(argv)
    ensure_null_gpu(argv)
    sys.path.insert(0, str(HERE))
    from schedule import QUICK_SCHEDULE, SCHEDULE
    schedule = QUICK_SCHEDULE if args.quick else SCHEDULE
    events, warmup_at, seconds = record(schedule, args.quick)
    lines, counts = convert(events, warmup_at)
    size = write(args.out, header(schedule, counts) + lines)
    print(f"recorded on the null GPU in {seconds:.1f} s (host-side): {len(events)} torch trace events")
    print(f"allocations: {counts['allocations']}  peak live bytes: {counts['peak_live_bytes']} "
          f"({counts['peak_live_bytes'] / 2**30:.2f} GiB)  slots: {counts['slots']}  "
          f"streams: {counts['streams']}  freed at end: {counts['freed_at_end']}  "
          f"missed frees: {counts['missed_frees']}")
    print(f"wrote {args.out} ({size} bytes, {len(lines)} lines)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
