// offset_util: the driver loop of Mooncake allocator_bench's helper,
// templated over the policy so every policy runs the identical, inlined loop.
//
// allocate(size): try to allocate; on success record (handle, requested
// size); on failure give up if nothing is live, else evict live objects
// chosen uniformly at random (swap with the last, pop) and retry. By default
// one object per failure; the paired workload evicts a fraction (>= 1).
// Utilization = requested bytes of live objects / pool size.
#pragma once

#include <algorithm>
#include <cstdint>
#include <random>
#include <vector>

namespace offset_util {

template <class Policy>
class Driver {
 public:
  using Handle = typename Policy::Handle;

  Driver(Policy& policy, uint64_t pool_bytes, uint64_t evict_seed, size_t expected_live)
      : policy_(policy), pool_bytes_(static_cast<double>(pool_bytes)), evict_rng_(evict_seed) {
    live_.reserve(expected_live);
  }

  // Returns false only when the request fails with nothing live.
  // pre_evict, when given, receives ratio() just before each eviction.
  bool allocate(uint64_t size, double evict_fraction = 0.0,
                std::vector<double>* pre_evict = nullptr) {
    for (;;) {
      Handle h;
      if (policy_.allocate(size, h)) {
        live_.push_back(Live{h, size});
        requested_ += size;
        return true;
      }
      if (live_.empty()) return false;
      if (pre_evict != nullptr) pre_evict->push_back(ratio());
      size_t count = 1;
      if (evict_fraction > 0.0) {
        count = std::max<size_t>(1, static_cast<size_t>(static_cast<double>(live_.size()) *
                                                        evict_fraction));
        count = std::min(count, live_.size());
      }
      for (size_t i = 0; i < count; ++i) evict_random();
    }
  }

  double ratio() const noexcept { return static_cast<double>(requested_) / pool_bytes_; }
  uint64_t requested() const noexcept { return requested_; }
  size_t live() const noexcept { return live_.size(); }
  uint64_t evictions() const noexcept { return evictions_; }

 private:
  struct Live {
    Handle handle;
    uint64_t size;
  };

  void evict_random() {
    std::uniform_int_distribution<size_t> pick(0, live_.size() - 1);
    const size_t index = pick(evict_rng_);
    std::swap(live_[index], live_.back());
    policy_.free(live_.back().handle);
    requested_ -= live_.back().size;
    live_.pop_back();
    ++evictions_;
  }

  Policy& policy_;
  double pool_bytes_;
  std::mt19937_64 evict_rng_;
  std::vector<Live> live_;
  uint64_t requested_ = 0;
  uint64_t evictions_ = 0;
};

}  // namespace offset_util
