// offset_util: the classic O(1) offset allocator, the peer unipool's range
// allocator is measured against.
//
// Written for this benchmark from the published description of
// sebbbi/OffsetAllocator (and Mooncake's 64-bit variant of it); no code is
// taken from either. It is the reference the unipool allocator is measured
// against, so it keeps the classic placement policy on purpose:
//
//  * Sizes map to "small float" bins: an exponent and a 3-bit mantissa, so a
//    power of two is split into 8 bins of equal width (12.5% steps).
//  * A free range is filed in the bin of its size rounded DOWN, so every range
//    of bin b is >= bin_value(b).
//  * A request of n searches from the bin of n rounded UP (every range there
//    fits without looking), through a two-level bitmap (one bit per exponent
//    group, one byte of bits per group), and takes the HEAD of the first
//    non-empty bin. The rest of that range is filed back as a new free range.
//  * free() merges with the address neighbours and files the merged range.
//
// The consequence the benchmark shows: a freed block of a non-bin size s sits
// one bin below the search start for s, so it is never reused for s (about
// 2/3 utilization on uniform sizes). Rounding every request up to its bin
// value (policy "bin-roundup") fixes that and caps near 8/9 instead.
//
// Nodes live in a growable vector (indices, so growth never breaks links);
// spare nodes are kept on a LIFO stack. Offsets and sizes are 64-bit.
#pragma once

#include <array>
#include <bit>
#include <cstdint>
#include <string>
#include <vector>

namespace offset_util {

// The 3-bit-mantissa bins of the classic allocator, for sizes below 2^62.
namespace classic_bins {

inline constexpr uint32_t kMantissaBits = 3;
inline constexpr uint32_t kMantissaValues = 1u << kMantissaBits;
inline constexpr uint32_t kMantissaMask = kMantissaValues - 1;
// Sizes < 2^62: the largest round-up bin has exponent 60, so 61 groups.
inline constexpr uint32_t kGroups = 61;
inline constexpr uint32_t kBins = kGroups * kMantissaValues;
inline constexpr uint64_t kMaxSize = uint64_t{1} << 62;

// The bin of `size` rounded down: the largest bin value <= size.
constexpr uint32_t round_down(uint64_t size) noexcept {
  if (size < kMantissaValues) return static_cast<uint32_t>(size);  // denormals
  const uint32_t high = 63u - static_cast<uint32_t>(std::countl_zero(size));
  const uint32_t start = high - kMantissaBits;  // lowest mantissa bit
  const auto mantissa = static_cast<uint32_t>(size >> start) & kMantissaMask;
  return ((start + 1) << kMantissaBits) | mantissa;
}

// The bin of `size` rounded up: the smallest bin value >= size. A carry out
// of the mantissa moves into the exponent, which is the next bin anyway.
constexpr uint32_t round_up(uint64_t size) noexcept {
  if (size < kMantissaValues) return static_cast<uint32_t>(size);
  const uint32_t high = 63u - static_cast<uint32_t>(std::countl_zero(size));
  const uint32_t start = high - kMantissaBits;
  const uint32_t bin = round_down(size);
  const uint64_t low_bits = size & ((uint64_t{1} << start) - 1);
  return low_bits != 0 ? bin + 1 : bin;
}

// The smallest size of bin b (its "value").
constexpr uint64_t value(uint32_t bin) noexcept {
  const uint32_t exponent = bin >> kMantissaBits;
  const uint64_t mantissa = bin & kMantissaMask;
  if (exponent == 0) return mantissa;
  return (mantissa | kMantissaValues) << (exponent - 1);
}

// `size` rounded up to a bin value: what policy "bin-roundup" asks for.
constexpr uint64_t round_up_size(uint64_t size) noexcept { return value(round_up(size)); }

static_assert(round_down(7) == 7 && round_up(7) == 7 && value(7) == 7);
static_assert(value(round_down(8)) == 8 && round_down(9) == round_down(8) + 1);
static_assert(round_up_size(15) == 15 && round_up_size(49) == 52);
static_assert(round_up_size(33554449) == 37748736);  // 2^25 * 9/8
static_assert(round_up_size(33554432) == 33554432);
static_assert(round_down(33554449) + 1 == round_up(33554449));
static_assert(round_up(kMaxSize - 1) < kBins);

}  // namespace classic_bins

class ClassicOffsetAllocator {
 public:
  static constexpr uint32_t kNoNode = ~uint32_t{0};

  struct Allocation {
    uint64_t offset = 0;
    uint32_t node = kNoNode;  // kNoNode: the allocation failed
    explicit operator bool() const noexcept { return node != kNoNode; }
  };

  // capacity < 2^62. reserve_nodes only pre-sizes the node vector.
  explicit ClassicOffsetAllocator(uint64_t capacity, size_t reserve_nodes = 1024);

  // Exactly `size` bytes (no rounding here; that is a policy of the caller).
  Allocation allocate(uint64_t size);
  // `a` must be a live allocation of this allocator.
  void free(const Allocation& a);

  uint64_t capacity() const noexcept { return capacity_; }
  uint64_t free_bytes() const noexcept { return free_bytes_; }
  uint64_t free_ranges() const noexcept { return free_ranges_; }

  // O(n log n) check of every invariant, for tests and --check runs: the
  // ranges tile [0, capacity) with consistent neighbour links, no two free
  // ranges touch, each free range is in the bin of its round-down size exactly
  // once, the bitmaps match the bins, and the counters match a recount.
  bool validate(std::string* why = nullptr) const;

 private:
  enum class State : uint8_t { spare, free, used };
  struct Node {
    uint64_t offset = 0;
    uint64_t size = 0;
    uint32_t bin_prev = kNoNode, bin_next = kNoNode;    // bin list
    uint32_t addr_prev = kNoNode, addr_next = kNoNode;  // address neighbours
    State state = State::spare;
  };

  uint32_t take_node();
  void give_back(uint32_t index);
  // Files a new free range in the bin of its round-down size; returns its node.
  uint32_t file_free(uint64_t offset, uint64_t size);
  // Removes free range `index` from its bin and gives the node back.
  void unfile(uint32_t index);
  void clear_bin_bit(uint32_t bin) noexcept;

  std::vector<Node> nodes_;
  std::vector<uint32_t> spare_;  // LIFO stack of spare node indices
  uint64_t top_mask_ = 0;        // bit g: some bin of group g is non-empty
  std::array<uint8_t, classic_bins::kGroups> leaf_masks_{};  // bit i: bin (g, i)
  std::array<uint32_t, classic_bins::kBins> bin_heads_{};
  uint64_t capacity_ = 0;
  uint64_t free_bytes_ = 0;
  uint64_t free_ranges_ = 0;
};

}  // namespace offset_util
