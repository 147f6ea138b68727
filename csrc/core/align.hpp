// unipool core: rounding sizes and addresses, written once for every layer.
#pragma once

#include <cstdint>

namespace unipool {

// `v` rounded up to a multiple of `to` (any multiple: chunks, strides).
inline constexpr uint64_t round_up(uint64_t v, uint64_t to) noexcept { return (v + to - 1) / to * to; }

// `v` rounded up / down to `alignment`, a power of two.
inline constexpr uint64_t align_up(uint64_t v, uint64_t alignment) noexcept {
  return (v + alignment - 1) & ~(alignment - 1);
}
inline constexpr uint64_t align_down(uint64_t v, uint64_t alignment) noexcept { return v & ~(alignment - 1); }

inline constexpr bool is_power_of_two(uint64_t v) noexcept { return v != 0 && (v & (v - 1)) == 0; }

static_assert(round_up(5, 3) == 6 && align_up(17, 16) == 32 && align_down(31, 16) == 16);

}  // namespace unipool
