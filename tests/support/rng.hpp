// unipool tests: a small deterministic random generator.
//
// SplitMix64 with our own range reduction, so a seed gives the same sequence
// with every standard library (std::uniform_int_distribution does not).
#pragma once

#include <bit>
#include <cstdint>

namespace unipool::test {

class Rng {
 public:
  explicit Rng(uint64_t seed) noexcept : state_(seed) {}

  uint64_t next() noexcept {
    uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }

  // Uniform in [0, n); 0 when n == 0.
  uint64_t below(uint64_t n) noexcept {
    __extension__ using u128 = unsigned __int128;
    return static_cast<uint64_t>((static_cast<u128>(next()) * n) >> 64);
  }

  // Uniform in [lo, hi], inclusive.
  uint64_t between(uint64_t lo, uint64_t hi) noexcept {
    const uint64_t span = hi - lo;
    return span == ~uint64_t{0} ? next() : lo + below(span + 1);
  }

  bool chance(double p) noexcept { return static_cast<double>(next() >> 11) * 0x1.0p-53 < p; }

  // A size in [lo, hi] (lo >= 1) whose power of two is uniform: as many small
  // sizes as large ones, the way a mixed allocation workload looks.
  uint64_t log_uniform(uint64_t lo, uint64_t hi) noexcept {
    const int lo_bit = 63 - std::countl_zero(lo);
    const int hi_bit = 63 - std::countl_zero(hi);
    const int bit = lo_bit + static_cast<int>(below(static_cast<uint64_t>(hi_bit - lo_bit + 1)));
    const uint64_t start = uint64_t{1} << bit;
    uint64_t v = start + below(start);  // [2^bit, 2^(bit+1))
    if (v < lo) v = lo;
    if (v > hi) v = hi;
    return v;
  }

 private:
  uint64_t state_;
};

}  // namespace unipool::test
