// host_bench: a cheap clock for sampled per-call latencies.
//
// clock_gettime through the vDSO costs ~20 ns, as much as a fast malloc, so
// sampled calls are timed with the time-stamp counter instead (constant and
// invariant on every x86-64 this runs on) and converted to ns with a ratio
// calibrated once against CLOCK_MONOTONIC. Other CPUs fall back to the clock.
#pragma once

#include <cstdint>
#include <ctime>

#if defined(__x86_64__)
#include <x86intrin.h>
#endif

namespace host_bench {

inline uint64_t monotonic_ns() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000ull + static_cast<uint64_t>(ts.tv_nsec);
}

#if defined(__x86_64__)
// lfence on both sides keeps the timed call from moving across the reads.
inline uint64_t ticks_begin() {
  _mm_lfence();
  const uint64_t t = __rdtsc();
  _mm_lfence();
  return t;
}
inline uint64_t ticks_end() {
  unsigned aux = 0;
  const uint64_t t = __rdtscp(&aux);
  _mm_lfence();
  return t;
}
#else
inline uint64_t ticks_begin() { return monotonic_ns(); }
inline uint64_t ticks_end() { return monotonic_ns(); }
#endif

// Nanoseconds per tick, measured over ~20 ms on first use.
double ns_per_tick();

// Median cost of an empty ticks_begin()/ticks_end() pair, in ns: every
// sampled latency includes it once (reported, not subtracted).
double timer_overhead_ns();

}  // namespace host_bench
