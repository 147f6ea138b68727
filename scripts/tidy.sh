#!/usr/bin/env bash
# Runs clang-tidy with the checks of .clang-tidy over csrc/ (or the files
# given), using the compile commands of the release preset. Fails on any
# finding. Several minutes on 2 cores, so not part of scripts/test.sh.
#   scripts/tidy.sh                      # every source of the library
#   scripts/tidy.sh csrc/core/*.cpp      # some files
set -euo pipefail
cd "$(dirname "$0")/.."

command -v clang-tidy >/dev/null || { echo "tidy: clang-tidy missing (scripts/install_deps.sh)" >&2; exit 1; }
# Configuring writes build/release/compile_commands.json; nothing is built.
cmake --preset release >/dev/null

if [ $# -gt 0 ]; then
  files=("$@")
else
  # The library's sources, as the build compiles them (CUDA ones only if built).
  mapfile -t files < <(python3 -c '
import json
seen = {e["file"] for e in json.load(open("build/release/compile_commands.json")) if "/csrc/" in e["file"]}
print("\n".join(sorted(seen)))')
fi

failed=0
for f in "${files[@]}"; do
  clang-tidy -p build/release --quiet "$f" 2>/dev/null || failed=1
done
if [ "$failed" = 1 ]; then
  echo "tidy: findings above" >&2
  exit 1
fi
echo "tidy: ${#files[@]} files, no findings ($(clang-tidy --version | grep -o 'version [0-9.]*'))"
