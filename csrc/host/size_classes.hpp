// unipool host: size classes of the small and middle paths.
//
// Classes: 16-byte steps up to 128, four classes per power of two up to
// 1 KiB, eight per power of two from 1 to 16 KiB, four above (up to 128
// KiB). So a block wastes at most 25% of itself (at most 12.5%, 6.25% on
// average, between 1 and 16 KiB, where programs put page-sized buffers with
// a small header: sqlite's 4,104 and 4,368-byte blocks take 4,608, not
// 5,120). Why eight to 16 KiB: rpmalloc_random (16 B-16,000 B, half its
// bytes in blocks of 8-16 KiB) held 1.093x the bytes it asked for where
// four above 8 KiB held 1.120x (one thread; 1.096 against 1.127 at two
// under thread_cache=size), for 1-4% more peak RSS in mid_mt (8-32 KiB,
// 256 live blocks a thread: more classes, more partly used pages). Every
// class size is a multiple of the largest power of two up to an eighth of
// it, which is what lets aligned requests use the classes (see
// aligned_class()).
//
// Small classes (<= kSmallMax, 8 KiB) live in 64 KiB pages, middle ones in
// 256 KiB pages. Why 8 KiB: a page holds blocks of one class, so a class
// with few live blocks still holds a page, and a page empties (and can
// serve another class of its kind) only when all its blocks are free. On
// 64 KiB pages rather than 256 KiB, the classes of 1-8 KiB gave exchange
// (16 B-8 KiB) 15% and 7% less peak RSS at 2 and 4 threads, rl_medium 11%
// less at 2 (paired runs), at the same speed or faster.
#pragma once

#include <array>
#include <cstdint>

#include "core/align.hpp"

namespace unipool::host {

inline constexpr uint32_t kSmallMax = 8192;
// Dense classes (<= 1 KiB): at least 64 blocks to a page (layout.hpp's
// segment kinds).
inline constexpr uint32_t kDenseMax = 1024;
inline constexpr uint32_t kNumDenseClasses = 20;
inline constexpr uint32_t kMiddleLimit = 128 << 10;  // largest middle_max
inline constexpr uint32_t kNumSmallClasses = 44;
// Classes step by an eighth of a power of two from 1 KiB up to this size.
inline constexpr uint32_t kFineMax = 16 << 10;
inline constexpr uint32_t kNumClasses = 64;
// Largest alignment the classes serve; page starts are aligned to it.
inline constexpr uint32_t kMaxClassAlignment = 4096;

namespace detail {
constexpr std::array<uint32_t, kNumClasses> make_class_sizes() {
  std::array<uint32_t, kNumClasses> sizes{};
  uint32_t n = 0;
  for (uint32_t s = 16; s <= 128; s += 16) sizes[n++] = s;
  for (uint32_t base = 128; base < kMiddleLimit; base *= 2) {
    const uint32_t steps = base >= 1024 && base < kFineMax ? 8 : 4;
    for (uint32_t k = steps + 1; k <= 2 * steps; ++k) sizes[n++] = base / steps * k;
  }
  return sizes;
}
}  // namespace detail

inline constexpr std::array<uint32_t, kNumClasses> kClassSize = detail::make_class_sizes();

namespace detail {
// Class of every size, indexed by (size + 15) / 16.
constexpr std::array<uint8_t, kMiddleLimit / 16 + 1> make_class_table() {
  std::array<uint8_t, kMiddleLimit / 16 + 1> table{};
  uint32_t cls = 0;
  for (uint32_t i = 0; i < table.size(); ++i) {
    while (kClassSize[cls] < i * 16) ++cls;
    table[i] = static_cast<uint8_t>(cls);
  }
  return table;
}
// ceil(2^32 / size): (offset * r) >> 32 is offset / size for every exact
// multiple of size below 2^16 blocks, which is all the free path needs to
// tell a block start from an interior pointer (it checks idx * size back).
constexpr std::array<uint64_t, kNumClasses> make_reciprocals() {
  std::array<uint64_t, kNumClasses> r{};
  for (uint32_t i = 0; i < kNumClasses; ++i) r[i] = ((uint64_t{1} << 32) + kClassSize[i] - 1) / kClassSize[i];
  return r;
}
}  // namespace detail

inline constexpr auto kClassOfIndex = detail::make_class_table();
inline constexpr auto kClassReciprocal = detail::make_reciprocals();

static_assert(kClassSize[kNumSmallClasses - 1] == kSmallMax);
static_assert(kClassSize[kNumDenseClasses - 1] == kDenseMax);
static_assert(kClassSize[kNumClasses - 1] == kMiddleLimit);
static_assert(kMiddleLimit % kMaxClassAlignment == 0);  // aligned_class_unchecked()
// Every block starts on a 16-byte granule: its live bit (layout.hpp) is its
// first granule's.
static_assert([] {
  for (uint32_t size : kClassSize) {
    if (size % 16 != 0) return false;
  }
  return true;
}());

// Class of a size in [1, kMiddleLimit].
inline uint32_t class_of(uint64_t size) noexcept { return kClassOfIndex[(size + 15) >> 4]; }

inline bool is_small_class(uint32_t cls) noexcept { return cls < kNumSmallClasses; }

namespace detail {
// For each alignment from 32 to kMaxClassAlignment (shift 5 to 12), the
// smallest class whose blocks are multiples of it, by size / alignment (the
// size rounded up to the alignment), one table after the other: 8 KiB in
// all, so that aligned_alloc's class costs one load, not a loop over classes
// with a branch per class.
inline constexpr unsigned kFirstAlignShift = 5, kLastAlignShift = 12;
// Where each alignment's table starts; [kLastAlignShift + 1] is the end.
constexpr auto make_aligned_table_starts() {
  std::array<uint32_t, kLastAlignShift + 2> starts{};
  for (unsigned s = kFirstAlignShift; s <= kLastAlignShift; ++s) starts[s + 1] = starts[s] + (kMiddleLimit >> s) + 1;
  return starts;
}
inline constexpr auto kAlignedTableStart = make_aligned_table_starts();
constexpr auto make_aligned_class_table() {
  std::array<uint8_t, kAlignedTableStart[kLastAlignShift + 1]> table{};
  for (unsigned s = kFirstAlignShift; s <= kLastAlignShift; ++s) {
    uint32_t cls = 0;  // never smaller for a larger size: carried (clang's constexpr step limit)
    for (uint32_t i = 0; i <= (kMiddleLimit >> s); ++i) {
      while (cls < kNumClasses && (kClassSize[cls] < (i << s) || kClassSize[cls] % (1u << s) != 0)) ++cls;
      table[kAlignedTableStart[s] + i] = static_cast<uint8_t>(cls);
    }
  }
  return table;
}
}  // namespace detail
static_assert(kMaxClassAlignment == 1u << detail::kLastAlignShift);
inline constexpr auto kAlignedClassOf = detail::make_aligned_class_table();

// aligned_class() for a size in [1, kMiddleLimit] and a power of two in
// [32, kMaxClassAlignment], which the caller has made sure of (the fast
// path's case): no test, only the table's load. The size rounded up stays
// within kMiddleLimit, a multiple of every alignment served.
inline uint32_t aligned_class_unchecked(uint64_t size, uint64_t alignment) noexcept {
  const auto shift = static_cast<unsigned>(__builtin_ctzll(alignment));
  return kAlignedClassOf[detail::kAlignedTableStart[shift] + (align_up(size, alignment) >> shift)];
}

// The smallest class that holds `size` and whose blocks are multiples of
// `alignment` (a power of two <= kMaxClassAlignment), or kNumClasses if none
// up to kMiddleLimit.
inline uint32_t aligned_class(uint64_t size, uint64_t alignment) noexcept {
  const uint64_t rounded = align_up(size, alignment);
  if (rounded > kMiddleLimit) return kNumClasses;
  if (alignment < (1u << detail::kFirstAlignShift)) return class_of(rounded);  // every class is a multiple of 16
  return aligned_class_unchecked(size, alignment);
}

}  // namespace unipool::host
