// unipool: how a device pool is configured, and the UNIPOOL_DEVICE_CONF
// string that says it.
//
//   backend=sim,memory_fraction=0.5,expandable_segments=true,sim_capacity=8GiB
//
// Comma-separated key=value pairs; sizes take an optional K/M/G/T suffix
// (KiB, MiB, ... 1024-based; "KB", "K" mean the same). Unknown keys and bad
// values are errors that name the key. docs/device_pool.md lists every key.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace unipool {

struct DevicePoolConfig {
  // "sim", "cuda_malloc", "cuda_vmm" or "nccl". The default is cuda_vmm when
  // the library was built with CUDA, sim otherwise.
  std::string backend;
  // Per-device limits on reserved bytes; 0 means none. Both may be set; the
  // smaller wins. memory_fraction is of the device's total memory; the pool
  // refuses one that rounds to 0 bytes of it. parse() refuses a memory_limit
  // below 1 byte (it would read as none).
  double memory_fraction = 0.0;
  uint64_t memory_limit = 0;
  // Blocks of at least this size are never split, and a cached one is only
  // reused for a request that wastes less than 20 MiB of it (PyTorch's
  // max_split_size_mb). Plain segments only. ~0 means unlimited.
  uint64_t max_split_size = ~uint64_t{0};
  // When reserved memory would pass this fraction of the limit, the pool
  // first releases cached memory that no stream still uses. 0 = off.
  double garbage_collection_threshold = 0.0;
  // Cached (reserved but not active) bytes the pool keeps before it gives
  // fully free memory back to the backend on its own. ~0 = keep everything.
  uint64_t release_threshold = ~uint64_t{0};
  // -1: the backend's default (on where it supports it), 0 off, 1 on.
  int expandable_segments = -1;
  // The simulated device ("sim" backend).
  uint64_t sim_capacity = uint64_t{16} << 30;
  int sim_devices = 1;
  uint64_t sim_granularity = uint64_t{2} << 20;
  bool sim_accessible = false;  // SimBackendOptions::accessible

  // Parses a config string; throws DevicePoolError(bad_argument) naming the
  // offending key, also for a key given twice and for a sim_granularity above
  // sim_capacity. An empty string gives the defaults.
  static DevicePoolConfig parse(std::string_view text);
  // parse(getenv("UNIPOOL_DEVICE_CONF")), or the defaults when it is unset.
  static DevicePoolConfig from_env();
  // The config as a string parse() accepts.
  std::string to_string() const;
};

}  // namespace unipool
