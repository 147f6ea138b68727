// bench/device: the null GPU of the run (see null_gpu.hpp).
#include "null_gpu.hpp"

#include "nullgpu/nullgpu.hpp"

namespace device_bench {

namespace {

namespace gpu = unipool::nullgpu;

uint64_t total_memory_calls() {
  uint64_t n = 0;
  for (const char* fn : {"cudaMalloc", "cudaFree", "cuMemCreate", "cuMemMap", "cuMemUnmap", "cuMemRelease"}) {
    n += gpu::calls(fn);
  }
  return n;
}

}  // namespace

void prepare_null_gpu() {
#if DEVICE_BENCH_SHARED_NULL_GPU
  // The preloaded library configured itself from UNIPOOL_NULLGPU: keep that.
  gpu::Config c = gpu::config();
#else
  // The in-process library starts as the unit tests want it (1 GiB, events
  // never complete by themselves); the bench wants the preloaded defaults.
  gpu::Config c = gpu::shared_library_defaults();
#endif
  // Its cudaFree would complete every pending event of the device (a scan of
  // all of them; CUB keeps one per block): a cost of the null GPU, not of
  // CUDA, so it is off. No peer depends on it.
  c.free_synchronizes = false;
  gpu::reset(c);
}

const char* null_gpu_kind() {
#if DEVICE_BENCH_SHARED_NULL_GPU
  return "null GPU (shared stand-ins, one state)";
#else
  return "null GPU (in process)";
#endif
}

NullGpuCounters::NullGpuCounters() : calls_at_start_(total_memory_calls()), live_at_start_(gpu::live_bytes(0)) {}

uint64_t NullGpuCounters::memory_calls() const { return total_memory_calls() - calls_at_start_; }

uint64_t NullGpuCounters::live_bytes() const {
  const uint64_t now = gpu::live_bytes(0);
  return now > live_at_start_ ? now - live_at_start_ : 0;
}

}  // namespace device_bench
