// The device pool's allocation policy on the simulated device, with plain and
// with expandable segments: rounding, small/large routing, segment sizes,
// same-stream reuse, stats and their resets, the snapshot and its JSON.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <set>
#include <vector>

#include "device_test_support.hpp"

namespace unipool::test {
namespace {

class DevicePoolBasic : public ::testing::TestWithParam<bool> {
 protected:
  SimPool sim{GetParam()};
  DevicePool& pool = *sim.pool;
};

TEST_P(DevicePoolBasic, SameStreamReuseIsImmediate) {
  void* p = pool.allocate(1000, kStreamA);
  pool.deallocate(p);
  const int64_t backend_allocs = pool.stats().num_device_alloc;
  void* q = pool.allocate(1000, kStreamA);
  EXPECT_EQ(q, p);
  EXPECT_EQ(pool.stats().num_device_alloc, backend_allocs);
  pool.deallocate(q);
  EXPECT_EQ(sim.backend->manual_fences().outstanding(), 0u);  // no fence for own-stream frees
  EXPECT_POOL_VALID(pool);
}

TEST_P(DevicePoolBasic, RoundsTo512AndRoutesBySize) {
  void* tiny = pool.allocate(1, kStreamA);
  DeviceStats s = pool.stats();
  EXPECT_EQ(s.allocated_bytes[1].current, 512);  // small pool
  EXPECT_EQ(s.requested_bytes[1].current, 1);
  EXPECT_EQ(s.allocated_bytes[2].current, 0);
  void* below = pool.allocate(kMiB - 512, kStreamA);
  void* at = pool.allocate(kMiB, kStreamA);
  s = pool.stats();
  EXPECT_EQ(s.allocation[1].current, 2);
  EXPECT_EQ(s.allocation[2].current, 1);
  EXPECT_EQ(s.allocated_bytes[2].current, static_cast<int64_t>(kMiB));
  EXPECT_EQ(s.allocated_bytes[0].current, static_cast<int64_t>(512 + kMiB - 512 + kMiB));
  EXPECT_EQ(reinterpret_cast<uintptr_t>(tiny) % 512, 0u);
  // Small blocks come only from small segments, large ones from large.
  for (const DeviceSegmentInfo& seg : pool.snapshot().segments) {
    for (const DeviceBlockInfo& b : seg.blocks) {
      if (b.state == DeviceBlockInfo::inactive) continue;
      EXPECT_EQ(seg.small, b.address != reinterpret_cast<uint64_t>(at));
    }
  }
  for (void* p : {tiny, below, at}) pool.deallocate(p);
  EXPECT_POOL_VALID(pool);
}

TEST_P(DevicePoolBasic, SegmentSizes) {
  void* small = pool.allocate(4096, kStreamA);
  void* medium = pool.allocate(3 * kMiB, kStreamA);
  DeviceStats s = pool.stats();
  EXPECT_EQ(s.reserved_bytes[1].current, static_cast<int64_t>(2 * kMiB));
  if (GetParam()) {
    EXPECT_EQ(s.reserved_bytes[2].current, static_cast<int64_t>(4 * kMiB));  // granules as needed
  } else {
    EXPECT_EQ(s.reserved_bytes[2].current, static_cast<int64_t>(20 * kMiB));  // PyTorch's kLargeBuffer
  }
  void* big = pool.allocate(12 * kMiB + 1, kStreamA);
  s = pool.stats();
  if (!GetParam()) {
    // 12 MiB + 1 does not fit the 17 MiB left? It does: carved from the 20 MiB segment.
    EXPECT_EQ(s.segment[2].current, 1);
    void* own = pool.allocate(30 * kMiB + 1, kStreamA);  // its own segment, 2 MiB rounded
    EXPECT_EQ(pool.stats().reserved_bytes[2].current, static_cast<int64_t>((20 + 32) * kMiB));
    pool.deallocate(own);
  } else {
    EXPECT_EQ(s.reserved_bytes[2].current, static_cast<int64_t>(16 * kMiB));
  }
  for (void* p : {small, medium, big}) pool.deallocate(p);
  EXPECT_POOL_VALID(pool);
  expect_stats_match_snapshot(pool);
}

TEST_P(DevicePoolBasic, TinyTensorsDoNotFragmentLargeSegments) {
  std::vector<void*> large, small;
  for (int i = 0; i < 8; ++i) large.push_back(pool.allocate(2 * kMiB, kStreamA));
  for (int i = 0; i < 64; ++i) small.push_back(pool.allocate(700, kStreamA));
  for (void* p : large) pool.deallocate(p);
  // The large segments are wholly free again: no small block sits in them.
  for (const DeviceSegmentInfo& seg : pool.snapshot().segments) {
    if (seg.small) continue;
    EXPECT_EQ(seg.active_size, 0u);
  }
  void* again = pool.allocate(16 * kMiB, kStreamA);
  EXPECT_EQ(pool.stats().segment[2].current, 1);
  pool.deallocate(again);
  for (void* p : small) pool.deallocate(p);
  EXPECT_POOL_VALID(pool);
}

TEST_P(DevicePoolBasic, PeakAndAccumulatedStatsReset) {
  void* a = pool.allocate(5 * kMiB, kStreamA);
  void* b = pool.allocate(5 * kMiB, kStreamA);
  pool.deallocate(a);
  DeviceStats s = pool.stats();
  EXPECT_EQ(s.allocated_bytes[0].peak, static_cast<int64_t>(10 * kMiB));
  EXPECT_EQ(s.allocated_bytes[0].current, static_cast<int64_t>(5 * kMiB));
  EXPECT_EQ(s.allocated_bytes[0].allocated, static_cast<int64_t>(10 * kMiB));
  EXPECT_EQ(s.allocated_bytes[0].freed, static_cast<int64_t>(5 * kMiB));
  EXPECT_EQ(s.allocation[2].allocated, 2);
  pool.reset_peak_stats();
  EXPECT_EQ(pool.stats().allocated_bytes[0].peak, static_cast<int64_t>(5 * kMiB));
  pool.reset_accumulated_stats();
  s = pool.stats();
  EXPECT_EQ(s.allocated_bytes[0].allocated, 0);
  EXPECT_EQ(s.allocated_bytes[0].freed, 0);
  EXPECT_EQ(s.num_device_alloc, 0);
  EXPECT_EQ(s.allocated_bytes[0].current, static_cast<int64_t>(5 * kMiB));  // currents stay
  EXPECT_EQ(s.get("allocated_bytes.all.current"), static_cast<int64_t>(5 * kMiB));
  EXPECT_EQ(s.get("allocation.large_pool.current"), 1);
  EXPECT_FALSE(s.get("allocated_bytes.all.nonsense").has_value());
  EXPECT_FALSE(s.get("bogus").has_value());
  int keys = 0;
  s.for_each([&](const std::string& key, int64_t value) {
    ++keys;
    EXPECT_EQ(s.get(key), value) << key;
  });
  EXPECT_EQ(keys, 9 * 3 * 4 + 5);
  pool.deallocate(b);
}

TEST_P(DevicePoolBasic, SnapshotAndJson) {
  void* a = pool.allocate(3000, kStreamA);
  void* b = pool.allocate(6 * kMiB, kStreamB);
  pool.record_stream(b, kStreamA);
  void* c = pool.allocate(6 * kMiB, kStreamB);
  pool.deallocate(c);
  pool.deallocate(b);  // pending: waits for kStreamA's fence
  const DeviceSnapshot snap = pool.snapshot();
  const nlohmann::json j = nlohmann::json::parse(pool.snapshot_json());
  ASSERT_TRUE(j.contains("segments"));
  ASSERT_TRUE(j.contains("device_traces"));
  ASSERT_EQ(j["segments"].size(), snap.segments.size());
  std::set<std::string> states;
  for (size_t i = 0; i < snap.segments.size(); ++i) {
    const auto& js = j["segments"][i];
    const DeviceSegmentInfo& s = snap.segments[i];
    EXPECT_EQ(js["address"].get<uint64_t>(), s.address);
    EXPECT_EQ(js["total_size"].get<uint64_t>(), s.total_size);
    EXPECT_EQ(js["stream"].get<uint64_t>(), s.stream);
    EXPECT_EQ(js["segment_type"].get<std::string>(), s.small ? "small" : "large");
    EXPECT_EQ(js["allocated_size"].get<uint64_t>(), s.allocated_size);
    EXPECT_EQ(js["active_size"].get<uint64_t>(), s.active_size);
    EXPECT_EQ(js["is_expandable"].get<bool>(), GetParam());
    ASSERT_EQ(js["blocks"].size(), s.blocks.size());
    for (size_t k = 0; k < s.blocks.size(); ++k) {
      EXPECT_EQ(js["blocks"][k]["address"].get<uint64_t>(), s.blocks[k].address);
      EXPECT_EQ(js["blocks"][k]["size"].get<uint64_t>(), s.blocks[k].size);
      EXPECT_EQ(js["blocks"][k]["requested_size"].get<uint64_t>(), s.blocks[k].requested_size);
      states.insert(js["blocks"][k]["state"].get<std::string>());
    }
  }
  EXPECT_EQ(states, (std::set<std::string>{"active_allocated", "active_pending_free", "inactive"}));
  expect_stats_match_snapshot(pool);
  sim.backend->manual_fences().complete_all();
  pool.deallocate(a);
  void* d = pool.allocate(512, kStreamA);  // polls the completed fence
  pool.deallocate(d);
  EXPECT_EQ(pool.stats().active[0].current, 0);
  expect_stats_match_snapshot(pool);
}

TEST_P(DevicePoolBasic, EmptyCacheReturnsEverything) {
  std::vector<void*> blocks;
  for (const uint64_t size : {uint64_t{512}, uint64_t{70000}, 3 * kMiB, 25 * kMiB, 200 * kMiB}) {
    blocks.push_back(pool.allocate(size, kStreamA));
    blocks.push_back(pool.allocate(size, kStreamB));
  }
  for (void* p : blocks) pool.deallocate(p);
  EXPECT_GT(sim.backend->used_bytes(0), 0u);
  pool.empty_cache();
  EXPECT_EQ(sim.backend->used_bytes(0), 0u);
  const DeviceStats s = pool.stats();
  EXPECT_EQ(s.reserved_bytes[0].current, 0);
  EXPECT_EQ(s.segment[0].current, 0);
  if (GetParam()) {
    EXPECT_GT(s.num_device_free, 0);  // an unmap may cover several maps
  } else {
    EXPECT_EQ(s.num_device_free, s.num_device_alloc);
  }
  EXPECT_POOL_VALID(pool);
  void* again = pool.allocate(kMiB, kStreamA);  // still usable
  pool.deallocate(again);
}

TEST(DevicePoolPlain, MaxSplitSizeKeepsBigBlocksWhole) {
  SimPool sim(false, kGiB, "max_split_size_mb=40");
  DevicePool& pool = *sim.pool;
  void* big = pool.allocate(50 * kMiB, kStreamA);
  EXPECT_EQ(pool.stats().allocated_bytes[0].current, static_cast<int64_t>(50 * kMiB));
  pool.deallocate(big);
  void* again = pool.allocate(45 * kMiB, kStreamA);  // wastes 5 MiB < 20 MiB: reused whole
  EXPECT_EQ(again, big);
  EXPECT_EQ(pool.stats().allocated_bytes[0].current, static_cast<int64_t>(50 * kMiB));
  void* mid = pool.allocate(25 * kMiB, kStreamA);  // below the limit: never from the whole block
  EXPECT_EQ(pool.stats().segment[0].current, 2);
  pool.deallocate(again);
  void* tiny_waste = pool.allocate(26 * kMiB, kStreamA);  // fits in 50 MiB, but not oversize
  EXPECT_NE(tiny_waste, big);
  for (void* p : {mid, tiny_waste}) pool.deallocate(p);
  void* far = pool.allocate(41 * kMiB, kStreamA);  // oversize: would waste 9 MiB of 50: reused
  EXPECT_EQ(far, big);
  pool.deallocate(far);
  EXPECT_POOL_VALID(pool);
  expect_stats_match_snapshot(pool);
}

INSTANTIATE_TEST_SUITE_P(Segments, DevicePoolBasic, ::testing::Values(false, true),
                         [](const auto& info) { return info.param ? "expandable" : "plain"; });

}  // namespace
}  // namespace unipool::test
