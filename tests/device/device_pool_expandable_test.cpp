// Expandable segments: granules mapped as the pool grows, growth that joins
// the free end instead of stranding slivers, and release back to zero.
// Segment hooks: exactly one on_map per mapped range and one before_unmap per
// unmapped range, on both kinds of segments.
#include <gtest/gtest.h>

#include <map>
#include <vector>

#include "device_test_support.hpp"

namespace unipool::test {
namespace {

TEST(DevicePoolExpandable, GrowsByGranulesAndReleasesToZero) {
  SimPool sim(true);
  DevicePool& pool = *sim.pool;
  std::vector<void*> blocks;
  for (int i = 1; i <= 10; ++i) blocks.push_back(pool.allocate(static_cast<uint64_t>(i) * 700 * 1024, kStreamA));
  const DeviceStats s = pool.stats();
  EXPECT_EQ(static_cast<uint64_t>(s.reserved_bytes[0].current), sim.backend->mapped_bytes(0));
  EXPECT_EQ(s.reserved_bytes[0].current % static_cast<int64_t>(2 * kMiB), 0);
  EXPECT_EQ(s.segment[0].current, 2);  // one per pool kind
  for (void* p : blocks) pool.deallocate(p);
  pool.empty_cache();
  EXPECT_EQ(sim.backend->mapped_bytes(0), 0u);
  EXPECT_EQ(pool.stats().reserved_bytes[0].current, 0);
  EXPECT_EQ(pool.stats().segment[0].current, 0);
  EXPECT_POOL_VALID(pool);
}

TEST(DevicePoolExpandable, GrowthJoinsTheFreeEnd) {
  SimPool sim(true);
  DevicePool& pool = *sim.pool;
  void* a = pool.allocate(3 * kMiB, kStreamA);
  void* b = pool.allocate(3 * kMiB, kStreamA);
  EXPECT_EQ(pool.stats().reserved_bytes[0].current, static_cast<int64_t>(6 * kMiB));
  pool.deallocate(b);
  void* c = pool.allocate(5 * kMiB, kStreamA);  // starts where b was: maps 2 MiB more, not 6
  EXPECT_EQ(c, b);
  EXPECT_EQ(pool.stats().reserved_bytes[0].current, static_cast<int64_t>(8 * kMiB));
  pool.deallocate(c);
  pool.empty_cache();  // the free end goes; a's granules stay
  EXPECT_EQ(pool.stats().reserved_bytes[0].current, static_cast<int64_t>(4 * kMiB));
  EXPECT_EQ(sim.backend->mapped_bytes(0), 4 * kMiB);
  pool.deallocate(a);
  pool.empty_cache();
  EXPECT_EQ(sim.backend->mapped_bytes(0), 0u);
  EXPECT_POOL_VALID(pool);
}

// The case that motivated PyTorch's expandable segments: a step repeated with
// a growing batch. Plain segments strand the previous sizes; expandable ones
// stay at the largest step.
TEST(DevicePoolExpandable, BatchGrowthStaysAtTheLargestStep) {
  for (const bool expandable : {false, true}) {
    SimPool sim(expandable, 8 * kGiB);
    DevicePool& pool = *sim.pool;
    uint64_t largest_step = 0;
    for (uint64_t batch = 8; batch <= 48; ++batch) {
      std::vector<void*> step;
      uint64_t requested = 0;
      for (uint64_t layer = 0; layer < 4; ++layer) {
        for (const uint64_t size : {batch * 1536 * 1024, batch * 4 * 1536 * 1024, batch * 4096}) {
          step.push_back(pool.allocate(size, kStreamA));
          requested += size;
        }
      }
      largest_step = std::max(largest_step, requested);
      for (void* p : step) pool.deallocate(p);
    }
    const auto peak = static_cast<uint64_t>(pool.stats().reserved_bytes[0].peak);
    if (expandable) {
      EXPECT_LE(static_cast<double>(peak), 1.05 * static_cast<double>(largest_step));
    } else {
      EXPECT_GT(static_cast<double>(peak), 1.05 * static_cast<double>(largest_step));  // what expandable fixes
    }
    EXPECT_POOL_VALID(pool);
  }
}

class DevicePoolHooks : public ::testing::TestWithParam<bool> {};

TEST_P(DevicePoolHooks, ExactlyOncePerMapAndUnmap) {
  SimPool sim(GetParam(), 256 * kMiB);
  DevicePool& pool = *sim.pool;
  std::map<uint64_t, uint64_t> mapped;  // address -> bytes, as the hooks saw it
  int maps = 0, unmaps = 0;
  pool.set_segment_hooks(
      {[&](const DeviceSegmentEvent& e) {
         ++maps;
         EXPECT_EQ(e.expandable, GetParam());
         const auto a = reinterpret_cast<uint64_t>(e.address);
         const auto next = mapped.lower_bound(a);
         EXPECT_TRUE(next == mapped.end() || next->first >= a + e.bytes) << "mapped twice";
         EXPECT_TRUE(next == mapped.begin() || std::prev(next)->first + std::prev(next)->second <= a);
         mapped[a] = e.bytes;
       },
       [&](const DeviceSegmentEvent& e) {
         ++unmaps;
         // An unmapped range is the end of what was mapped: split the entry holding it.
         const auto a = reinterpret_cast<uint64_t>(e.address);
         auto it = mapped.upper_bound(a);
         ASSERT_NE(it, mapped.begin());
         --it;
         uint64_t covered = a;
         while (covered < a + e.bytes) {
           ASSERT_NE(it, mapped.end()) << "unmap of memory never mapped";
           ASSERT_LE(it->first, covered);
           const uint64_t lo = it->first, hi = it->first + it->second;
           it = mapped.erase(it);
           if (lo < a) mapped[lo] = a - lo;
           if (hi > a + e.bytes) mapped[a + e.bytes] = hi - (a + e.bytes);
           covered = hi;
         }
       }});
  std::vector<void*> blocks;
  for (int round = 0; round < 3; ++round) {
    for (const uint64_t size : {uint64_t{512}, uint64_t{300000}, 5 * kMiB, 22 * kMiB, 3 * kMiB}) {
      blocks.push_back(pool.allocate(size, round % 2 ? kStreamA : kStreamB));
    }
    while (blocks.size() > 2) {
      pool.deallocate(blocks.back());
      blocks.pop_back();
    }
    pool.empty_cache();
    uint64_t hook_bytes = 0;
    for (const auto& [a, n] : mapped) hook_bytes += n;
    EXPECT_EQ(hook_bytes, static_cast<uint64_t>(pool.stats().reserved_bytes[0].current));
  }
  const uint64_t backend_maps = sim.backend->calls(SimBackend::map_call) + sim.backend->calls(SimBackend::allocate_call);
  EXPECT_EQ(static_cast<uint64_t>(maps), backend_maps);
  for (void* p : blocks) pool.deallocate(p);
  pool.empty_cache();
  EXPECT_TRUE(mapped.empty());
  const uint64_t backend_unmaps =
      sim.backend->calls(SimBackend::unmap_call) + sim.backend->calls(SimBackend::deallocate_call);
  EXPECT_EQ(static_cast<uint64_t>(unmaps), backend_unmaps);
  EXPECT_EQ(maps > 0 && unmaps > 0, true);
}

INSTANTIATE_TEST_SUITE_P(Segments, DevicePoolHooks, ::testing::Values(false, true),
                         [](const auto& info) { return info.param ? "expandable" : "plain"; });

}  // namespace
}  // namespace unipool::test
