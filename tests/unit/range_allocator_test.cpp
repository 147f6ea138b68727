// RangeAllocator basics: allocate/free, packing, a full pool, merging of
// neighbours, exact-size reuse, the queries against hand-computed values,
// allocation_size(), for_each_range(), moves. validate() after every step.
#include "unipool/range_allocator.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <set>
#include <utility>
#include <vector>

#include "support/allocator_checks.hpp"
#include "support/rng.hpp"

namespace unipool {
namespace {

using test::free_range;
using test::ranges_of;
using test::used_range;
using Ranges = std::vector<RangeInfo>;

using test::kKiB;
using test::kMiB;

TEST(RangeAllocator, FreshPoolIsOneFreeRange) {
  RangeAllocator a(1 * kMiB);
  EXPECT_VALID(a);
  EXPECT_EQ(a.capacity(), 1 * kMiB);
  EXPECT_EQ(a.alignment(), 1u);
  EXPECT_EQ(a.used_bytes(), 0u);
  EXPECT_EQ(a.requested_bytes(), 0u);
  EXPECT_EQ(a.free_bytes(), 1 * kMiB);
  EXPECT_EQ(a.live_allocations(), 0u);
  EXPECT_EQ(a.free_ranges(), 1u);
  EXPECT_EQ(a.largest_free(), 1 * kMiB);
  EXPECT_EQ(a.trailing_free(), 1 * kMiB);
  EXPECT_EQ(a.fragmentation(), 0.0);
  EXPECT_EQ(ranges_of(a), (Ranges{free_range(0, 1 * kMiB)}));
}

TEST(RangeAllocator, AllocateAndFreeOne) {
  RangeAllocator a(1 * kMiB);
  const RangeAllocation x = a.allocate(100);
  ASSERT_TRUE(x);
  EXPECT_EQ(x.status, Status::ok);
  EXPECT_EQ(x.offset, 0u);
  EXPECT_NE(x.handle, 0u);
  EXPECT_VALID(a);
  EXPECT_EQ(a.allocation_size(x.offset, x.handle), 100u);
  EXPECT_EQ(a.used_bytes(), 100u);
  EXPECT_EQ(a.requested_bytes(), 100u);
  EXPECT_EQ(a.free_bytes(), 1 * kMiB - 100);
  EXPECT_EQ(a.live_allocations(), 1u);
  EXPECT_EQ(a.free_ranges(), 1u);
  EXPECT_EQ(a.largest_free(), 1 * kMiB - 100);
  EXPECT_EQ(a.trailing_free(), 1 * kMiB - 100);
  EXPECT_EQ(ranges_of(a), (Ranges{used_range(0, 100), free_range(100, 1 * kMiB - 100)}));

  EXPECT_EQ(a.deallocate(x), Status::ok);
  EXPECT_VALID(a);
  EXPECT_EQ(a.used_bytes(), 0u);
  EXPECT_EQ(a.requested_bytes(), 0u);
  EXPECT_EQ(a.live_allocations(), 0u);
  EXPECT_EQ(a.free_ranges(), 1u);
  EXPECT_EQ(a.largest_free(), 1 * kMiB);
  EXPECT_EQ(a.allocation_size(x.offset, x.handle), 0u);
  EXPECT_EQ(ranges_of(a), (Ranges{free_range(0, 1 * kMiB)}));
}

TEST(RangeAllocator, SequentialAllocationsArePackedFromZero) {
  RangeAllocator a(1 * kMiB);
  uint64_t expect = 0;
  std::set<uint64_t> handles;
  for (uint64_t size = 1; size <= 200; ++size) {
    const RangeAllocation x = a.allocate(size);
    ASSERT_TRUE(x) << size;
    EXPECT_EQ(x.offset, expect) << size;
    EXPECT_TRUE(handles.insert(x.handle).second) << "handles of live allocations are distinct";
    expect += size;
    ASSERT_VALID(a);
  }
  EXPECT_EQ(a.used_bytes(), 200u * 201u / 2);
  EXPECT_EQ(a.live_allocations(), 200u);
  EXPECT_EQ(a.free_ranges(), 1u);
}

TEST(RangeAllocator, FillTheWholePoolThenEmptyIt) {
  constexpr uint64_t kCapacity = 64 * kKiB, kBlock = 4 * kKiB;
  RangeAllocator a(kCapacity);
  std::vector<RangeAllocation> blocks;
  for (uint64_t i = 0; i < kCapacity / kBlock; ++i) {
    blocks.push_back(a.allocate(kBlock));
    ASSERT_TRUE(blocks.back());
    EXPECT_EQ(blocks.back().offset, i * kBlock);
    ASSERT_VALID(a);
  }
  EXPECT_EQ(a.free_bytes(), 0u);
  EXPECT_EQ(a.free_ranges(), 0u);
  EXPECT_EQ(a.largest_free(), 0u);
  EXPECT_EQ(a.trailing_free(), 0u);
  EXPECT_EQ(a.fragmentation(), 0.0);
  const RangeAllocation none = a.allocate(1);
  EXPECT_FALSE(none);
  EXPECT_EQ(none.status, Status::out_of_space);
  EXPECT_EQ(none.offset, RangeAllocation::kNoOffset);
  EXPECT_VALID(a);

  test::Rng rng(7);
  while (!blocks.empty()) {
    const size_t i = rng.below(blocks.size());
    EXPECT_EQ(a.deallocate(blocks[i]), Status::ok);
    blocks[i] = blocks.back();
    blocks.pop_back();
    ASSERT_VALID(a);
  }
  EXPECT_EQ(ranges_of(a), (Ranges{free_range(0, kCapacity)}));
}

TEST(RangeAllocator, OneAllocationCanTakeTheWholePool) {
  RangeAllocator a(12345);
  const RangeAllocation x = a.allocate(12345);
  ASSERT_TRUE(x);
  EXPECT_EQ(x.offset, 0u);
  EXPECT_EQ(a.free_ranges(), 0u);
  EXPECT_VALID(a);
  EXPECT_EQ(a.deallocate(x), Status::ok);
  EXPECT_VALID(a);
}

// Four blocks tile the pool; D fences the end so nothing merges with a tail.
class Merging : public ::testing::Test {
 protected:
  void SetUp() override {
    for (auto* x : {&A, &B, &C, &D}) {
      *x = a.allocate(1000);
      ASSERT_TRUE(*x);
    }
    ASSERT_EQ(a.free_ranges(), 0u);
  }
  RangeAllocator a{4000};
  RangeAllocation A, B, C, D;
};

TEST_F(Merging, MiddleThenLeftThenRightBecomeOneRange) {
  ASSERT_EQ(a.deallocate(B), Status::ok);
  EXPECT_VALID(a);
  EXPECT_EQ(ranges_of(a), (Ranges{used_range(0, 1000), free_range(1000, 1000), used_range(2000, 1000),
                                  used_range(3000, 1000)}));
  ASSERT_EQ(a.deallocate(A), Status::ok);  // merges with the free range on its right
  EXPECT_VALID(a);
  EXPECT_EQ(a.free_ranges(), 1u);
  EXPECT_EQ(a.largest_free(), 2000u);
  ASSERT_EQ(a.deallocate(C), Status::ok);  // merges with the free range on its left
  EXPECT_VALID(a);
  EXPECT_EQ(a.free_ranges(), 1u);
  EXPECT_EQ(a.largest_free(), 3000u);
  EXPECT_EQ(ranges_of(a), (Ranges{free_range(0, 3000), used_range(3000, 1000)}));
  // The merged range serves a request that needs all of it.
  const RangeAllocation big = a.allocate(3000);
  ASSERT_TRUE(big);
  EXPECT_EQ(big.offset, 0u);
  EXPECT_VALID(a);
}

TEST_F(Merging, FreeingBetweenTwoFreeRangesMergesAllThree) {
  ASSERT_EQ(a.deallocate(A), Status::ok);
  ASSERT_EQ(a.deallocate(C), Status::ok);
  EXPECT_VALID(a);
  EXPECT_EQ(a.free_ranges(), 2u);
  ASSERT_EQ(a.deallocate(B), Status::ok);
  EXPECT_VALID(a);
  EXPECT_EQ(a.free_ranges(), 1u);
  EXPECT_EQ(ranges_of(a), (Ranges{free_range(0, 3000), used_range(3000, 1000)}));
  ASSERT_EQ(a.deallocate(D), Status::ok);
  EXPECT_VALID(a);
  EXPECT_EQ(ranges_of(a), (Ranges{free_range(0, 4000)}));
  EXPECT_EQ(a.trailing_free(), 4000u);
}

TEST_F(Merging, LastBlockMergesWithTheFreeRangeBeforeIt) {
  ASSERT_EQ(a.deallocate(C), Status::ok);
  ASSERT_EQ(a.deallocate(D), Status::ok);
  EXPECT_VALID(a);
  EXPECT_EQ(ranges_of(a), (Ranges{used_range(0, 1000), used_range(1000, 1000), free_range(2000, 2000)}));
  EXPECT_EQ(a.trailing_free(), 2000u);
}

TEST(RangeAllocator, FreedBlockIsReusedForItsOwnSize) {
  // A freed block of a non-bin size must serve the next request of that size,
  // even though a much larger free range (the tail) also exists.
  RangeAllocator a(1 * kMiB);
  const RangeAllocation x = a.allocate(1000);
  const RangeAllocation y = a.allocate(5000);
  const RangeAllocation z = a.allocate(1000);
  ASSERT_TRUE(x && y && z);
  ASSERT_EQ(a.deallocate(y), Status::ok);
  EXPECT_VALID(a);
  const RangeAllocation again = a.allocate(5000);
  ASSERT_TRUE(again);
  EXPECT_EQ(again.offset, y.offset);
  EXPECT_EQ(a.free_ranges(), 1u);
  EXPECT_VALID(a);
}

TEST(RangeAllocator, RequestTakesTheBestFitOfItsOwnBin) {
  // 4999 and 5000 share a bin: the 5000-byte hole fits better than the tail.
  RangeAllocator a(1 * kMiB);
  ASSERT_TRUE(a.allocate(1000));
  const RangeAllocation y = a.allocate(5000);
  ASSERT_TRUE(a.allocate(1000));
  ASSERT_EQ(a.deallocate(y), Status::ok);
  const RangeAllocation smaller = a.allocate(4999);
  ASSERT_TRUE(smaller);
  EXPECT_EQ(smaller.offset, y.offset);
  EXPECT_VALID(a);
  EXPECT_EQ(a.free_ranges(), 2u);  // the 1-byte remainder and the tail
  EXPECT_EQ(ranges_of(a)[2], free_range(5999, 1));
}

TEST(RangeAllocator, QueriesMatchHandComputedValues) {
  RangeAllocator a(1000);
  const RangeAllocation A = a.allocate(100);  // [0, 100)
  const RangeAllocation B = a.allocate(200);  // [100, 300)
  const RangeAllocation C = a.allocate(300);  // [300, 600)
  const RangeAllocation D = a.allocate(50);   // [600, 650), tail [650, 1000)
  ASSERT_TRUE(A && B && C && D);
  EXPECT_EQ(B.offset, 100u);
  EXPECT_EQ(C.offset, 300u);
  EXPECT_EQ(D.offset, 600u);
  EXPECT_VALID(a);
  EXPECT_EQ(a.free_bytes(), 350u);
  EXPECT_EQ(a.largest_free(), 350u);
  EXPECT_EQ(a.fragmentation(), 0.0);
  EXPECT_EQ(a.trailing_free(), 350u);

  ASSERT_EQ(a.deallocate(B), Status::ok);  // free: 200 @100, 350 @650
  EXPECT_VALID(a);
  EXPECT_EQ(a.free_bytes(), 550u);
  EXPECT_EQ(a.free_ranges(), 2u);
  EXPECT_EQ(a.largest_free(), 350u);
  EXPECT_DOUBLE_EQ(a.fragmentation(), 1.0 - 350.0 / 550.0);
  EXPECT_EQ(a.trailing_free(), 350u);

  ASSERT_EQ(a.deallocate(D), Status::ok);  // free: 200 @100, 400 @600
  EXPECT_VALID(a);
  EXPECT_EQ(a.free_bytes(), 600u);
  EXPECT_EQ(a.free_ranges(), 2u);
  EXPECT_EQ(a.largest_free(), 400u);
  EXPECT_DOUBLE_EQ(a.fragmentation(), 1.0 - 400.0 / 600.0);
  EXPECT_EQ(a.trailing_free(), 400u);

  const RangeAllocation E = a.allocate(400);  // exactly the tail
  ASSERT_TRUE(E);
  EXPECT_EQ(E.offset, 600u);
  EXPECT_VALID(a);
  EXPECT_EQ(a.free_ranges(), 1u);
  EXPECT_EQ(a.largest_free(), 200u);
  EXPECT_EQ(a.fragmentation(), 0.0);
  EXPECT_EQ(a.trailing_free(), 0u);
  EXPECT_EQ(a.used_bytes(), 800u);
  EXPECT_EQ(a.requested_bytes(), 800u);
  EXPECT_EQ(a.live_allocations(), 3u);

  const RangeAllocation F = a.allocate(150);  // into the hole at 100
  ASSERT_TRUE(F);
  EXPECT_EQ(F.offset, 100u);
  EXPECT_VALID(a);
  EXPECT_EQ(ranges_of(a), (Ranges{used_range(0, 100), used_range(100, 150), free_range(250, 50),
                                  used_range(300, 300), used_range(600, 400)}));
  EXPECT_EQ(a.largest_free(), 50u);
  EXPECT_EQ(a.free_bytes(), 50u);
  EXPECT_EQ(a.allocate(51).status, Status::out_of_space);
  EXPECT_VALID(a);
}

TEST(RangeAllocator, LargestFreeScansTheWholeTopBin) {
  // Several free ranges in one bin: largest_free() is the largest, not the
  // bin's first entry. 1024..1151 share a bin.
  RangeAllocator a(100000);
  std::vector<RangeAllocation> holes;
  for (const uint64_t size : {1030u, 1100u, 1050u, 1024u}) {
    holes.push_back(a.allocate(size));
    ASSERT_TRUE(a.allocate(1));  // fence
  }
  const RangeAllocation rest = a.allocate(a.free_bytes());
  ASSERT_TRUE(rest);
  for (const auto& h : holes) ASSERT_EQ(a.deallocate(h), Status::ok);
  EXPECT_VALID(a);
  EXPECT_EQ(a.free_ranges(), 4u);
  EXPECT_EQ(a.largest_free(), 1100u);
  EXPECT_DOUBLE_EQ(a.fragmentation(), 1.0 - 1100.0 / (1030 + 1100 + 1050 + 1024));
}

TEST(RangeAllocator, AllocationSize) {
  RangeAllocator a(1 * kMiB, {.alignment = 256});
  const RangeAllocation x = a.allocate(1);
  const RangeAllocation y = a.allocate(300);
  ASSERT_TRUE(x && y);
  EXPECT_EQ(a.allocation_size(x.offset, x.handle), 256u);
  EXPECT_EQ(a.allocation_size(y.offset, y.handle), 512u);
  EXPECT_EQ(a.allocation_size(y.offset + 1, y.handle), 0u);    // interior
  EXPECT_EQ(a.allocation_size(x.offset, y.handle), 0u);        // someone else's handle
  EXPECT_EQ(a.allocation_size(y.offset, y.handle ^ (uint64_t{1} << 40)), 0u);  // other generation
  EXPECT_EQ(a.allocation_size(0, 0), 0u);
  EXPECT_EQ(a.allocation_size(0, 0xFFFFFFFFu), 0u);  // node index past the pool
  ASSERT_EQ(a.deallocate(x), Status::ok);
  EXPECT_EQ(a.allocation_size(x.offset, x.handle), 0u);
  EXPECT_EQ(a.allocation_size(y.offset, y.handle), 512u);
  EXPECT_VALID(a);
}

TEST(RangeAllocator, ForEachRangeTilesTheCapacity) {
  RangeAllocator a(256 * kKiB);
  test::Rng rng(11);
  std::vector<RangeAllocation> live;
  for (int step = 0; step < 3000; ++step) {
    if (live.empty() || rng.chance(0.6)) {
      const RangeAllocation x = a.allocate(rng.log_uniform(1, 8 * kKiB));
      if (x) live.push_back(x);
    } else {
      const size_t i = rng.below(live.size());
      ASSERT_EQ(a.deallocate(live[i]), Status::ok);
      live[i] = live.back();
      live.pop_back();
    }
    ASSERT_VALID(a);
    if (step % 100 != 0) continue;
    uint64_t next = 0, used = 0, requested = 0, used_count = 0, free_count = 0;
    bool previous_free = false;
    a.for_each_range([&](const RangeInfo& r) {
      EXPECT_EQ(r.offset, next);
      EXPECT_GT(r.size, 0u);
      next = r.offset + r.size;
      if (r.used) {
        used += r.size;
        requested += r.requested;
        ++used_count;
        EXPECT_GE(r.size, r.requested);
        EXPECT_GT(r.requested, 0u);
      } else {
        EXPECT_FALSE(previous_free) << "two adjacent free ranges at " << r.offset;
        EXPECT_EQ(r.requested, 0u);
        ++free_count;
      }
      previous_free = !r.used;
    });
    EXPECT_EQ(next, a.capacity());
    EXPECT_EQ(used, a.used_bytes());
    EXPECT_EQ(requested, a.requested_bytes());
    EXPECT_EQ(used_count, live.size());
    EXPECT_EQ(free_count, a.free_ranges());
    for (const auto& x : live) EXPECT_GT(a.allocation_size(x.offset, x.handle), 0u);
  }
}

TEST(RangeAllocator, ZeroCapacityPoolIsValidAndCanGrow) {
  RangeAllocator a(0);
  EXPECT_VALID(a);
  EXPECT_EQ(a.capacity(), 0u);
  EXPECT_EQ(a.free_ranges(), 0u);
  EXPECT_EQ(a.largest_free(), 0u);
  EXPECT_EQ(a.trailing_free(), 0u);
  EXPECT_TRUE(ranges_of(a).empty());
  EXPECT_EQ(a.allocate(1).status, Status::too_large);
  EXPECT_EQ(a.deallocate(0, 0), Status::not_live);
  EXPECT_VALID(a);
  ASSERT_EQ(a.extend(4096), Status::ok);
  EXPECT_VALID(a);
  const RangeAllocation x = a.allocate(4096);
  ASSERT_TRUE(x);
  EXPECT_EQ(x.offset, 0u);
  EXPECT_VALID(a);
}

TEST(RangeAllocator, MoveKeepsEverything) {
  RangeAllocator a(1 * kMiB);
  const RangeAllocation x = a.allocate(100);
  const RangeAllocation y = a.allocate(200);
  ASSERT_TRUE(x && y);
  ASSERT_EQ(a.deallocate(x), Status::ok);
  const test::Accounting before(a);

  RangeAllocator b(std::move(a));
  EXPECT_VALID(b);
  EXPECT_EQ(test::Accounting(b), before);
  EXPECT_EQ(b.deallocate(y), Status::ok);
  EXPECT_VALID(b);

  RangeAllocator c(10);
  c = std::move(b);
  EXPECT_VALID(c);
  EXPECT_EQ(c.live_allocations(), 0u);
  EXPECT_EQ(c.capacity(), 1 * kMiB);
  EXPECT_TRUE(c.allocate(1 * kMiB));
}

// A moved-from allocator must stay usable (valid but unspecified): checking,
// querying or destroying it must not touch freed or missing storage. Today the
// defaulted move leaves capacity_, last_node_ and the masks behind while
// nodes_, bin_head_ and leaf_mask_ are emptied, so validate(), allocate(),
// extend() and for_each_range() index empty vectors (see the report).
TEST(RangeAllocator, MovedFromAllocatorStaysUsable) {
  RangeAllocator a(1 * kMiB);
  ASSERT_TRUE(a.allocate(100));
  RangeAllocator b(std::move(a));
  EXPECT_VALID(b);

  // NOLINTBEGIN(bugprone-use-after-move): that is the point of this test.
  EXPECT_VALID(a);
  EXPECT_EQ(a.used_bytes() + a.free_bytes(), a.capacity());
  uint64_t seen = 0;
  a.for_each_range([&](const RangeInfo& r) { seen += r.size; });
  EXPECT_EQ(seen, a.capacity());
  const RangeAllocation x = a.allocate(1);
  if (x) {
    EXPECT_EQ(a.deallocate(x), Status::ok);
  }
  EXPECT_VALID(a);
  // Reassigning it is always fine.
  a = RangeAllocator(4096);
  EXPECT_VALID(a);
  EXPECT_TRUE(a.allocate(4096));
  // NOLINTEND(bugprone-use-after-move)
}

}  // namespace
}  // namespace unipool
