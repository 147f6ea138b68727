#!/usr/bin/env bash
# The main job: builds the release preset and runs the benchmarks, printing
# their tables and writing JSON into bench/results/.
#   scripts/bench.sh            # full runs
#   scripts/bench.sh --quick    # reduced counts (what CI runs)
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/install_deps.sh
cmake --preset release >/dev/null
cmake --build --preset release -j "$(nproc)"

mkdir -p bench/results
build/release/bench/offset_util/offset_util "$@" --json bench/results/offset_util.json
