#!/usr/bin/env bash
# Checks that the C++ lines changed since a base commit are formatted as
# .clang-format says; untouched lines are left alone, so old code is never
# reformatted wholesale. Prints the fix as a diff and fails when a changed
# line is misformatted.
#   scripts/check_format.sh                        # base: HEAD~1 (the last commit's changes)
#   UNIPOOL_FORMAT_BASE=main scripts/check_format.sh   # everything since main
# To apply the fix instead: git clang-format <base>
set -euo pipefail
cd "$(dirname "$0")/.."

base=${UNIPOOL_FORMAT_BASE:-HEAD~1}
if ! git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  echo "check_format: not a git work tree; skipped"
  exit 0
fi
# A shallow clone (depth 1) has no parent commit to compare with.
if ! git rev-parse --verify -q "$base^{commit}" >/dev/null; then
  echo "check_format: base '$base' is not in this clone (shallow?); skipped"
  exit 0
fi
command -v git-clang-format >/dev/null || { echo "check_format: git-clang-format missing (scripts/install_deps.sh)" >&2; exit 1; }

# Working tree against the base, so uncommitted edits are checked too. The
# output is parsed rather than the exit status, which differs across
# clang-format versions.
out=$(git clang-format --diff --extensions c,h,cc,cpp,hpp,cu,cuh "$base" --)
if grep -q '^diff ' <<<"$out"; then
  echo "check_format: lines changed since $base are not formatted as .clang-format says:" >&2
  echo "$out" >&2
  echo "check_format: fix with: git clang-format $base" >&2
  exit 1
fi
echo "check_format: lines changed since $base are formatted ($(clang-format --version | grep -o '[0-9][0-9.]*' | head -1))"
