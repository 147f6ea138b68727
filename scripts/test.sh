#!/usr/bin/env bash
# Runs every test of unipool: installs what is missing, checks the format of
# the lines the last commit changed, then builds and runs the ctest suites of
# the release, asan (ASan+UBSan) and tsan presets, a smoke run of each
# benchmark, the Python package's pytest suite (torch extension, on the
# null GPU) and a short libFuzzer session.
#   scripts/test.sh                 # everything
#   UNIPOOL_PRESETS="release" scripts/test.sh
#   UNIPOOL_FUZZ_SECONDS=0 scripts/test.sh   # skip libFuzzer
#   UNIPOOL_FORMAT_BASE=main scripts/test.sh  # check the format of every line changed since main
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/install_deps.sh

# Cheap, so first: the last commit's (or $UNIPOOL_FORMAT_BASE's) changed lines.
echo "=== format of changed lines (scripts/check_format.sh) ==="
scripts/check_format.sh

jobs=$(nproc)
for preset in ${UNIPOOL_PRESETS:-release asan tsan}; do
  echo "=== preset $preset ==="
  cmake --preset "$preset" >/dev/null
  cmake --build --preset "$preset" -j "$jobs"
  ctest --preset "$preset" -j "$jobs"
done

if [ -z "${UNIPOOL_PRESETS:-}" ]; then
  echo "=== preset nocuda (UNIPOOL_CUDA=OFF): the library builds and its unit tests pass ==="
  cmake --preset nocuda >/dev/null
  cmake --build --preset nocuda -j "$jobs" --target unipool unipool_static unipool_unit_tests
  build/nocuda/tests/unipool_unit_tests --gtest_brief=1
fi

fuzz_seconds=${UNIPOOL_FUZZ_SECONDS:-30}
if [ "$fuzz_seconds" -gt 0 ] && command -v clang++ >/dev/null; then
  echo "=== libFuzzer, ${fuzz_seconds}s ==="
  tests/fuzz/run_libfuzzer.sh "$fuzz_seconds"
fi

echo "=== python package (torch extension) and pytest, on the null GPU ==="
scripts/install_python_package.sh
# torch's own CUDA code runs on the null GPU (tests/nullgpu): no test that
# needs a GPU is skipped (conftest.py fails the run if CUDA is missing).
# -n: one worker per CPU (pytest-xdist): 5 minutes serially, 3 with two
# workers on two CPUs. Tests name their shared pools and files by pid.
UNIPOOL_REQUIRE_CUDA=1 scripts/nullgpu.sh python3 -m pytest -q -n "$jobs" tests/python
