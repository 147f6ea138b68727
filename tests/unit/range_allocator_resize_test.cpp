// resize: a live range grown into the free range after it or shrunk in
// place, its offset and handle kept (what realloc of a large host block
// needs). Where the bytes go, the books, and every refusal leaving the
// allocator unchanged. validate() after every step.
#include <gtest/gtest.h>

#include <cstdint>
#include <utility>
#include <vector>

#include "support/allocator_checks.hpp"
#include "support/rng.hpp"
#include "unipool/range_allocator.hpp"

namespace unipool {
namespace {

using test::free_range;
using test::kKiB;
using test::ranges_of;
using test::used_range;

// Two ranges of `size` carved one after the other from the start.
std::pair<RangeAllocation, RangeAllocation> two_adjacent(RangeAllocator& a, uint64_t size) {
  const RangeAllocation x = a.allocate(size);
  const RangeAllocation y = a.allocate(size);
  EXPECT_TRUE(x && y);
  EXPECT_EQ(y.offset, x.offset + x.extent);
  return {x, y};
}

// Everything freed: one free range over the whole capacity again.
void expect_whole_and_free(const RangeAllocator& a) {
  EXPECT_EQ(ranges_of(a), (std::vector<RangeInfo>{free_range(0, a.capacity())}));
  EXPECT_EQ(a.used_bytes(), 0u);
  EXPECT_EQ(a.requested_bytes(), 0u);
  EXPECT_VALID(a);
}

TEST(RangeResize, GrowsIntoTheFreeRangeAfterIt) {
  RangeAllocator a(64 * kKiB, {.alignment = 256});
  const RangeAllocation x = a.allocate(1000);
  ASSERT_TRUE(x);
  ASSERT_EQ(a.resize(x.offset, x.handle, 5000), Status::ok);
  EXPECT_EQ(a.allocation_size(x), 5120u);
  EXPECT_EQ(a.used_bytes(), 5120u);
  EXPECT_EQ(a.requested_bytes(), 5000u);
  EXPECT_EQ(ranges_of(a), (std::vector<RangeInfo>{used_range(0, 5120, 5000), free_range(5120, 64 * kKiB - 5120)}));
  EXPECT_VALID(a);
  // Up to the whole free range: its node goes.
  ASSERT_EQ(a.resize(x.offset, x.handle, 64 * kKiB), Status::ok);
  EXPECT_EQ(a.free_ranges(), 0u);
  EXPECT_EQ(ranges_of(a), (std::vector<RangeInfo>{used_range(0, 64 * kKiB)}));
  EXPECT_VALID(a);
  ASSERT_EQ(a.deallocate(x), Status::ok);
  expect_whole_and_free(a);
}

TEST(RangeResize, ShrinksIntoAFreeNeighbourOrANewFreeRange) {
  RangeAllocator a(64 * kKiB, {.alignment = 256});
  const auto [x, y] = two_adjacent(a, 8 * kKiB);
  // x's neighbour is used: the tail becomes a free range of its own.
  ASSERT_EQ(a.resize(x.offset, x.handle, 3000), Status::ok);
  EXPECT_EQ(ranges_of(a), (std::vector<RangeInfo>{used_range(0, 3072, 3000), free_range(3072, 8 * kKiB - 3072),
                                                  used_range(8 * kKiB, 8 * kKiB), free_range(16 * kKiB, 48 * kKiB)}));
  EXPECT_VALID(a);
  // y's neighbour is free: the tail joins it.
  ASSERT_EQ(a.resize(y.offset, y.handle, 1 * kKiB), Status::ok);
  EXPECT_EQ(ranges_of(a), (std::vector<RangeInfo>{used_range(0, 3072, 3000), free_range(3072, 8 * kKiB - 3072),
                                                  used_range(8 * kKiB, 1 * kKiB), free_range(9 * kKiB, 55 * kKiB)}));
  EXPECT_EQ(a.used_bytes(), 3072u + 1 * kKiB);
  EXPECT_EQ(a.requested_bytes(), 3000u + 1 * kKiB);
  EXPECT_VALID(a);
  // The last range shrunk: its tail is the new last range.
  ASSERT_EQ(a.resize(y.offset, y.handle, 9 * kKiB), Status::ok);
  const RangeAllocation z = a.allocate_at(63 * kKiB, 1 * kKiB);
  ASSERT_TRUE(z);
  ASSERT_EQ(a.resize(z.offset, z.handle, 256), Status::ok);
  EXPECT_EQ(a.trailing_free(), 1 * kKiB - 256);
  EXPECT_VALID(a);
  for (const RangeAllocation& r : {x, y, z}) ASSERT_EQ(a.deallocate(r), Status::ok);
  expect_whole_and_free(a);
}

TEST(RangeResize, RefusalsChangeNothing) {
  RangeAllocator a(16 * kKiB, {.alignment = 256});
  const auto [x, y] = two_adjacent(a, 4 * kKiB);
  const std::vector<RangeInfo> before = ranges_of(a);
  EXPECT_EQ(a.resize(x.offset, x.handle, 5 * kKiB), Status::out_of_space);   // y is next
  EXPECT_EQ(a.resize(y.offset, y.handle, 13 * kKiB), Status::out_of_space);  // past the end
  EXPECT_EQ(a.resize(y.offset, y.handle, 1ull << 40), Status::out_of_space);
  EXPECT_EQ(a.resize(x.offset, x.handle, 0), Status::zero_size);
  EXPECT_EQ(a.resize(x.offset + 256, x.handle, 100), Status::not_live);
  ASSERT_EQ(a.deallocate(y), Status::ok);
  EXPECT_EQ(a.resize(y.offset, y.handle, 100), Status::not_live);  // freed
  ASSERT_TRUE(a.allocate_at(y.offset, 4 * kKiB));
  EXPECT_EQ(ranges_of(a), before);
  EXPECT_VALID(a);
}

// Random allocations, frees and resizes against a byte map of who owns what.
TEST(RangeResize, RandomResizesKeepTheBooks) {
  RangeAllocator a(1 << 20, {.alignment = 64});
  test::Rng rng(11);
  struct Live {
    RangeAllocation r;
    uint64_t size;
  };
  std::vector<Live> live;
  for (int step = 0; step < 20000; ++step) {
    const uint64_t pick = rng.below(3);
    if (pick == 0 || live.empty()) {
      const uint64_t size = 1 + rng.below(16 * kKiB);
      const RangeAllocation r = a.allocate(size);
      if (r) live.push_back({r, size});
    } else if (pick == 1) {
      const size_t i = rng.below(live.size());
      ASSERT_EQ(a.deallocate(live[i].r), Status::ok);
      live[i] = live.back();
      live.pop_back();
    } else {
      Live& l = live[rng.below(live.size())];
      const uint64_t size = 1 + rng.below(32 * kKiB);
      const Status s = a.resize(l.r.offset, l.r.handle, size);
      ASSERT_TRUE(s == Status::ok || s == Status::out_of_space) << to_string(s);
      if (s == Status::ok) l.size = size;
      EXPECT_EQ(a.allocation_size(l.r), (l.size + 63) / 64 * 64);
    }
    if (step % 1000 == 0) {
      ASSERT_VALID(a);
    }
  }
  uint64_t requested = 0;
  for (const Live& l : live) requested += l.size;
  EXPECT_EQ(a.requested_bytes(), requested);
  EXPECT_EQ(a.live_allocations(), live.size());
  for (const Live& l : live) ASSERT_EQ(a.deallocate(l.r), Status::ok);
  expect_whole_and_free(a);
}

}  // namespace
}  // namespace unipool
