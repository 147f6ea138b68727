// unipool host: the pool's running figures, from which stats() builds
// HostPoolStats.
//
// Each figure is one atomic, changed by a relaxed read-modify-write where
// the event happens, with no lock: a reader sees each figure as it was at
// some moment, not all of them at one moment (validate() compares them with
// a recount while the pool is quiescent). A Gauge keeps its peak too.
#pragma once

#include <atomic>
#include <cstdint>

#include "host/arena.hpp"

namespace unipool::host {

struct Gauge {
  std::atomic<int64_t> now{0};
  std::atomic<int64_t> peak{0};
  void add(int64_t delta) noexcept {
    const int64_t v = now.fetch_add(delta, std::memory_order_relaxed) + delta;
    observe(v);
  }
  void observe(int64_t v) noexcept {
    int64_t p = peak.load(std::memory_order_relaxed);
    while (v > p && !peak.compare_exchange_weak(p, v, std::memory_order_relaxed)) {
    }
  }
  uint64_t get() const noexcept { return static_cast<uint64_t>(now.load(std::memory_order_relaxed)); }
  void reset_peak() noexcept { peak.store(now.load(std::memory_order_relaxed), std::memory_order_relaxed); }
};

struct HostCounters {
  Gauge requested, allocated, committed, pinned;
  Gauge deferred_bytes;
  Gauge deferred_requested;               // the requested sizes behind deferred_bytes
  Gauge cached;                           // refreshed by each stats() call
  std::atomic<int64_t> small_flushed{0};  // small/middle bytes folded into requested/allocated
  std::atomic<uint64_t> large_blocks{0};
  std::atomic<uint64_t> registrations{0}, pin_failures{0}, pageable_bytes{0}, hugetlb_fallbacks{0};
  std::atomic<uint64_t> misuse{0}, corruption{0};

  // What an arena's growth, trim or pinning changed.
  void apply(const ArenaDelta& d) noexcept {
    if (d.committed != 0) committed.add(d.committed);
    if (d.pinned != 0) pinned.add(d.pinned);
    if (d.registrations) registrations.fetch_add(d.registrations, std::memory_order_relaxed);
    if (d.pin_failures) pin_failures.fetch_add(d.pin_failures, std::memory_order_relaxed);
    if (d.pageable_fallback) pageable_bytes.fetch_add(d.pageable_fallback, std::memory_order_relaxed);
    if (d.hugetlb_fallbacks) hugetlb_fallbacks.fetch_add(d.hugetlb_fallbacks, std::memory_order_relaxed);
  }
};

}  // namespace unipool::host
