// RangeAllocator: the free range at the end. Blocks carved one after another
// from it, blocks freed back into it (in the order they were allocated, the
// reverse, and at random), the search skipped while it is the only free
// range and used again once ranges below it are free, the extent each
// allocation reports, and the bin lists left exactly as refiling would leave
// them. validate() after every step.
#include <gtest/gtest.h>

#include <algorithm>
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

RangeAllocatorOptions aligned_to(uint64_t alignment) {
  RangeAllocatorOptions o;
  o.alignment = alignment;
  return o;
}

TEST(EndRange, BlocksAreCarvedFromTheFrontOfTheEndRange) {
  RangeAllocator a(4 * kMiB, aligned_to(64));
  // Sizes that keep the end range in its bin (a few kKiB off 4 kMiB) and ones
  // that move it to a lower bin (past 3.5 kMiB, then past 3 kMiB).
  const uint64_t sizes[] = {100, 64 * kKiB, 5000, 600 * kKiB, 1, 300 * kKiB};
  uint64_t offset = 0;
  Ranges expect;
  for (const uint64_t size : sizes) {
    const RangeAllocation r = a.allocate(size);
    ASSERT_TRUE(r);
    const uint64_t extent = (size + 63) / 64 * 64;
    EXPECT_EQ(r.offset, offset);
    EXPECT_EQ(r.extent, extent);
    EXPECT_EQ(a.allocation_size(r.offset, r.handle), extent);
    offset += extent;
    expect.push_back(used_range(r.offset, extent, size));
    Ranges now = expect;
    now.push_back(free_range(offset, 4 * kMiB - offset));
    ASSERT_VALID(a);
    EXPECT_EQ(ranges_of(a), now);
    EXPECT_EQ(a.free_ranges(), 1u);
    EXPECT_EQ(a.trailing_free(), 4 * kMiB - offset);
    EXPECT_EQ(a.largest_free(), 4 * kMiB - offset);
  }
  // What no longer fits in the end range, the only free one, is refused.
  const RangeAllocation too_big = a.allocate(4 * kMiB - offset + 1);
  EXPECT_EQ(too_big.status, Status::out_of_space);
  EXPECT_EQ(too_big.extent, 0u);
  // An exact fit takes the end range whole.
  const RangeAllocation rest = a.allocate(4 * kMiB - offset);
  ASSERT_TRUE(rest);
  EXPECT_EQ(rest.offset, offset);
  EXPECT_EQ(rest.extent, 4 * kMiB - offset);
  EXPECT_VALID(a);
  EXPECT_EQ(a.free_ranges(), 0u);
  EXPECT_EQ(a.trailing_free(), 0u);
}

// Allocates `sizes` from an empty pool; the blocks in address order.
std::vector<RangeAllocation> carve(RangeAllocator& a, const std::vector<uint64_t>& sizes) {
  std::vector<RangeAllocation> out;
  for (const uint64_t s : sizes) {
    out.push_back(a.allocate(s));
    EXPECT_TRUE(out.back());
  }
  return out;
}

TEST(EndRange, BlocksFreedInReverseGrowTheEndRangeBack) {
  RangeAllocator a(8 * kMiB, aligned_to(64));
  const std::vector<uint64_t> sizes = {40 * kKiB, 90 * kKiB, 2 * kMiB, 130 * kKiB, 64, 1500 * kKiB};
  std::vector<RangeAllocation> blocks = carve(a, sizes);
  uint64_t end = a.used_bytes();
  for (size_t i = blocks.size(); i-- > 0;) {
    ASSERT_EQ(a.deallocate(blocks[i]), Status::ok);
    end -= blocks[i].extent;
    ASSERT_VALID(a);
    EXPECT_EQ(a.free_ranges(), 1u);
    EXPECT_EQ(a.trailing_free(), 8 * kMiB - end);
    EXPECT_EQ(a.largest_free(), 8 * kMiB - end);
    EXPECT_EQ(a.allocation_size(blocks[i].offset, blocks[i].handle), 0u);
  }
  EXPECT_EQ(ranges_of(a), (Ranges{free_range(0, 8 * kMiB)}));
}

// hakmem's rounds: the blocks are freed in the order they were allocated, so
// they gather into one free range below the used ones, filed in the bins,
// until the last block joins it to the end range.
TEST(EndRange, BlocksFreedInOrderJoinTheEndRangeWithTheLast) {
  RangeAllocator a(8 * kMiB, aligned_to(64));
  const std::vector<uint64_t> sizes = {40 * kKiB, 90 * kKiB, 70 * kKiB, 33 * kKiB, 96 * kKiB};
  for (int round = 0; round < 3; ++round) {
    std::vector<RangeAllocation> blocks = carve(a, sizes);
    EXPECT_EQ(blocks.front().offset, 0u) << "every round starts again at offset 0";
    uint64_t freed = 0;
    for (size_t i = 0; i < blocks.size(); ++i) {
      ASSERT_EQ(a.deallocate(blocks[i]), Status::ok);
      freed += blocks[i].extent;
      ASSERT_VALID(a);
      if (i + 1 < blocks.size()) {
        EXPECT_EQ(a.free_ranges(), 2u);
        EXPECT_EQ(ranges_of(a).front(), free_range(0, freed));
      }
    }
    EXPECT_EQ(ranges_of(a), (Ranges{free_range(0, 8 * kMiB)}));
  }
}

// A free range below the end one: the bin search runs again, and a request
// it fits goes there, not to the end.
TEST(EndRange, AFreeRangeBelowIsFoundByTheBinSearch) {
  RangeAllocator a(1 * kMiB, aligned_to(64));
  std::vector<RangeAllocation> blocks = carve(a, {4 * kKiB, 64, 8 * kKiB, 64});
  ASSERT_EQ(a.deallocate(blocks[2]), Status::ok);  // an 8 kKiB hole between two used blocks
  ASSERT_VALID(a);
  EXPECT_EQ(a.free_ranges(), 2u);
  const RangeAllocation same = a.allocate(8 * kKiB);  // its own size: the hole
  ASSERT_TRUE(same);
  EXPECT_EQ(same.offset, blocks[2].offset);
  EXPECT_VALID(a);
  EXPECT_EQ(a.free_ranges(), 1u);
  ASSERT_EQ(a.deallocate(same), Status::ok);
  const RangeAllocation bigger = a.allocate(9 * kKiB);  // does not fit the hole: the end
  ASSERT_TRUE(bigger);
  EXPECT_EQ(bigger.offset, blocks[3].offset + 64);
  const RangeAllocation smaller = a.allocate(1 * kKiB);  // the hole is the better fit
  ASSERT_TRUE(smaller);
  EXPECT_EQ(smaller.offset, blocks[2].offset);
  EXPECT_VALID(a);
  // The block before the end range freed: the end range grows down to it.
  ASSERT_EQ(a.deallocate(bigger), Status::ok);
  ASSERT_VALID(a);
  EXPECT_EQ(a.trailing_free(), 1 * kMiB - (blocks[3].offset + 64));
  EXPECT_EQ(a.free_ranges(), 2u);
}

// The only free range is not at the end (the end is used): it is still found.
TEST(EndRange, TheOnlyFreeRangeNeedNotBeTheEnd) {
  RangeAllocator a(64 * kKiB, aligned_to(64));
  std::vector<RangeAllocation> blocks = carve(a, {16 * kKiB, 16 * kKiB, 32 * kKiB});
  EXPECT_EQ(a.free_ranges(), 0u);
  ASSERT_EQ(a.deallocate(blocks[1]), Status::ok);
  ASSERT_VALID(a);
  EXPECT_EQ(a.free_ranges(), 1u);
  EXPECT_EQ(a.trailing_free(), 0u);
  EXPECT_EQ(a.allocate(16 * kKiB + 1).status, Status::out_of_space);
  const RangeAllocation r = a.allocate(1000);
  ASSERT_TRUE(r);
  EXPECT_EQ(r.offset, 16 * kKiB);
  EXPECT_EQ(r.extent, 1024u);
  EXPECT_VALID(a);
}

// A range that merges with a free neighbour and stays in its bin must end up
// at the head of that bin, as unfiling and filing it would leave it: with a
// scan of one entry per bin, the next request takes it, not the other range.
TEST(EndRange, AMergedRangeHeadsItsBinAsIfRefiled) {
  RangeAllocatorOptions o;
  o.fit_scan_limit = 1;
  RangeAllocator a(1 * kMiB, o);
  // X: 1030 free, then Y: 1100 free (both in the bin [1024, 1152); Y, filed
  // last, heads it); then the 10 bytes before X freed: X grows to 1040.
  std::vector<RangeAllocation> b = carve(a, {100, 1100, 100, 10, 1030, 100});
  ASSERT_EQ(a.deallocate(b[4]), Status::ok);
  ASSERT_EQ(a.deallocate(b[1]), Status::ok);
  ASSERT_EQ(a.deallocate(b[3]), Status::ok);
  ASSERT_VALID(a);
  EXPECT_EQ(ranges_of(a)[3], free_range(b[3].offset, 1040));
  const RangeAllocation r = a.allocate(1000);  // its own bin is empty: [1024, 1152)
  ASSERT_TRUE(r);
  EXPECT_EQ(r.offset, b[3].offset);
  EXPECT_VALID(a);
}

TEST(EndRange, ExtentIsReportedOnEveryPath) {
  RangeAllocator a(1 * kMiB, aligned_to(256));
  const RangeAllocation plain = a.allocate(1000);
  ASSERT_TRUE(plain);
  EXPECT_EQ(plain.extent, 1024u);
  const RangeAllocation aligned = a.allocate(300, 4096);  // per-call alignment: a head gap is split off
  ASSERT_TRUE(aligned);
  EXPECT_EQ(aligned.offset % 4096, 0u);
  EXPECT_EQ(aligned.extent, 512u);
  EXPECT_EQ(a.allocation_size(aligned.offset, aligned.handle), 512u);
  const RangeAllocation placed = a.allocate_at(64 * kKiB, 257);
  ASSERT_TRUE(placed);
  EXPECT_EQ(placed.extent, 512u);
  EXPECT_VALID(a);
  EXPECT_EQ(a.allocate(0).extent, 0u);
  EXPECT_EQ(a.allocate(2 * kMiB).extent, 0u);
}

// Rounds of blocks carved from the end and freed in order, in reverse or at
// random, with long-lived blocks left behind now and then (so the search
// sometimes runs over ranges below the end): validate() after each step, and
// the bytes recounted from the ranges.
TEST(EndRange, RoundsInEveryFreeOrderKeepEveryInvariant) {
  RangeAllocator a(64 * kMiB, aligned_to(64));
  test::Rng rng(0x5EED0E11D);
  std::vector<RangeAllocation> kept;
  for (int round = 0; round < 300; ++round) {
    std::vector<RangeAllocation> blocks;
    const uint64_t count = 1 + rng.below(16);
    for (uint64_t i = 0; i < count; ++i) {
      const RangeAllocation r = a.allocate(1 + rng.below(512 * kKiB));
      ASSERT_TRUE(r);
      ASSERT_EQ(r.extent, a.allocation_size(r.offset, r.handle));
      blocks.push_back(r);
      ASSERT_VALID(a);
    }
    const uint64_t order = rng.below(3);
    if (order == 1) std::reverse(blocks.begin(), blocks.end());
    if (order == 2) {
      for (size_t i = blocks.size(); i > 1; --i) std::swap(blocks[i - 1], blocks[rng.below(i)]);
    }
    if (rng.below(4) == 0) {  // one block lives on
      kept.push_back(blocks.back());
      blocks.pop_back();
    }
    if (kept.size() > 8 || (!kept.empty() && rng.below(8) == 0)) {
      blocks.push_back(kept.front());
      kept.erase(kept.begin());
    }
    for (const RangeAllocation& r : blocks) {
      ASSERT_EQ(a.deallocate(r), Status::ok);
      ASSERT_VALID(a);
    }
    uint64_t live = 0;
    for (const RangeAllocation& r : kept) live += r.extent;
    ASSERT_EQ(a.used_bytes(), live);
    ASSERT_EQ(a.live_allocations(), kept.size());
  }
  for (const RangeAllocation& r : kept) ASSERT_EQ(a.deallocate(r), Status::ok);
  EXPECT_VALID(a);
  EXPECT_EQ(ranges_of(a), (Ranges{free_range(0, 64 * kMiB)}));
}

}  // namespace
}  // namespace unipool
