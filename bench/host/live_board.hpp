// host_bench: the peak of live requested bytes over all threads at once.
//
// Summing each thread's own peak overstates the process's peak when threads
// peak at different times. Instead each thread publishes its live bytes in a
// cache line of its own (a plain store, no contention), and every 1024 calls
// adds up all the lines and raises the shared maximum: the peak of the
// concurrent total, sampled finely enough (< 1% of the live set in every
// workload here).
#pragma once

#include <atomic>
#include <cstdint>
#include <vector>

namespace host_bench {

class LiveBoard {
 public:
  explicit LiveBoard(unsigned threads) : slots_(threads) {}

  void publish(unsigned thread, uint64_t live) { slots_[thread].live.store(live, std::memory_order_relaxed); }

  void sample() {
    // A thread's own count goes negative when it frees what another
    // allocated; their sum does not, but read line by line it can for an
    // instant: such a reading is skipped.
    uint64_t total = 0;
    for (const auto& s : slots_) total += s.live.load(std::memory_order_relaxed);
    if (static_cast<int64_t>(total) < 0) return;
    uint64_t peak = peak_.load(std::memory_order_relaxed);
    while (total > peak && !peak_.compare_exchange_weak(peak, total, std::memory_order_relaxed)) {
    }
  }

  uint64_t peak() const { return peak_.load(std::memory_order_relaxed); }

 private:
  struct alignas(64) Slot {
    std::atomic<uint64_t> live{0};
  };
  std::vector<Slot> slots_;
  std::atomic<uint64_t> peak_{0};
};

}  // namespace host_bench
