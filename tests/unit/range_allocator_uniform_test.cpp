// The key property of the placement policy: on a stream of equal requests of
// a size s that is not a bin value, the pool holds exactly floor(P / s)
// allocations, and keeps holding that many under any pattern of evictions,
// because a freed block of size s is found again by the next request of s.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "core/size_bins.hpp"
#include "support/allocator_checks.hpp"
#include "support/rng.hpp"
#include "unipool/range_allocator.hpp"

namespace unipool {
namespace {

using test::kKiB;
using test::kMiB;

struct UniformCase {
  const char* name;
  uint64_t capacity;
  uint64_t size;
  uint64_t alignment = 1;
  uint32_t fit_scan_limit = 8;
  int rounds = 300;
};

void PrintTo(const UniformCase& c, std::ostream* os) { *os << c.name; }

class Uniform : public ::testing::TestWithParam<UniformCase> {};

TEST_P(Uniform, HoldsFloorOfPoolOverSizeUnderEvictions) {
  const UniformCase& c = GetParam();
  RangeAllocator a(c.capacity, {.alignment = c.alignment, .fit_scan_limit = c.fit_scan_limit});
  const uint64_t extent = (c.size + c.alignment - 1) / c.alignment * c.alignment;
  const uint64_t slots = a.capacity() / extent;
  ASSERT_GT(slots, 1u);
  // The point is sizes that are not bin values (the classic allocator's 2/3).
  ASSERT_NE(core::bin_floor(core::bin_of(extent)), extent) << "pick a non-bin size";

  // Fill: a grid of slots from offset 0.
  std::vector<RangeAllocation> live;
  for (uint64_t i = 0; i < slots; ++i) {
    const RangeAllocation x = a.allocate(c.size);
    ASSERT_TRUE(x) << "slot " << i << " of " << slots << ": " << to_string(x.status);
    EXPECT_EQ(x.offset, i * extent);
    live.push_back(x);
    ASSERT_VALID(a);
  }
  EXPECT_EQ(a.allocate(c.size).status, Status::out_of_space);
  EXPECT_EQ(a.used_bytes(), slots * extent);
  EXPECT_EQ(a.requested_bytes(), slots * c.size);

  // Evict k random blocks, ask for k blocks again: every request succeeds, the
  // pool is full again, and when k == 1 the hole itself is reused.
  test::Rng rng(c.capacity ^ c.size);
  for (int round = 0; round < c.rounds; ++round) {
    const uint64_t k = rng.chance(0.3) ? 1 : 1 + rng.below(std::min<uint64_t>(slots, 64));
    std::vector<uint64_t> holes;
    for (uint64_t j = 0; j < k; ++j) {
      const size_t i = rng.below(live.size());
      holes.push_back(live[i].offset);
      ASSERT_EQ(a.deallocate(live[i]), Status::ok);
      live[i] = live.back();
      live.pop_back();
      ASSERT_VALID(a);
    }
    for (uint64_t j = 0; j < k; ++j) {
      const RangeAllocation x = a.allocate(c.size);
      ASSERT_TRUE(x) << "round " << round << ": refill " << j << " of " << k << " failed ("
                     << to_string(x.status) << ") with " << a.free_bytes() << " bytes free in "
                     << a.free_ranges() << " ranges";
      EXPECT_EQ(x.offset % extent, 0u) << "the grid of slots is kept";
      if (k == 1) {
        EXPECT_EQ(x.offset, holes[0]) << "a freed block is reused for its own size";
      }
      live.push_back(x);
      ASSERT_VALID(a);
    }
    ASSERT_EQ(a.live_allocations(), slots);
    ASSERT_EQ(a.allocate(c.size).status, Status::out_of_space);
    ASSERT_EQ(a.free_bytes(), a.capacity() - slots * extent);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Sizes, Uniform,
    ::testing::Values(
        // 2^20 + 17 in 64 MiB holds 63 (64 MiB / (1 MiB + 17) = 63.99...).
        UniformCase{"mib_plus_17_in_64mib", 64 * kMiB, kMiB + 17}, UniformCase{"size_3000_in_1mib", 1 * kMiB, 3000},
        UniformCase{"size_4097_in_256kib", 256 * kKiB, 4097}, UniformCase{"size_1000003_in_64mib", 64 * kMiB, 1000003},
        UniformCase{"size_17_in_1000", 1000, 17}, UniformCase{"three_slots", 100, 31},
        // A remainder (P mod s) that lands in the request's own bin.
        UniformCase{"remainder_in_own_bin", 10 * 1100 + 1050, 1100},
        // Pool alignment: the extent (4352, 70144) is what must not be a bin value.
        UniformCase{"align256_size_4300", 1 * kMiB, 4300, 256},
        UniformCase{"align256_size_70000", 16 * kMiB, 70000, 256},
        // Large numbers at byte granularity.
        UniformCase{"gib_plus_12345_in_1tib", uint64_t{1} << 40, (uint64_t{1} << 30) + 12345, 1, 8, 100},
        // Bounded scans: the remainder P mod s is the only range of the own
        // bin that does not fit, and it is never filed ahead of a hole of s.
        UniformCase{"scan_limit_2", 1 * kMiB, 3000, 1, 2}, UniformCase{"scan_limit_1", 1 * kMiB, 3000, 1, 1},
        UniformCase{"scan_limit_1_remainder_in_own_bin", 10 * 1100 + 1050, 1100, 1, 1, 2000}),
    [](const ::testing::TestParamInfo<UniformCase>& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace unipool
