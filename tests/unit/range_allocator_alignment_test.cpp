// Alignment: the pool's (every size rounded, waste counted) and per call
// (stricter than the pool's: the skipped head gap becomes a free range).
#include <gtest/gtest.h>

#include <cstdint>
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

uint64_t round_up(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }

TEST(RangeAllocatorAlignment, PoolAlignmentRoundsSizesAndCountsTheWaste) {
  RangeAllocator a(4 * kMiB, {.alignment = 256});
  EXPECT_EQ(a.alignment(), 256u);
  test::Rng rng(256);
  struct Live {
    RangeAllocation x;
    uint64_t size;
  };
  std::vector<Live> live;
  uint64_t requested = 0, waste = 0;
  for (int step = 0; step < 2000; ++step) {
    if (live.empty() || rng.chance(0.65)) {
      const uint64_t size = rng.between(1, 10000);
      const RangeAllocation x = a.allocate(size);
      if (!x) {
        EXPECT_EQ(x.status, Status::out_of_space);
        continue;
      }
      EXPECT_EQ(x.offset % 256, 0u) << "size " << size;
      EXPECT_EQ(a.allocation_size(x.offset, x.handle), round_up(size, 256));
      requested += size;
      waste += round_up(size, 256) - size;
      live.push_back({x, size});
    } else {
      const size_t i = rng.below(live.size());
      requested -= live[i].size;
      waste -= round_up(live[i].size, 256) - live[i].size;
      ASSERT_EQ(a.deallocate(live[i].x), Status::ok);
      live[i] = live.back();
      live.pop_back();
    }
    ASSERT_VALID(a);
    EXPECT_EQ(a.requested_bytes(), requested);
    EXPECT_EQ(a.used_bytes() - a.requested_bytes(), waste);
    EXPECT_EQ(a.used_bytes() % 256, 0u);
    EXPECT_EQ(a.free_bytes() % 256, 0u);
  }
  EXPECT_GT(waste, 0u);
}

TEST(RangeAllocatorAlignment, WasteIsExactlyTheRounding) {
  RangeAllocator a(1 * kMiB, {.alignment = 256});
  const RangeAllocation x = a.allocate(1);    // extent 256, waste 255
  const RangeAllocation y = a.allocate(256);  // extent 256, waste 0
  const RangeAllocation z = a.allocate(257);  // extent 512, waste 255
  ASSERT_TRUE(x && y && z);
  EXPECT_EQ(x.offset, 0u);
  EXPECT_EQ(y.offset, 256u);
  EXPECT_EQ(z.offset, 512u);
  EXPECT_EQ(a.used_bytes(), 1024u);
  EXPECT_EQ(a.requested_bytes(), 514u);
  EXPECT_EQ(a.used_bytes() - a.requested_bytes(), 510u);
  EXPECT_EQ(ranges_of(a), (Ranges{used_range(0, 256, 1), used_range(256, 256, 256), used_range(512, 512, 257),
                                  free_range(1024, 1 * kMiB - 1024)}));
  ASSERT_EQ(a.deallocate(z), Status::ok);
  EXPECT_EQ(a.used_bytes() - a.requested_bytes(), 255u);
  EXPECT_VALID(a);
}

TEST(RangeAllocatorAlignment, CapacityIsRoundedDownToThePoolAlignment) {
  RangeAllocator a(1000, {.alignment = 256});
  EXPECT_EQ(a.capacity(), 768u);
  EXPECT_VALID(a);
  EXPECT_TRUE(a.allocate(768));
  EXPECT_EQ(a.allocate(1).status, Status::out_of_space);
  EXPECT_VALID(a);
  // A pool smaller than its alignment has no room at all.
  RangeAllocator tiny(255, {.alignment = 256});
  EXPECT_EQ(tiny.capacity(), 0u);
  EXPECT_EQ(tiny.allocate(1).status, Status::too_large);
  EXPECT_VALID(tiny);
}

TEST(RangeAllocatorAlignment, PerCallAlignmentFilesTheHeadGap) {
  RangeAllocator a(1 * kMiB);
  const RangeAllocation x = a.allocate(10);
  ASSERT_TRUE(x);
  const RangeAllocation y = a.allocate(100, 4096);
  ASSERT_TRUE(y);
  EXPECT_EQ(y.offset, 4096u);
  EXPECT_VALID(a);
  EXPECT_EQ(a.allocation_size(y.offset, y.handle), 100u);
  EXPECT_EQ(a.free_ranges(), 2u);
  EXPECT_EQ(ranges_of(a), (Ranges{used_range(0, 10), free_range(10, 4086), used_range(4096, 100),
                                  free_range(4196, 1 * kMiB - 4196)}));
  // The head gap is a free range like any other: an exact fit reuses it.
  const RangeAllocation z = a.allocate(4086);
  ASSERT_TRUE(z);
  EXPECT_EQ(z.offset, 10u);
  EXPECT_VALID(a);
  // Freeing merges the aligned block with what follows it.
  ASSERT_EQ(a.deallocate(y), Status::ok);
  EXPECT_VALID(a);
  EXPECT_EQ(ranges_of(a), (Ranges{used_range(0, 10), used_range(10, 4086), free_range(4096, 1 * kMiB - 4096)}));
}

TEST(RangeAllocatorAlignment, AlreadyAlignedStartLeavesNoHeadGap) {
  RangeAllocator a(1 * kMiB);
  const RangeAllocation x = a.allocate(100, 65536);  // offset 0 is aligned
  ASSERT_TRUE(x);
  EXPECT_EQ(x.offset, 0u);
  EXPECT_EQ(a.free_ranges(), 1u);
  EXPECT_VALID(a);
}

TEST(RangeAllocatorAlignment, PerCallAlignmentAbovePoolAlignment) {
  RangeAllocator a(16 * kMiB, {.alignment = 256});
  test::Rng rng(65536);
  std::vector<RangeAllocation> live;
  for (int step = 0; step < 1500; ++step) {
    if (live.empty() || rng.chance(0.6)) {
      const uint64_t align = uint64_t{1} << rng.between(0, 17);  // 1 .. 128 kKiB
      const uint64_t size = rng.log_uniform(1, 64 * kKiB);
      const RangeAllocation x = a.allocate(size, align);
      if (!x) {
        EXPECT_EQ(x.status, Status::out_of_space);
        continue;
      }
      EXPECT_EQ(x.offset % std::max<uint64_t>(align, 256), 0u) << "alignment " << align;
      EXPECT_EQ(a.allocation_size(x.offset, x.handle), round_up(size, 256));
      live.push_back(x);
    } else {
      const size_t i = rng.below(live.size());
      ASSERT_EQ(a.deallocate(live[i]), Status::ok);
      live[i] = live.back();
      live.pop_back();
    }
    ASSERT_VALID(a);
  }
  for (const auto& x : live) ASSERT_EQ(a.deallocate(x), Status::ok);
  EXPECT_VALID(a);
  EXPECT_EQ(a.free_ranges(), 1u);
  EXPECT_EQ(a.free_bytes(), a.capacity());
}

TEST(RangeAllocatorAlignment, PerCallAlignmentBelowThePoolsIsThePools) {
  RangeAllocator a(1 * kMiB, {.alignment = 256});
  ASSERT_TRUE(a.allocate(1));
  for (const uint64_t align : {0u, 1u, 2u, 16u, 128u, 256u}) {
    const RangeAllocation x = a.allocate(3, align);
    ASSERT_TRUE(x) << align;
    EXPECT_EQ(x.offset % 256, 0u) << align;
    EXPECT_EQ(a.allocation_size(x.offset, x.handle), 256u) << align;
  }
  EXPECT_EQ(a.free_ranges(), 1u) << "no head gaps";
  EXPECT_VALID(a);
}

TEST(RangeAllocatorAlignment, HugeAlignmentInAHugePool) {
  RangeAllocator a(uint64_t{1} << 50);
  ASSERT_TRUE(a.allocate(1));
  const RangeAllocation x = a.allocate(7, uint64_t{1} << 40);
  ASSERT_TRUE(x);
  EXPECT_EQ(x.offset, uint64_t{1} << 40);
  EXPECT_VALID(a);
  EXPECT_EQ(ranges_of(a)[1], free_range(1, (uint64_t{1} << 40) - 1));
}

}  // namespace
}  // namespace unipool
