// Size bins: bin_of / bin_floor / bin_of_round_up are consistent, monotonic
// and tight over the whole size range the allocator accepts (below 2^62, and
// need = size + slack below 2^63).
#include "core/size_bins.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "support/rng.hpp"

namespace unipool::core {
namespace {

constexpr uint64_t kTop = (uint64_t{1} << 63) - 1;  // the largest size a bin must hold
constexpr uint32_t kTopBin = bin_of(kTop);

// Dense small sizes, every power of two and its neighbours, every bin floor
// and its neighbours, the region near 2^62 and 2^63, and random sizes.
std::vector<uint64_t> interesting_sizes() {
  std::vector<uint64_t> sizes;
  for (uint64_t s = 0; s <= 70000; ++s) sizes.push_back(s);
  for (int bit = 0; bit < 63; ++bit) {
    const uint64_t p = uint64_t{1} << bit;
    for (uint64_t d = 0; d <= 17; ++d) {
      sizes.push_back(p + d);
      if (p > d) sizes.push_back(p - d);
    }
    sizes.push_back(p + p / 2 + 17);  // non-bin sizes like 2^20 + 17 scaled
  }
  for (uint32_t b = 0; b <= kTopBin; ++b) {
    const uint64_t f = bin_floor(b);
    sizes.push_back(f);
    if (f > 0) sizes.push_back(f - 1);
    if (f < kTop) sizes.push_back(f + 1);
  }
  for (uint64_t d = 0; d < 1000; ++d) {
    sizes.push_back((uint64_t{1} << 62) - 1 - d);
    sizes.push_back((uint64_t{1} << 62) + d);
    sizes.push_back(kTop - d);
  }
  test::Rng rng(0xB1);
  for (int i = 0; i < 200000; ++i) sizes.push_back(rng.log_uniform(1, kTop));
  std::sort(sizes.begin(), sizes.end());
  sizes.erase(std::unique(sizes.begin(), sizes.end()), sizes.end());
  while (!sizes.empty() && sizes.back() > kTop) sizes.pop_back();
  return sizes;
}

TEST(SizeBins, DenormalSizesHaveOneBinEach) {
  for (uint64_t s = 0; s < kBinsPerGroup; ++s) {
    EXPECT_EQ(bin_of(s), s);
    EXPECT_EQ(bin_floor(static_cast<uint32_t>(s)), s);
    EXPECT_EQ(bin_of_round_up(s), s);
  }
  // The first normal group continues without a gap: 8..15 are bins 8..15.
  for (uint64_t s = kBinsPerGroup; s < 2 * kBinsPerGroup; ++s) EXPECT_EQ(bin_of(s), s);
}

TEST(SizeBins, PowersOfTwoOpenAGroup) {
  for (uint32_t bit = kMantissaBits; bit < 63; ++bit) {
    const uint32_t b = bin_of(uint64_t{1} << bit);
    EXPECT_EQ(slot_of(b), 0u) << "2^" << bit;
    EXPECT_EQ(group_of(b), bit - kMantissaBits + 1) << "2^" << bit;
    EXPECT_EQ(bin_floor(b), uint64_t{1} << bit);
  }
}

TEST(SizeBins, FloorAndBinOfAreInverse) {
  uint64_t previous = 0;
  for (uint32_t b = 0; b <= kTopBin; ++b) {
    const uint64_t f = bin_floor(b);
    EXPECT_EQ(bin_of(f), b) << "bin " << b;
    if (b > 0) {
      EXPECT_GT(f, previous) << "bin_floor must increase strictly, bin " << b;
    }
    previous = f;
    EXPECT_EQ((group_of(b) << kMantissaBits) | slot_of(b), b);
  }
  EXPECT_LT(kTopBin, kBinCount);
  EXPECT_LT(group_of(kTopBin), kGroupCount);
  // The bin after the top one still has a representable floor (2^63).
  EXPECT_EQ(bin_floor(kTopBin + 1), uint64_t{1} << 63);
}

TEST(SizeBins, EverySizeLiesInItsBin) {
  const std::vector<uint64_t> sizes = interesting_sizes();
  ASSERT_GT(sizes.size(), 100000u);
  uint32_t previous_bin = 0;
  for (const uint64_t s : sizes) {
    const uint32_t b = bin_of(s);
    ASSERT_LT(b, kBinCount) << s;
    ASSERT_LE(bin_floor(b), s) << s;
    ASSERT_GT(bin_floor(b + 1), s) << s;  // so every range of a bin above holds s
    ASSERT_GE(b, previous_bin) << "bin_of must not decrease, size " << s;
    previous_bin = b;
  }
}

TEST(SizeBins, RoundUpIsTheFirstBinWhoseEveryRangeFits) {
  for (const uint64_t s : interesting_sizes()) {
    const uint32_t r = bin_of_round_up(s);
    ASSERT_GE(bin_floor(r), s) << s;
    if (r > 0) {
      ASSERT_LT(bin_floor(r - 1), s) << s;
    }
    // Round-up equals bin_of exactly for bin floors, else it is the next bin.
    if (bin_floor(bin_of(s)) == s) {
      ASSERT_EQ(r, bin_of(s)) << s;
    } else {
      ASSERT_EQ(r, bin_of(s) + 1) << s;
    }
  }
}

TEST(SizeBins, RoundUpIsMonotonic) {
  uint32_t previous = 0;
  for (const uint64_t s : interesting_sizes()) {
    const uint32_t r = bin_of_round_up(s);
    ASSERT_GE(r, previous) << s;
    previous = r;
  }
}

TEST(SizeBins, BinsAreAtMostAnEighthWide) {
  for (uint32_t b = kBinsPerGroup; b <= kTopBin; ++b) {
    const uint64_t width = bin_floor(b + 1) - bin_floor(b);
    EXPECT_LE(width * kBinsPerGroup, bin_floor(b)) << "bin " << b;
  }
}

TEST(SizeBins, ExamplesFromTheDesign) {
  // 2^20 + 17: a non-bin size just above a power of two.
  const uint64_t s = (uint64_t{1} << 20) + 17;
  EXPECT_EQ(bin_floor(bin_of(s)), uint64_t{1} << 20);
  EXPECT_EQ(bin_of_round_up(s), bin_of(uint64_t{1} << 20) + 1);
  EXPECT_EQ(bin_floor(bin_of_round_up(s)), (uint64_t{1} << 20) + (uint64_t{1} << 17));
  // Near 2^62: sizes the allocator still accepts.
  const uint64_t big = (uint64_t{1} << 62) - 1;
  EXPECT_EQ(bin_floor(bin_of(big)), (uint64_t{15}) << 58);
  EXPECT_EQ(bin_of(uint64_t{1} << 62), bin_of(big) + 1);
}

}  // namespace
}  // namespace unipool::core
