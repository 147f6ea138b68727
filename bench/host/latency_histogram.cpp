#include "latency_histogram.hpp"

namespace host_bench {

double LatencyHistogram::bucket_low(size_t i) {
  if (i < kSub) return static_cast<double>(i);
  const size_t shift = i / kSub - 1;
  return static_cast<double>((i % kSub + kSub) << shift);
}

double LatencyHistogram::bucket_width(size_t i) {
  if (i < kSub) return 1.0;
  return static_cast<double>(uint64_t{1} << (i / kSub - 1));
}

double LatencyHistogram::quantile_ticks(double q) const {
  if (total_ == 0) return 0.0;
  // The rank of the quantile sample, 1-based, as in the nearest-rank method.
  auto rank = static_cast<uint64_t>(q * static_cast<double>(total_));
  if (rank < 1) rank = 1;
  uint64_t seen = 0;
  for (size_t i = 0; i < counts_.size(); ++i) {
    seen += counts_[i];
    if (seen >= rank) return bucket_low(i) + (bucket_width(i) - 1.0) / 2.0;
  }
  return bucket_low(counts_.size() - 1);
}

}  // namespace host_bench
