// Capacity and growth: TiB pools and more at byte granularity, extend(), the
// max_allocations cap, and a node pool that grows past initial_nodes.
#include <gtest/gtest.h>

#include <cstdint>
#include <stdexcept>
#include <vector>

#include "support/allocator_checks.hpp"
#include "support/rng.hpp"
#include "unipool/range_allocator.hpp"

namespace unipool {
namespace {

using test::free_range;
using test::ranges_of;
using test::used_range;
using Ranges = std::vector<RangeInfo>;

using test::kKiB;
using test::kMiB;
constexpr uint64_t TiB = uint64_t{1} << 40;
constexpr uint64_t kLimit = uint64_t{1} << 62;  // capacities must stay below

TEST(RangeAllocatorCapacity, TiBPoolAtByteGranularity) {
  RangeAllocator a(TiB);
  const RangeAllocation x = a.allocate(1);
  const RangeAllocation y = a.allocate(3);
  const RangeAllocation z = a.allocate(7);
  ASSERT_TRUE(x && y && z);
  EXPECT_EQ(x.offset, 0u);
  EXPECT_EQ(y.offset, 1u);
  EXPECT_EQ(z.offset, 4u);
  EXPECT_EQ(a.allocation_size(x.offset, x.handle), 1u);
  EXPECT_EQ(a.allocation_size(y.offset, y.handle), 3u);
  EXPECT_EQ(a.allocation_size(z.offset, z.handle), 7u);
  EXPECT_EQ(a.used_bytes(), 11u);
  EXPECT_EQ(a.requested_bytes(), 11u);
  EXPECT_EQ(a.free_bytes(), TiB - 11);
  EXPECT_EQ(a.largest_free(), TiB - 11);
  EXPECT_VALID(a);
  ASSERT_EQ(a.deallocate(y), Status::ok);
  const RangeAllocation w = a.allocate(3);  // the 3-byte hole, not the TiB tail
  ASSERT_TRUE(w);
  EXPECT_EQ(w.offset, 1u);
  EXPECT_VALID(a);
}

TEST(RangeAllocatorCapacity, LargestCapacityBelow2To62) {
  const uint64_t capacity = kLimit - 1;
  RangeAllocator a(capacity);
  EXPECT_EQ(a.capacity(), capacity);
  EXPECT_VALID(a);
  const RangeAllocation x = a.allocate((uint64_t{1} << 61) + 1);
  ASSERT_TRUE(x);
  EXPECT_EQ(x.offset, 0u);
  const RangeAllocation y = a.allocate(capacity - ((uint64_t{1} << 61) + 1));
  ASSERT_TRUE(y);
  EXPECT_EQ(y.offset, (uint64_t{1} << 61) + 1);
  EXPECT_EQ(a.free_bytes(), 0u);
  EXPECT_EQ(a.allocate(1).status, Status::out_of_space);
  EXPECT_EQ(a.allocate(capacity + 1).status, Status::too_large);
  EXPECT_VALID(a);
  ASSERT_EQ(a.deallocate(x), Status::ok);
  ASSERT_EQ(a.deallocate(y), Status::ok);
  EXPECT_EQ(ranges_of(a), (Ranges{free_range(0, capacity)}));
  EXPECT_VALID(a);
}

TEST(RangeAllocatorCapacity, CapacityOf2To62IsRejected) {
  EXPECT_THROW(RangeAllocator{kLimit}, std::invalid_argument);
  EXPECT_THROW(RangeAllocator{~uint64_t{0}}, std::invalid_argument);
}

TEST(RangeAllocatorCapacity, ManySizesInAHugePool) {
  RangeAllocator a(uint64_t{1} << 60);
  test::Rng rng(60);
  std::vector<RangeAllocation> live;
  for (int step = 0; step < 2000; ++step) {
    if (live.empty() || rng.chance(0.6)) {
      const RangeAllocation x = a.allocate(rng.log_uniform(1, uint64_t{1} << 52));
      ASSERT_TRUE(x);
      live.push_back(x);
    } else {
      const size_t i = rng.below(live.size());
      ASSERT_EQ(a.deallocate(live[i]), Status::ok);
      live[i] = live.back();
      live.pop_back();
    }
    ASSERT_VALID(a);
  }
}

TEST(RangeAllocatorExtend, GrowsAFullPool) {
  RangeAllocator a(4096);
  const RangeAllocation x = a.allocate(4096);
  ASSERT_TRUE(x);
  ASSERT_EQ(a.extend(4096), Status::ok);
  EXPECT_VALID(a);
  EXPECT_EQ(a.capacity(), 8192u);
  EXPECT_EQ(a.free_ranges(), 1u);
  EXPECT_EQ(a.trailing_free(), 4096u);
  EXPECT_EQ(ranges_of(a), (Ranges{used_range(0, 4096), free_range(4096, 4096)}));
  const RangeAllocation y = a.allocate(4096);
  ASSERT_TRUE(y);
  EXPECT_EQ(y.offset, 4096u);
  EXPECT_VALID(a);
}

TEST(RangeAllocatorExtend, MergesWithAFreeTail) {
  RangeAllocator a(4096);
  ASSERT_TRUE(a.allocate(1000));
  ASSERT_EQ(a.extend(4096), Status::ok);
  EXPECT_VALID(a);
  EXPECT_EQ(a.capacity(), 8192u);
  EXPECT_EQ(a.free_ranges(), 1u);
  EXPECT_EQ(a.trailing_free(), 7192u);
  EXPECT_EQ(a.largest_free(), 7192u);
  // One piece: the old tail and the new space were merged.
  const RangeAllocation y = a.allocate(7192);
  ASSERT_TRUE(y);
  EXPECT_EQ(y.offset, 1000u);
  EXPECT_EQ(a.trailing_free(), 0u);
  EXPECT_VALID(a);
}

TEST(RangeAllocatorExtend, FreeingTheLastBlockMergesIntoTheExtension) {
  RangeAllocator a(4096);
  const RangeAllocation x = a.allocate(1000);
  const RangeAllocation y = a.allocate(3096);
  ASSERT_TRUE(x && y);
  ASSERT_EQ(a.extend(1000), Status::ok);
  ASSERT_EQ(a.deallocate(y), Status::ok);
  EXPECT_VALID(a);
  EXPECT_EQ(ranges_of(a), (Ranges{used_range(0, 1000), free_range(1000, 4096)}));
}

TEST(RangeAllocatorExtend, RoundsDownToThePoolAlignment) {
  RangeAllocator a(1024, {.alignment = 256});
  ASSERT_EQ(a.extend(1000), Status::ok);
  EXPECT_EQ(a.capacity(), 1024u + 768u);
  ASSERT_EQ(a.extend(255), Status::ok);  // rounds to nothing
  EXPECT_EQ(a.capacity(), 1792u);
  ASSERT_EQ(a.extend(0), Status::ok);
  EXPECT_EQ(a.capacity(), 1792u);
  EXPECT_EQ(a.free_ranges(), 1u);
  EXPECT_VALID(a);
}

TEST(RangeAllocatorExtend, RefusesToReach2To62AndChangesNothing) {
  RangeAllocator a(kLimit - 4096);
  ASSERT_TRUE(a.allocate(100));
  const test::Accounting before(a);
  EXPECT_EQ(a.extend(4096), Status::too_large);
  EXPECT_EQ(a.extend(kLimit), Status::too_large);
  EXPECT_EQ(a.extend(~uint64_t{0}), Status::too_large);
  EXPECT_EQ(test::Accounting(a), before);
  EXPECT_VALID(a);
  EXPECT_EQ(a.extend(4095), Status::ok);
  EXPECT_EQ(a.capacity(), kLimit - 1);
  EXPECT_VALID(a);
}

TEST(RangeAllocatorExtend, RepeatedGrowthWhileInUse) {
  RangeAllocator a(0);
  test::Rng rng(5);
  std::vector<RangeAllocation> live;
  for (int step = 0; step < 2000; ++step) {
    const uint64_t r = rng.below(10);
    if (r == 0) {
      const uint64_t before = a.capacity();
      ASSERT_EQ(a.extend(rng.between(1, 64 * kKiB)), Status::ok);
      EXPECT_GT(a.capacity(), before);
    } else if (r < 6 || live.empty()) {
      const RangeAllocation x = a.allocate(rng.log_uniform(1, 16 * kKiB));
      if (x) live.push_back(x);
    } else {
      const size_t i = rng.below(live.size());
      ASSERT_EQ(a.deallocate(live[i]), Status::ok);
      live[i] = live.back();
      live.pop_back();
    }
    ASSERT_VALID(a);
  }
}

TEST(RangeAllocatorLimits, MaxAllocationsReturnsAllocationLimit) {
  RangeAllocator a(1 * kMiB, {.max_allocations = 3});
  const RangeAllocation x = a.allocate(10);
  const RangeAllocation y = a.allocate(10);
  const RangeAllocation z = a.allocate(10);
  ASSERT_TRUE(x && y && z);
  const test::Accounting before(a);
  const RangeAllocation over = a.allocate(10);
  EXPECT_FALSE(over);
  EXPECT_EQ(over.status, Status::allocation_limit);
  EXPECT_EQ(over.offset, RangeAllocation::kNoOffset);
  EXPECT_EQ(test::Accounting(a), before);
  EXPECT_VALID(a);
  // Freeing makes room again, once per free.
  ASSERT_EQ(a.deallocate(y), Status::ok);
  const RangeAllocation again = a.allocate(10);
  ASSERT_TRUE(again);
  EXPECT_EQ(again.offset, y.offset);
  EXPECT_EQ(a.allocate(10).status, Status::allocation_limit);
  EXPECT_VALID(a);
  ASSERT_EQ(a.deallocate(x), Status::ok);
  ASSERT_EQ(a.deallocate(z), Status::ok);
  ASSERT_EQ(a.deallocate(again), Status::ok);
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(a.allocate(1));
  EXPECT_EQ(a.allocate(1).status, Status::allocation_limit);
  EXPECT_VALID(a);
}

TEST(RangeAllocatorLimits, NodePoolGrowsBeyondInitialNodes) {
  constexpr int kCount = 10000;
  RangeAllocator a(1 * kMiB, {.initial_nodes = 4});
  std::vector<RangeAllocation> live;
  uint64_t expect_offset = 0;
  for (int i = 0; i < kCount; ++i) {
    const uint64_t size = 1 + static_cast<uint64_t>(i % 97);
    const RangeAllocation x = a.allocate(size);
    ASSERT_TRUE(x) << i;
    ASSERT_EQ(x.offset, expect_offset);
    expect_offset += size;
    live.push_back(x);
    if (i % 500 == 0) {
      ASSERT_VALID(a);
    }
  }
  EXPECT_VALID(a);
  EXPECT_EQ(a.live_allocations(), static_cast<uint64_t>(kCount));
  // Handles given out before the pool grew still work.
  for (size_t i = 0; i < live.size(); i += 2) {
    ASSERT_EQ(a.allocation_size(live[i].offset, live[i].handle), 1 + i % 97);
    ASSERT_EQ(a.deallocate(live[i]), Status::ok);
  }
  EXPECT_VALID(a);
  EXPECT_EQ(a.free_ranges(), static_cast<uint64_t>(kCount / 2 + 1));  // the holes and the tail
  for (size_t i = 1; i < live.size(); i += 2) ASSERT_EQ(a.deallocate(live[i]), Status::ok);
  EXPECT_VALID(a);
  EXPECT_EQ(ranges_of(a), (Ranges{free_range(0, 1 * kMiB)}));
  EXPECT_EQ(a.live_allocations(), 0u);
}

TEST(RangeAllocatorLimits, ZeroInitialNodesWorks) {
  RangeAllocator a(1 * kMiB, {.initial_nodes = 0});
  EXPECT_VALID(a);
  const RangeAllocation x = a.allocate(5);
  ASSERT_TRUE(x);
  EXPECT_VALID(a);
  EXPECT_EQ(a.deallocate(x), Status::ok);
  EXPECT_VALID(a);
}

}  // namespace
}  // namespace unipool
