// host_bench: deterministic random numbers and the workloads' size draws.
//
// Sizes are drawn before the clock starts into a ring of 64 K entries, so the
// timed loop pays one load per size whatever the distribution (a log-uniform
// draw costs an exp(), as much as a fast malloc).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace host_bench {

// xorshift64*: fast, good enough to pick slots and sizes, seedable per thread.
class Rng {
 public:
  explicit Rng(uint64_t seed) : state_(mix(seed) | 1) {}
  uint64_t next() {
    state_ ^= state_ >> 12;
    state_ ^= state_ << 25;
    state_ ^= state_ >> 27;
    return state_ * 0x2545F4914F6CDD1Dull;
  }
  // Uniform in [0, n), n < 2^32.
  uint32_t below(uint32_t n) { return static_cast<uint32_t>(((next() >> 32) * n) >> 32); }
  // Uniform in [lo, hi].
  uint64_t between(uint64_t lo, uint64_t hi) { return lo + below(static_cast<uint32_t>(hi - lo + 1)); }
  double unit() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }

 private:
  static uint64_t mix(uint64_t z) {  // splitmix64 finalizer
    z += 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  uint64_t state_;
};

enum class SizeLaw {
  uniform,         // every integer in [lo, hi] equally likely
  log_uniform,     // log(size) uniform: as many 16-32 B as 32-64 KiB requests
  linear_falloff,  // density falls linearly from lo to zero at hi (rpmalloc)
};

struct SizeSpec {
  SizeLaw law;
  uint64_t lo;
  uint64_t hi;
  uint64_t multiple_of = 1;  // rounded up to this after the draw
};

// A ring of pre-drawn sizes; next() cycles through it.
class SizeRing {
 public:
  SizeRing(const SizeSpec& spec, uint64_t seed);
  uint64_t next() { return sizes_[cursor_++ & kMask]; }
  double mean() const;

 private:
  static constexpr size_t kCount = size_t{1} << 16;
  static constexpr size_t kMask = kCount - 1;
  std::vector<uint32_t> sizes_;
  size_t cursor_ = 0;
};

uint64_t draw_size(const SizeSpec& spec, Rng& rng);

}  // namespace host_bench
