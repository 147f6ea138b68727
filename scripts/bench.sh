#!/usr/bin/env bash
# The main job: builds the release preset, runs every benchmark (printing its
# tables), keeps each one's JSON and stdout in bench/results/ (ignored by git:
# results are outputs), then renders the docs' tables and plots from them.
#   scripts/bench.sh            # full runs (about 25 minutes on 2 cores), then the docs
#   scripts/bench.sh --quick    # reduced counts (what the CI smoke runs); the docs are left alone
#   scripts/bench.sh --render   # no runs: render the docs from bench/results/ as it is
set -euo pipefail
cd "$(dirname "$0")/.."

out=bench/results
render() {
  echo "=== docs: tables and plots from $out (bench/render_docs.py) ==="
  python3 bench/render_docs.py "$out"
}
if [ "${1:-}" = "--render" ]; then
  render
  exit 0
fi
quick=0
for a in "$@"; do [ "$a" = "--quick" ] && quick=1; done

scripts/install_deps.sh
cmake --preset release >/dev/null
cmake --build --preset release -j "$(nproc)"

mkdir -p "$out"
bin=build/release/bench

# Each benchmark's stdout is kept beside its JSON: the docs quote some of its tables.
echo "=== offset_util: range-allocator utilization (docs/benchmarks.md) ==="
"$bin/offset_util/offset_util" "$@" --json "$out/offset_util.json" | tee "$out/offset_util.txt"

echo "=== device_bench: device pool trace replay (docs/device_pool.md) ==="
$([ -e build/release/nullgpu/libcudart.so.13 ] && echo scripts/nullgpu.sh) "$bin/device/device_bench" "$@" \
  --json "$out/device.json" | tee "$out/device.txt"

echo "=== unipool_host_bench: host allocators (docs/host_benchmarks.md) ==="
"$bin/host/unipool_host_bench" "$@" --json "$out/host.json" | tee "$out/host.txt"

echo "=== programs: /bin/true and sqlite's speedtest1 under LD_PRELOAD (docs/host_benchmarks.md) ==="
python3 bench/host/programs.py "$@" --json "$out/programs.json" | tee "$out/programs.txt"

echo "=== kv_offload: KV-cache offload pool (docs/kv_offload.md) ==="
scripts/install_python_package.sh
# On the null GPU the pool pins its arena, and torch's pinned allocator is a peer.
scripts/nullgpu.sh python3 bench/kv_offload/kv_offload.py "$@" --cpp "$bin/kv_offload/kv_alloc_cpp" \
  --json "$out/kv_offload.json" | tee "$out/kv_offload.txt"

echo "=== shared_kv: one KV pool for a node's processes (docs/kv_offload.md) ==="
"$bin/kv_offload/shared_kv_bench" "$@" --json "$out/shared_kv.json" | tee "$out/shared_kv.txt"

echo "=== transfer: KV blocks between NIXL agents over UCX, loopback, this CPU (docs/transfer.md) ==="
python3 bench/transfer/transfer.py "$@" --json "$out/transfer.json" | tee "$out/transfer.txt"

echo "=== memory history: torch's _record_memory_history under unipool, null GPU (docs/pytorch.md) ==="
scripts/nullgpu.sh python3 bench/memory_history/history_cost.py "$@" --json "$out/memory_history.json"

echo "=== sleep and wake: Llama-3.2-1B's memory given back and taken again, null GPU (docs/device_pool.md) ==="
python3 bench/sleep_wake/sleep_wake.py "$@" --json "$out/sleep_wake.json" | tee "$out/sleep_wake.txt"

echo "=== model live: Llama-3.2-1B served under each device allocator, null GPU (bench/model/README.md) ==="
python3 bench/model/live.py "$@" --json "$out/model_live.json" | tee "$out/model_live.txt"

# Quick runs measure too little to be quoted: the docs keep the full runs' figures.
if [ "$quick" = 1 ]; then
  echo "=== docs left alone (--quick); results in $out ==="
else
  render
fi
