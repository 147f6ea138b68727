#!/usr/bin/env bash
# The main job: builds the release preset and runs every benchmark, printing
# its tables and writing JSON into bench/results/.
#   scripts/bench.sh            # full runs (about 25 minutes on 2 cores)
#   scripts/bench.sh --quick    # reduced counts (what the CI smoke runs)
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/install_deps.sh
cmake --preset release >/dev/null
cmake --build --preset release -j "$(nproc)"

out=bench/results
mkdir -p "$out"
bin=build/release/bench

echo "=== offset_util: range-allocator utilization (docs/benchmarks.md) ==="
"$bin/offset_util/offset_util" "$@" --json "$out/offset_util.json"

echo "=== device_bench: device pool trace replay (docs/device_pool.md) ==="
$([ -e build/release/nullgpu/libcudart.so.13 ] && echo scripts/nullgpu.sh) "$bin/device/device_bench" "$@" --json "$out/device.json"
python3 bench/device/plot_device.py "$out/device.json" "$out/device_bench.png"

echo "=== unipool_host_bench: host allocators (docs/host_benchmarks.md) ==="
"$bin/host/unipool_host_bench" "$@" --json "$out/host.json"

echo "=== kv_offload: KV-cache offload pool (docs/kv_offload.md) ==="
scripts/install_python_package.sh
# On the null GPU the pool pins its arena, and torch's pinned allocator is a peer.
scripts/nullgpu.sh python3 bench/kv_offload/kv_offload.py "$@" --cpp "$bin/kv_offload/kv_alloc_cpp" \
  --json "$out/kv_offload.json"

echo "=== model live: Llama-3.2-1B served under each device allocator, null GPU (bench/model/README.md) ==="
python3 bench/model/live.py "$@" --json "$out/model_live.json"
