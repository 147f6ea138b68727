#!/usr/bin/env bash
# Builds the range allocator's libFuzzer target with clang in build/fuzz and
# runs it for a while, keeping the corpus between runs.
#   tests/fuzz/run_libfuzzer.sh                # 60 seconds
#   tests/fuzz/run_libfuzzer.sh 600            # ten minutes
#   tests/fuzz/run_libfuzzer.sh 60 -jobs=2     # extra arguments go to libFuzzer
# A crash leaves its input in build/fuzz/artifacts/; replay it with
#   build/fuzz/tests/range_allocator_fuzz build/fuzz/artifacts/crash-...
# or with the fixed-seed driver of any build:
#   build/release/tests/range_allocator_fuzz_fixed_seed build/fuzz/artifacts/crash-...
set -euo pipefail

root=$(cd "$(dirname "$0")/../.." && pwd)
seconds=${1:-60}
shift $(( $# > 0 ? 1 : 0 ))
build=${UNIPOOL_FUZZ_BUILD_DIR:-$root/build/fuzz}
cc=${UNIPOOL_FUZZ_CC:-clang}
cxx=${UNIPOOL_FUZZ_CXX:-clang++}

if ! command -v "$cxx" >/dev/null; then
  echo "run_libfuzzer: $cxx not found (apt-get install clang libclang-rt-14-dev)" >&2
  exit 1
fi

CC=$cc CXX=$cxx cmake -S "$root" -B "$build" -G Ninja \
  -DCMAKE_C_COMPILER="$cc" -DCMAKE_CXX_COMPILER="$cxx" \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DUNIPOOL_BUILD_TESTS=ON -DUNIPOOL_BUILD_BENCH=OFF -DUNIPOOL_CUDA=OFF >/dev/null
cmake --build "$build" --target range_allocator_fuzz

fuzzer=$build/tests/range_allocator_fuzz
if [ ! -x "$fuzzer" ]; then
  echo "run_libfuzzer: $fuzzer was not built (is libFuzzer, libclang-rt-*-dev, installed?)" >&2
  exit 1
fi

corpus=$build/corpus
artifacts=$build/artifacts
mkdir -p "$corpus" "$artifacts"
echo "run_libfuzzer: ${seconds}s, corpus $corpus"
exec "$fuzzer" -max_total_time="$seconds" -max_len=4096 -print_final_stats=1 \
  -artifact_prefix="$artifacts/" "$@" "$corpus"
