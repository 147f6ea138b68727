// A backend failure injected at every backend call of a scenario in turn:
// the failing call surfaces as OutOfMemoryError or is absorbed by the retry,
// and afterwards the books are exact, nothing leaked and the pool still works.
#include <gtest/gtest.h>

#include <vector>

#include "device_test_support.hpp"

namespace unipool::test {
namespace {

// Growth and release on both pools and two streams, a pending free, an
// empty_cache and an OOM retry (the device holds 96 MiB).
void scenario(DevicePool& pool, ManualFenceSource& fences) {
  std::vector<void*> live;
  auto alloc = [&](uint64_t bytes, StreamHandle s) {
    try {
      live.push_back(pool.allocate(bytes, s));
    } catch (const OutOfMemoryError&) {
    }
  };
  alloc(3000, kStreamA);
  alloc(5 * kMiB, kStreamA);
  alloc(30 * kMiB, kStreamB);
  alloc(600 * 1024, kStreamB);
  if (live.size() > 2) pool.record_stream(live[2], kStreamA);
  while (live.size() > 1) {
    pool.deallocate(live.back());
    live.pop_back();
  }
  pool.empty_cache();
  alloc(50 * kMiB, kStreamB);
  alloc(40 * kMiB, kStreamA);  // forces the OOM path
  fences.complete_all();
  for (void* p : live) pool.deallocate(p);
  alloc(12 * kMiB, kStreamC);
  pool.empty_cache();  // the 12 MiB block stays live: the test frees it
}

class DevicePoolFaults : public ::testing::TestWithParam<bool> {};

TEST_P(DevicePoolFaults, EveryBackendCallFailsInTurn) {
  uint64_t calls = 0;
  {
    SimPool clean(GetParam(), 96 * kMiB);
    scenario(*clean.pool, clean.backend->manual_fences());
    calls = clean.backend->memory_calls();
  }
  ASSERT_GT(calls, 8u);
  for (uint64_t k = 0; k < calls; ++k) {
    SCOPED_TRACE("failing memory call #" + std::to_string(k));
    SimPool sim(GetParam(), 96 * kMiB);
    DevicePool& pool = *sim.pool;
    int64_t mapped_by_hooks = 0;
    pool.set_segment_hooks({[&](const DeviceSegmentEvent& e) { mapped_by_hooks += static_cast<int64_t>(e.bytes); },
                            [&](const DeviceSegmentEvent& e) { mapped_by_hooks -= static_cast<int64_t>(e.bytes); }});
    sim.backend->fail_call_at(k);
    scenario(pool, sim.backend->manual_fences());
    sim.backend->clear_faults();
    EXPECT_POOL_VALID(pool);
    expect_stats_match_snapshot(pool);
    EXPECT_EQ(mapped_by_hooks, pool.stats().reserved_bytes[0].current);
    EXPECT_EQ(static_cast<int64_t>(sim.backend->used_bytes(0)), pool.stats().reserved_bytes[0].current);
    // Free what the scenario still holds (at most the 12 MiB block) and give everything back.
    for (const DeviceSegmentInfo& seg : pool.snapshot().segments) {
      for (const DeviceBlockInfo& b : seg.blocks) {
        if (b.state == DeviceBlockInfo::active_allocated) pool.deallocate(reinterpret_cast<void*>(b.address));
      }
    }
    sim.backend->manual_fences().complete_all();
    pool.empty_cache();
    EXPECT_EQ(sim.backend->used_bytes(0), 0u);
    EXPECT_EQ(mapped_by_hooks, 0);
    void* p = pool.allocate(80 * kMiB, kStreamA);  // still usable, to the device's size
    pool.deallocate(p);
    EXPECT_POOL_VALID(pool);
    sim.pool.reset();
    EXPECT_EQ(sim.backend->live_segments(0), 0u) << "the pool leaked backend memory";
    EXPECT_EQ(sim.backend->manual_fences().outstanding(), 0u) << "the pool leaked fences";
  }
}

INSTANTIATE_TEST_SUITE_P(Segments, DevicePoolFaults, ::testing::Values(false, true),
                         [](const auto& info) { return info.param ? "expandable" : "plain"; });

}  // namespace
}  // namespace unipool::test
