// bench/device: the one null GPU every CUDA-side peer of a run shares, and
// the counters read off it, defined once so every peer is measured alike.
#pragma once

#include <cstdint>

namespace device_bench {

// Configures the null GPU for the run: 80 GiB (the preloaded library's own
// default, or its UNIPOOL_NULLGPU), and a cudaFree that does not sweep the
// device's events. Call once, before the first peer: it resets the null GPU,
// which must never happen under a live allocator (torch's is a singleton).
void prepare_null_gpu();

// What the build's null GPU is, for the header line.
const char* null_gpu_kind();

// The null GPU's memory calls and live device bytes, counted from the
// moment this object was made, so a peer reads its own share of a state
// that outlives it.
class NullGpuCounters {
 public:
  NullGpuCounters();
  // cudaMalloc + cudaFree + cuMemCreate + cuMemMap + cuMemUnmap + cuMemRelease.
  uint64_t memory_calls() const;
  // Device bytes charged (cudaMalloc + cuMemCreate) beyond those at the start.
  uint64_t live_bytes() const;

 private:
  uint64_t calls_at_start_;
  uint64_t live_at_start_;
};

}  // namespace device_bench
