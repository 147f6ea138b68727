// unipool: device pool statistics, with PyTorch's memory_stats() names and
// meaning: "allocated_bytes.all.current", "segment.large_pool.peak", ...
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

namespace unipool {

struct DeviceStat {
  int64_t current = 0;
  int64_t peak = 0;
  int64_t allocated = 0;  // sum of increases since the last accumulated reset
  int64_t freed = 0;      // sum of decreases since the last accumulated reset

  void increase(int64_t n) noexcept {
    current += n;
    allocated += n;
    if (current > peak) peak = current;
  }
  void decrease(int64_t n) noexcept {
    current -= n;
    freed += n;
  }
};

// Index into a DeviceStatArray: every pool, the small pool (< 1 MiB), the large.
enum class DeviceStatPool : uint8_t { all = 0, small_pool = 1, large_pool = 2 };
using DeviceStatArray = std::array<DeviceStat, 3>;

struct DeviceStats {
  DeviceStatArray allocation;       // blocks handed out and not yet freed
  DeviceStatArray segment;          // backend allocations (mapped runs for expandable)
  DeviceStatArray active;           // allocated + freed but waiting on a fence
  DeviceStatArray inactive_split;   // free blocks inside partly used plain segments
  DeviceStatArray allocated_bytes;  // sizes (512-byte rounded) of allocated blocks
  DeviceStatArray reserved_bytes;   // bytes taken from the backend
  DeviceStatArray active_bytes;
  DeviceStatArray inactive_split_bytes;
  DeviceStatArray requested_bytes;  // what callers asked for, over active blocks
  int64_t num_alloc_retries = 0;    // allocations that released the cache and retried
  int64_t num_ooms = 0;             // allocations that failed with OutOfMemoryError
  int64_t num_device_alloc = 0;     // backend allocate / map calls that succeeded
  int64_t num_device_free = 0;      // backend deallocate / unmap calls that succeeded
  int64_t num_sync_all_streams = 0; // waits on stream fences before a release

  // Looks a PyTorch-style key up ("active_bytes.small_pool.peak").
  std::optional<int64_t> get(std::string_view key) const;
  // Every key and value, in PyTorch's memory_stats() order of names.
  void for_each(const std::function<void(const std::string& key, int64_t value)>& f) const;
};

}  // namespace unipool
