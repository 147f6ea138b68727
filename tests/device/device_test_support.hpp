// unipool device tests: a pool on a fresh simulated device, and the stats
// recomputed from a snapshot (the independent check of the pool's books).
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "support/units.hpp"
#include "support/valid.hpp"
#include "unipool/device_pool.hpp"
#include "unipool/device_sim_backend.hpp"

namespace unipool::test {

// Streams are just tokens to the pool.
inline constexpr StreamHandle kStreamA = 0x1000;
inline constexpr StreamHandle kStreamB = 0x2000;
inline constexpr StreamHandle kStreamC = 0x3000;

struct SimPool {
  explicit SimPool(bool expandable, uint64_t capacity = kGiB, std::string extra_config = "") {
    SimBackendOptions o;
    o.capacity = capacity;
    backend = std::make_shared<SimBackend>(o);
    DevicePoolConfig c = DevicePoolConfig::parse(extra_config);
    c.expandable_segments = expandable ? 1 : 0;
    pool = std::make_unique<DevicePool>(backend, 0, c);
  }
  std::shared_ptr<SimBackend> backend;
  std::unique_ptr<DevicePool> pool;
};

#define EXPECT_POOL_VALID(pool)                 \
  do {                                          \
    std::string why_;                           \
    EXPECT_TRUE((pool).validate(&why_)) << why_; \
  } while (0)

// PyTorch's stats, recomputed from the snapshot alone.
struct Recount {
  int64_t v[9][3] = {};  // same order as the DeviceStats arrays, x {all, small, large}
};

enum RecountField { kAllocation, kSegment, kActive, kInactiveSplit, kAllocatedBytes, kReservedBytes, kActiveBytes,
                    kInactiveSplitBytes, kRequestedBytes };

inline Recount recount(const DeviceSnapshot& snap) {
  Recount r;
  for (const DeviceSegmentInfo& s : snap.segments) {
    const int p = s.small ? 1 : 2;
    auto add = [&](RecountField f, int64_t n) {
      r.v[f][0] += n;
      r.v[f][p] += n;
    };
    add(kSegment, 1);
    add(kReservedBytes, static_cast<int64_t>(s.total_size));
    bool any_active = false;
    uint64_t tiled = s.address;
    for (const DeviceBlockInfo& b : s.blocks) {
      EXPECT_EQ(b.address, tiled) << "blocks must tile their segment";
      tiled += b.size;
      if (b.state == DeviceBlockInfo::inactive) continue;
      any_active = true;
      if (b.state == DeviceBlockInfo::active_allocated) {
        add(kAllocation, 1);
        add(kAllocatedBytes, static_cast<int64_t>(b.size));
      }
      add(kActive, 1);
      add(kActiveBytes, static_cast<int64_t>(b.size));
      add(kRequestedBytes, static_cast<int64_t>(b.requested_size));
    }
    EXPECT_EQ(tiled, s.address + s.total_size);
    if (any_active && !s.expandable) {
      for (const DeviceBlockInfo& b : s.blocks) {
        if (b.state != DeviceBlockInfo::inactive) continue;
        add(kInactiveSplit, 1);
        add(kInactiveSplitBytes, static_cast<int64_t>(b.size));
      }
    }
  }
  return r;
}

inline void expect_stats_match_snapshot(const DevicePool& pool) {
  const DeviceStats s = pool.stats();
  const Recount r = recount(pool.snapshot());
  const DeviceStatArray* arrays[9] = {&s.allocation, &s.segment, &s.active, &s.inactive_split, &s.allocated_bytes,
                                      &s.reserved_bytes, &s.active_bytes, &s.inactive_split_bytes,
                                      &s.requested_bytes};
  for (int f = 0; f < 9; ++f) {
    for (int p = 0; p < 3; ++p) {
      EXPECT_EQ((*arrays[f])[static_cast<size_t>(p)].current, r.v[f][p]) << "stat " << f << " pool " << p;
    }
  }
}

}  // namespace unipool::test
