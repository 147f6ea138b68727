// unipool: float-like size bins for the range allocator.
//
// A bin index is a tiny float: an exponent and kMantissaBits of mantissa, so
// every power of two is split into kBinsPerGroup bins of equal width and a bin
// spans at most 1/kBinsPerGroup of its lower bound (12.5% for 3 bits). Sizes
// below kBinsPerGroup get one bin each ("denormals").
//
// A free range is filed in bin_of(size): the bin that holds its size. All
// ranges of bins above bin_of(n) are >= n; ranges of bin_of(n) itself may be
// smaller or larger than n, which is why the allocator scans that one bin.
#pragma once

#include <bit>
#include <cstdint>

namespace unipool::core {

inline constexpr uint32_t kMantissaBits = 3;
inline constexpr uint32_t kBinsPerGroup = 1u << kMantissaBits;
inline constexpr uint32_t kMantissaMask = kBinsPerGroup - 1;
// Sizes are below 2^63, so the top exponent group is 63 - kMantissaBits + 1.
inline constexpr uint32_t kGroupCount = 64 - kMantissaBits + 1;
inline constexpr uint32_t kBinCount = kGroupCount * kBinsPerGroup;
static_assert(kGroupCount <= 64, "one bit per group in a 64-bit top mask");
static_assert(kBinsPerGroup <= 32, "one bit per bin in a 32-bit leaf mask");

// The bin whose value range [bin_floor(b), bin_floor(b + 1)) holds size.
constexpr uint32_t bin_of(uint64_t size) noexcept {
  if (size < kBinsPerGroup) return static_cast<uint32_t>(size);
  const uint32_t top_bit = 63u - static_cast<uint32_t>(std::countl_zero(size));
  const uint32_t shift = top_bit - kMantissaBits;
  const auto mantissa = static_cast<uint32_t>(size >> shift) & kMantissaMask;
  return ((shift + 1) << kMantissaBits) | mantissa;
}

// The smallest size filed in bin b.
constexpr uint64_t bin_floor(uint32_t bin) noexcept {
  const uint32_t exponent = bin >> kMantissaBits;
  const uint64_t mantissa = bin & kMantissaMask;
  if (exponent == 0) return mantissa;
  return (mantissa | kBinsPerGroup) << (exponent - 1);
}

// The smallest bin all of whose ranges are >= size (the classic search start).
constexpr uint32_t bin_of_round_up(uint64_t size) noexcept {
  const uint32_t bin = bin_of(size);
  return bin_floor(bin) == size ? bin : bin + 1;
}

constexpr uint32_t group_of(uint32_t bin) noexcept { return bin >> kMantissaBits; }
constexpr uint32_t slot_of(uint32_t bin) noexcept { return bin & kMantissaMask; }

static_assert(bin_of(7) == 7 && bin_floor(7) == 7);
static_assert(bin_floor(bin_of(8)) == 8 && bin_of(9) == bin_of(8) + 1);
static_assert(bin_floor(bin_of(33554449)) == 33554432);
static_assert(bin_of_round_up(33554449) == bin_of(33554432) + 1);
static_assert(bin_of((uint64_t{1} << 63) - 1) < kBinCount);

}  // namespace unipool::core
