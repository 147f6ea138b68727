// allocate_at: a range taken at an exact offset (what restoring a device-pool
// checkpoint needs). Where it lands, what it splits, every refusal leaving
// the allocator unchanged, and a round trip that frees everything and puts it
// back at the same offsets. The randomized comparison with the reference
// model is in range_allocator_differential_test.cpp.
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

using test::kKiB;

TEST(AllocateAt, SplitsHeadAndTailOfTheFreeRange) {
  RangeAllocator a(64 * kKiB);
  const RangeAllocation x = a.allocate_at(10 * kKiB, 3000);
  ASSERT_EQ(x.status, Status::ok);
  EXPECT_EQ(x.offset, 10 * kKiB);
  EXPECT_EQ(a.used_bytes(), 3000u);
  EXPECT_EQ(a.requested_bytes(), 3000u);
  EXPECT_EQ(a.live_allocations(), 1u);
  EXPECT_EQ(a.free_ranges(), 2u);
  EXPECT_EQ(ranges_of(a), (std::vector<RangeInfo>{free_range(0, 10 * kKiB), used_range(10 * kKiB, 3000),
                                                  free_range(10 * kKiB + 3000, 54 * kKiB - 3000)}));
  EXPECT_VALID(a);
  // Freed, it merges both ways: one free range again.
  ASSERT_EQ(a.deallocate(x), Status::ok);
  EXPECT_EQ(ranges_of(a), (std::vector<RangeInfo>{free_range(0, 64 * kKiB)}));
  EXPECT_VALID(a);
}

TEST(AllocateAt, AtTheStartAtTheEndAndFillingAGapExactly) {
  RangeAllocator a(16 * kKiB, {.alignment = 256});
  const RangeAllocation first = a.allocate_at(0, 1000);  // 1024 with the alignment
  const RangeAllocation last = a.allocate_at(15 * kKiB, 1024);
  ASSERT_TRUE(first && last);
  EXPECT_EQ(a.used_bytes(), 2048u);
  EXPECT_EQ(a.requested_bytes(), 2024u);
  EXPECT_EQ(a.trailing_free(), 0u);
  EXPECT_EQ(ranges_of(a), (std::vector<RangeInfo>{used_range(0, 1024, 1000), free_range(1024, 14 * kKiB),
                                                  used_range(15 * kKiB, 1024)}));
  // The whole gap between them: no split at all.
  const RangeAllocation middle = a.allocate_at(1024, 14 * kKiB);
  ASSERT_TRUE(middle);
  EXPECT_EQ(a.free_ranges(), 0u);
  EXPECT_EQ(a.free_bytes(), 0u);
  EXPECT_VALID(a);
  // Handles from allocate_at are ordinary handles: a second free is refused.
  ASSERT_EQ(a.deallocate(middle), Status::ok);
  EXPECT_EQ(a.deallocate(middle), Status::not_live);
  EXPECT_EQ(a.allocation_size(first.offset, first.handle), 1024u);
  EXPECT_VALID(a);
}

// A pool with used and free ranges: [0,4K) used, [4K,8K) free, [8K,12K) used, rest free.
class AllocateAtRefusals : public ::testing::Test {
 protected:
  void SetUp() override {
    a.allocate_at(0, 4 * kKiB);
    b = a.allocate_at(8 * kKiB, 4 * kKiB);
    ASSERT_TRUE(b);
    ASSERT_EQ(a.live_allocations(), 2u);
  }
  void expect_refused(uint64_t offset, uint64_t size, Status why) {
    const test::Accounting before(a);
    const RangeAllocation r = a.allocate_at(offset, size);
    EXPECT_EQ(r.status, why) << offset << " +" << size;
    EXPECT_EQ(r.offset, RangeAllocation::kNoOffset);
    EXPECT_FALSE(r);
    EXPECT_EQ(test::Accounting(a), before);
    EXPECT_VALID(a);
  }
  RangeAllocator a{64 * kKiB, {.alignment = 512, .max_allocations = 3}};
  RangeAllocation b;
};

TEST_F(AllocateAtRefusals, EachMisuseHasItsStatusAndChangesNothing) {
  expect_refused(4 * kKiB, 0, Status::zero_size);
  expect_refused(4 * kKiB + 100, 512, Status::bad_alignment);
  expect_refused(0, 64 * kKiB + 1, Status::too_large);
  expect_refused(63 * kKiB, 2 * kKiB, Status::bad_argument);  // runs past the end
  expect_refused(64 * kKiB, 512, Status::bad_argument);       // starts at the end
  expect_refused(2 * kKiB, 512, Status::out_of_space);        // inside a used range
  expect_refused(8 * kKiB, 4 * kKiB, Status::out_of_space);   // exactly a used range
  expect_refused(6 * kKiB, 4 * kKiB, Status::out_of_space);   // free head, used tail
  expect_refused(4 * kKiB, 5 * kKiB, Status::out_of_space);   // straddles the used range
  // The same range is fine once it is free.
  ASSERT_EQ(a.deallocate(b), Status::ok);
  const RangeAllocation r = a.allocate_at(6 * kKiB, 4 * kKiB);
  ASSERT_TRUE(r);
  EXPECT_EQ(r.offset, 6 * kKiB);
  EXPECT_VALID(a);
}

TEST_F(AllocateAtRefusals, TheAllocationCapApplies) {
  ASSERT_TRUE(a.allocate_at(20 * kKiB, 512));
  expect_refused(30 * kKiB, 512, Status::allocation_limit);
}

// Random pools emptied and rebuilt with allocate_at at the very offsets they
// had, in a shuffled order: the same ranges, requested sizes and counters.
TEST(AllocateAt, RebuildsAnyLayoutAtTheSameOffsets) {
  test::Rng rng(42);
  for (int round = 0; round < 40; ++round) {
    RangeAllocator a(1 << 20, {.alignment = 256, .initial_nodes = 4});
    std::vector<RangeAllocation> live;
    for (int op = 0; op < 400; ++op) {
      if (!live.empty() && rng.chance(0.4)) {
        const size_t i = rng.below(live.size());
        ASSERT_EQ(a.deallocate(live[i]), Status::ok);
        live[i] = live.back();
        live.pop_back();
      } else if (RangeAllocation x = a.allocate(rng.log_uniform(1, 64 * kKiB))) {
        live.push_back(x);
      }
    }
    const std::vector<RangeInfo> layout = ranges_of(a);
    const uint64_t used = a.used_bytes(), requested = a.requested_bytes();
    for (const RangeAllocation& x : live) ASSERT_EQ(a.deallocate(x), Status::ok);
    ASSERT_EQ(a.free_ranges(), 1u);

    std::vector<RangeInfo> used_ranges;
    for (const RangeInfo& r : layout) {
      if (r.used) used_ranges.push_back(r);
    }
    for (size_t i = used_ranges.size(); i > 1; --i) std::swap(used_ranges[i - 1], used_ranges[rng.below(i)]);
    for (const RangeInfo& r : used_ranges) {
      const RangeAllocation x = a.allocate_at(r.offset, r.requested);
      ASSERT_TRUE(x) << "round " << round << ": " << to_string(x.status) << " at " << r.offset;
      ASSERT_EQ(x.offset, r.offset);
    }
    EXPECT_EQ(ranges_of(a), layout) << "round " << round;
    EXPECT_EQ(a.used_bytes(), used);
    EXPECT_EQ(a.requested_bytes(), requested);
    EXPECT_EQ(a.live_allocations(), used_ranges.size());
    ASSERT_VALID(a);
  }
}

}  // namespace
}  // namespace unipool
