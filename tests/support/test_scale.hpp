// unipool tests: how much work the long randomized tests do.
//
// UNIPOOL_TEST_SCALE (environment, a positive number) multiplies every
// operation count; the asan and tsan test presets set it. Without it the build
// may pass a default through the UNIPOOL_TEST_DEFAULT_SCALE definition
// (tests/CMakeLists.txt does for sanitizer and unoptimized builds).
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstdlib>

namespace unipool::test {

inline double test_scale() {
  static const double scale = [] {
    if (const char* env = std::getenv("UNIPOOL_TEST_SCALE")) {
      char* end = nullptr;
      const double v = std::strtod(env, &end);
      if (end != env && v > 0) return v;
    }
#ifdef UNIPOOL_TEST_DEFAULT_SCALE
    return static_cast<double>(UNIPOOL_TEST_DEFAULT_SCALE);
#else
    return 1.0;
#endif
  }();
  return scale;
}

// n scaled by test_scale(), never below `at_least`.
inline uint64_t scaled(uint64_t n, uint64_t at_least = 1) {
  const auto v = static_cast<uint64_t>(static_cast<double>(n) * test_scale());
  return std::max(v, at_least);
}

}  // namespace unipool::test
