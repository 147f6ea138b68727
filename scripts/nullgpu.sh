#!/usr/bin/env bash
# Runs CMD on the null GPU: unipool's stand-ins for libcudart.so.13,
# libcuda.so.1 and cuBLAS/cuBLASLt (tests/nullgpu/), under which torch's
# own CUDA code runs on the CPU. Builds them first (release preset) if they
# are not there. Test and benchmark support: no figure obtained this way is
# a GPU time.
#   scripts/nullgpu.sh python3 -c 'import torch; print(torch.ones(4, device="cuda"))'
#   UNIPOOL_NULLGPU="devices=2,capacity=24GiB" scripts/nullgpu.sh CMD...
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
lib=${UNIPOOL_NULLGPU_LIB_DIR:-$root/build/release/nullgpu}
if [ $# -eq 0 ]; then
  sed -n '2,9p' "$0" | sed 's/^# \{0,1\}//'
  exit 2
fi
if [ ! -e "$lib/libcudart.so.13" ]; then
  echo "nullgpu.sh: building the null GPU into $lib" >&2
  (cd "$root" && cmake --preset release >/dev/null &&
     cmake --build --preset release --target unipool_nullgpu_libraries >&2)
fi
preload=""
for name in libcudart.so.13 libcublas.so.13 libcublasLt.so.13; do
  [ -e "$lib/$name" ] && preload="$preload $lib/$name"
done
export LD_PRELOAD="${preload# }${LD_PRELOAD:+ $LD_PRELOAD}"
export LD_LIBRARY_PATH="$lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export UNIPOOL_NULLGPU_LIB_DIR="$lib"
exec "$@"
