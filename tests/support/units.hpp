// unipool tests: byte units, written once for every test.
#pragma once

#include <cstdint>

namespace unipool::test {

inline constexpr uint64_t kKiB = uint64_t{1} << 10;
inline constexpr uint64_t kMiB = uint64_t{1} << 20;
inline constexpr uint64_t kGiB = uint64_t{1} << 30;

}  // namespace unipool::test
