// unipool device pool: how requests are rounded, which pool serves them and
// how large a new segment is. The numbers are PyTorch's (CUDACachingAllocator),
// so the two allocators fragment alike and compare fairly.
#pragma once

#include <cstdint>

#include "core/align.hpp"

namespace unipool::device {

inline constexpr uint64_t kMiB = uint64_t{1} << 20;
inline constexpr uint64_t kBlockAlign = 512;           // every block a multiple of it
inline constexpr uint64_t kSmallRequest = 1 * kMiB;    // requests under it: small pool
inline constexpr uint64_t kSmallSegment = 2 * kMiB;    // small pool segment size
inline constexpr uint64_t kMinLargeAlloc = 10 * kMiB;  // under it: a kLargeSegment
inline constexpr uint64_t kLargeSegment = 20 * kMiB;
inline constexpr uint64_t kRoundLarge = 2 * kMiB;      // larger segments round to it
// Anything above this is a caller's bug (no device is a petabyte); refusing it
// early also keeps every rounding below free of overflow.
inline constexpr uint64_t kMaxRequest = uint64_t{1} << 50;

enum class Kind : uint8_t { small = 0, large = 1 };

constexpr uint64_t round_block(uint64_t bytes) noexcept { return round_up(bytes, kBlockAlign); }

constexpr Kind kind_of(uint64_t rounded) noexcept {
  return rounded < kSmallRequest ? Kind::small : Kind::large;
}

// A segment for a request that found no cached block: small requests share
// 2 MiB segments, 1-10 MiB ones 20 MiB segments (so tiny and medium tensors
// never fragment big segments), and larger ones get their own, 2 MiB rounded.
constexpr uint64_t segment_size(uint64_t rounded) noexcept {
  if (kind_of(rounded) == Kind::small) return kSmallSegment;
  if (rounded < kMinLargeAlloc) return kLargeSegment;
  return round_up(rounded, kRoundLarge);
}

static_assert(segment_size(512) == kSmallSegment);
static_assert(segment_size(kSmallRequest) == kLargeSegment);
static_assert(segment_size(kMinLargeAlloc + 1) == 12 * kMiB);

}  // namespace unipool::device
