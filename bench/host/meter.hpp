// host_bench: every allocator call of a workload goes through a Meter.
//
// The Meter calls the C allocation functions (whatever library LD_PRELOAD put
// in front of glibc), times one call in `sample_period` with the TSC, counts
// calls, tracks requested bytes, and writes every page of each new block so
// that peak RSS reflects the bytes handed out (an untouched block costs no
// RSS, which would flatter an allocator that over-reserves).
#pragma once

#include <malloc.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "latency_histogram.hpp"
#include "live_board.hpp"
#include "tsc_clock.hpp"

namespace host_bench {

[[noreturn]] void die(const char* what);

struct ThreadTally {
  LatencyHistogram alloc_ticks;
  LatencyHistogram free_ticks;
  uint64_t allocs = 0;
  uint64_t frees = 0;
  uint64_t sampled_requested = 0;  // over timed allocations only
  uint64_t sampled_usable = 0;
  uint64_t live_requested = 0;
  uint64_t peak_requested = 0;  // this thread's own high-water mark
};

class Meter {
 public:
  Meter(uint32_t sample_period, LiveBoard& board, unsigned thread)
      : period_(sample_period), alloc_left_(1), free_left_(1), board_(board), thread_(thread) {}

  void* alloc(size_t n) {
    void* p;
    if (--alloc_left_ == 0) {
      alloc_left_ = period_;
      const uint64_t t0 = ticks_begin();
      p = std::malloc(n);
      const uint64_t t1 = ticks_end();
      tally_.alloc_ticks.add(t1 - t0);
      sample_usable(p, n);
    } else {
      p = std::malloc(n);
    }
    return account(p, n);
  }

  void* alloc_aligned(size_t alignment, size_t n) {
    void* p;
    if (--alloc_left_ == 0) {
      alloc_left_ = period_;
      const uint64_t t0 = ticks_begin();
      p = std::aligned_alloc(alignment, n);
      const uint64_t t1 = ticks_end();
      tally_.alloc_ticks.add(t1 - t0);
      sample_usable(p, n);
    } else {
      p = std::aligned_alloc(alignment, n);
    }
    if (reinterpret_cast<uintptr_t>(p) % alignment != 0) die("aligned_alloc returned a misaligned block");
    return account(p, n);
  }

  void release(void* p, size_t n) {
    if (--free_left_ == 0) {
      free_left_ = period_;
      const uint64_t t0 = ticks_begin();
      std::free(p);
      const uint64_t t1 = ticks_end();
      tally_.free_ticks.add(t1 - t0);
    } else {
      std::free(p);
    }
    ++tally_.frees;
    tally_.live_requested -= n;
    board_.publish(thread_, tally_.live_requested);
  }

  const ThreadTally& tally() const { return tally_; }

 private:
  void sample_usable(void* p, size_t n) {
    if (p == nullptr) return;
    tally_.sampled_requested += n;
    tally_.sampled_usable += malloc_usable_size(p);
  }

  void* account(void* p, size_t n) {
    if (p == nullptr) die("allocation failed");
    touch(static_cast<unsigned char*>(p), n);
    ++tally_.allocs;
    tally_.live_requested += n;
    // Signed: a thread that frees what others allocated goes below zero.
    if (static_cast<int64_t>(tally_.live_requested) > static_cast<int64_t>(tally_.peak_requested)) {
      tally_.peak_requested = tally_.live_requested;
    }
    board_.publish(thread_, tally_.live_requested);
    if ((tally_.allocs & 1023) == 0) board_.sample();
    return p;
  }

  // First byte, one byte per 4 KiB page, last byte.
  static void touch(unsigned char* p, size_t n) {
    const auto mark = static_cast<unsigned char>(n);
    for (size_t off = 0; off < n; off += 4096) p[off] = mark;
    if (n > 0) p[n - 1] = mark;
  }

  uint32_t period_;
  uint32_t alloc_left_;
  uint32_t free_left_;
  LiveBoard& board_;
  unsigned thread_;
  ThreadTally tally_;
};

}  // namespace host_bench
