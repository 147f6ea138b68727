// A backend failure injected at every backend call of a scenario in turn,
// as out-of-memory and as another driver error: the failing call surfaces as
// OutOfMemoryError (or, for a driver error during growth, as
// Status::backend_error) or is absorbed by the retry, and afterwards the
// books are exact, nothing leaked and the pool still works.
#include <gtest/gtest.h>

#include <string>
#include <tuple>
#include <vector>

#include "device_test_support.hpp"

namespace unipool::test {
namespace {

// Growth and release on both pools and two streams, a pending free, an
// empty_cache and an OOM retry (the device holds 96 MiB).
// Returns how many allocations failed with Status::backend_error.
int scenario(DevicePool& pool, ManualFenceSource& fences) {
  std::vector<void*> live;
  int backend_errors = 0;
  auto alloc = [&](uint64_t bytes, StreamHandle s) {
    try {
      live.push_back(pool.allocate(bytes, s));
    } catch (const OutOfMemoryError&) {
    } catch (const DevicePoolError& e) {
      EXPECT_EQ(e.status(), Status::backend_error) << e.what();
      ++backend_errors;
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
  return backend_errors;
}

// (expandable segments, the code every injected failure carries)
class DevicePoolFaults : public ::testing::TestWithParam<std::tuple<bool, BackendStatus::Code>> {
 protected:
  bool expandable() const { return std::get<0>(GetParam()); }
  BackendStatus::Code code() const { return std::get<1>(GetParam()); }
};

TEST_P(DevicePoolFaults, EveryBackendCallFailsInTurn) {
  uint64_t calls = 0;
  int backend_errors = 0;
  {
    SimPool clean(expandable(), 96 * kMiB);
    scenario(*clean.pool, clean.backend->manual_fences());
    calls = clean.backend->memory_calls();
  }
  ASSERT_GT(calls, 8u);
  for (uint64_t k = 0; k < calls; ++k) {
    SCOPED_TRACE("failing memory call #" + std::to_string(k));
    SimPool sim(expandable(), 96 * kMiB);
    DevicePool& pool = *sim.pool;
    int64_t mapped_by_hooks = 0;
    pool.set_segment_hooks({[&](const DeviceSegmentEvent& e) { mapped_by_hooks += static_cast<int64_t>(e.bytes); },
                            [&](const DeviceSegmentEvent& e) { mapped_by_hooks -= static_cast<int64_t>(e.bytes); }});
    sim.backend->fail_call_at(k, code());
    const int errors = scenario(pool, sim.backend->manual_fences());
    if (code() == BackendStatus::out_of_memory) {
      EXPECT_EQ(errors, 0) << "an OOM reported as a backend error";
    }
    backend_errors += errors;
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
  // Driver errors during growth reach the caller (those while giving memory
  // back are absorbed: the memory stays in the pool).
  if (code() == BackendStatus::error) {
    EXPECT_GT(backend_errors, 0);
  }
}

INSTANTIATE_TEST_SUITE_P(Segments, DevicePoolFaults,
                         ::testing::Combine(::testing::Values(false, true),
                                            ::testing::Values(BackendStatus::out_of_memory, BackendStatus::error)),
                         [](const auto& info) {
                           return std::string(std::get<0>(info.param) ? "expandable" : "plain") +
                                  (std::get<1>(info.param) == BackendStatus::error ? "_driver_error" : "_oom");
                         });

}  // namespace
}  // namespace unipool::test
