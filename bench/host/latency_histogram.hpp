// host_bench: a log-linear histogram of sampled call latencies, in ticks.
//
// 32 linear sub-buckets per power of two (~3% resolution) cover 1 tick to
// 2^63 ticks in 2 K counters, so a thread records a sample with two shifts and
// an increment and histograms of threads merge by addition.
#pragma once

#include <array>
#include <bit>
#include <cstddef>
#include <cstdint>

namespace host_bench {

class LatencyHistogram {
 public:
  void add(uint64_t ticks) {
    ++counts_[index_of(ticks)];
    ++total_;
  }
  void merge(const LatencyHistogram& other) {
    for (size_t i = 0; i < counts_.size(); ++i) counts_[i] += other.counts_[i];
    total_ += other.total_;
  }
  uint64_t samples() const { return total_; }

  // The q-quantile (0 < q < 1) in ticks: the middle of the bucket holding it.
  double quantile_ticks(double q) const;

 private:
  static constexpr int kSubBits = 5;
  static constexpr uint64_t kSub = uint64_t{1} << kSubBits;

  static size_t index_of(uint64_t v) {
    if (v < kSub) return static_cast<size_t>(v);
    const int shift = std::bit_width(v) - 1 - kSubBits;
    return static_cast<size_t>((shift + 1) * kSub + ((v >> shift) - kSub));
  }
  static double bucket_low(size_t i);
  static double bucket_width(size_t i);

  std::array<uint64_t, (64 - kSubBits + 1) * kSub> counts_{};
  uint64_t total_ = 0;
};

}  // namespace host_bench
