#!/usr/bin/env bash
# Installs what unipool's build, tests and benchmarks need on Debian 12.
# Idempotent: installs only what is missing, so a warm machine pays nothing.
set -euo pipefail

APT_PACKAGES=(
  cmake ninja-build g++ pkg-config
  libgtest-dev libgmock-dev libbenchmark-dev   # tests, micro-benchmarks
  nlohmann-json3-dev libcli11-dev              # benchmark JSON output, CLI parsing
  zlib1g-dev                                   # device benchmark: recorded model traces (.trace.gz)
  clang libclang-rt-14-dev                     # libFuzzer
  clang-format clang-tidy                      # scripts/check_format.sh, scripts/tidy.sh (Debian 12: 14)
  libnuma-dev                                  # NUMA binding of host arenas
  libmimalloc-dev libjemalloc-dev libgoogle-perftools-dev  # host benchmark peers
  time libsqlite3-dev                          # bench/host/programs.py: peak RSS, sqlite's speedtest1
)

missing=()
for p in "${APT_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "install_deps: installing ${missing[*]}"
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

if [ "${UNIPOOL_SKIP_PIP:-0}" != 1 ]; then
  pip=(python3 -m pip install -q --disable-pip-version-check --root-user-action=ignore)
  "${pip[@]}" -r "$(dirname "$0")/requirements.txt"
  # torch 2.15 (CUDA 13.2 build, ~5 GB): the extension builds against it.
  python3 -c "import torch" 2>/dev/null || "${pip[@]}" "torch>=2.15"
  # NIXL (unipool.nixl, tests/python/test_nixl.py, bench/transfer): after
  # torch, which its wheels require, so they find the one installed above.
  # The `nixl` package picks its CUDA 12 or 13 build at import; both run
  # without a GPU (UCX over shared memory and TCP).
  python3 -c "import nixl" 2>/dev/null || "${pip[@]}" "nixl>=1.5"
fi
