#include "tsc_clock.hpp"

#include <algorithm>
#include <array>

namespace host_bench {

double ns_per_tick() {
  static const double ratio = [] {
    const uint64_t n0 = monotonic_ns();
    const uint64_t t0 = ticks_begin();
    while (monotonic_ns() - n0 < 20'000'000) {
    }
    const uint64_t n1 = monotonic_ns();
    const uint64_t t1 = ticks_end();
    return t1 > t0 ? static_cast<double>(n1 - n0) / static_cast<double>(t1 - t0) : 1.0;
  }();
  return ratio;
}

double timer_overhead_ns() {
  static const double overhead = [] {
    std::array<uint64_t, 1001> samples{};
    for (auto& s : samples) {
      const uint64_t t0 = ticks_begin();
      s = ticks_end() - t0;
    }
    std::nth_element(samples.begin(), samples.begin() + samples.size() / 2, samples.end());
    return static_cast<double>(samples[samples.size() / 2]) * ns_per_tick();
  }();
  return overhead;
}

}  // namespace host_bench
