#include "size_source.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace host_bench {

uint64_t draw_size(const SizeSpec& spec, Rng& rng) {
  uint64_t s = spec.lo;
  const auto lo = static_cast<double>(spec.lo);
  const auto hi = static_cast<double>(spec.hi);
  switch (spec.law) {
    case SizeLaw::uniform:
      s = rng.between(spec.lo, spec.hi);
      break;
    case SizeLaw::log_uniform:
      s = static_cast<uint64_t>(std::exp(std::log(lo) + rng.unit() * (std::log(hi + 1) - std::log(lo))));
      break;
    case SizeLaw::linear_falloff:
      // Inverse of the CDF of density 2(hi - s)/(hi - lo)^2 on [lo, hi].
      s = static_cast<uint64_t>(lo + (hi - lo) * (1.0 - std::sqrt(rng.unit())));
      break;
  }
  s = std::clamp(s, spec.lo, spec.hi);
  return (s + spec.multiple_of - 1) / spec.multiple_of * spec.multiple_of;
}

SizeRing::SizeRing(const SizeSpec& spec, uint64_t seed) : sizes_(kCount) {
  Rng rng(seed);
  for (auto& s : sizes_) s = static_cast<uint32_t>(draw_size(spec, rng));
}

double SizeRing::mean() const {
  return static_cast<double>(std::accumulate(sizes_.begin(), sizes_.end(), uint64_t{0})) /
         static_cast<double>(sizes_.size());
}

}  // namespace host_bench
