// unipool host: the records of blocks freed with deallocate_after, waiting
// for their fences.
//
// A block freed with free_after() stays out of reuse until its fence
// completes (an async copy may still read it). Nothing is written into the
// block meanwhile: its record lives in this side table, keyed by address.
// Invariants (tally() recounts them for validate()):
//   - a block has at most one record; count() is their number;
//   - a record's source owns its fence until the record is taken out.
// While any record exists the engine's fast free path steps aside, so a
// second free of the block is caught: the engine changes its fast span
// under this type's lock, right after each change of the count (the
// *_locked calls, which need lock() held). The pool's byte gauges and the
// freeing of completed blocks stay the engine's (engine_deferred.cpp).
#pragma once

#include <atomic>
#include <cstdint>

#include "core/thread_safety.hpp"
#include "host/huge_table.hpp"
#include "host/lock.hpp"

namespace unipool::host {

struct DeferredTally {
  uint64_t blocks = 0, bytes = 0;
};

class DeferredFrees {
 public:
  Mutex& lock() const noexcept UNIPOOL_TSA(lock_returned(lock_)) { return lock_; }

  // false: no memory for the table.
  bool add_locked(const DeferredEntry& e) noexcept UNIPOOL_REQUIRES(lock_);
  // Up to `max` records whose fences completed, taken out into out[] (a
  // source that throws on its fence has lost it: done too). Returns how many.
  uint32_t take_completed_locked(DeferredEntry* out, uint32_t max) noexcept UNIPOOL_REQUIRES(lock_);
  bool contains(const void* p) const noexcept;
  uint64_t count() const noexcept { return count_.load(std::memory_order_relaxed); }
  // True every 64th call while records exist: a slow path should collect
  // (the scan is O(records)).
  bool due() noexcept;
  DeferredTally tally() const noexcept;
  // Calls f for every record and forgets them all (pool destruction); f
  // runs without the lock.
  template <class F>
  void drain(F&& f) noexcept;

 private:
  mutable Mutex lock_;
  DeferredTable table_;
  std::atomic<uint64_t> count_{0};
  std::atomic<uint64_t> ticks_{0};
};

template <class F>
void DeferredFrees::drain(F&& f) noexcept {
  DeferredTable taken;
  {
    LockGuard guard(lock_);
    taken = table_;
    table_ = DeferredTable{};
    count_.store(0, std::memory_order_relaxed);
  }
  taken.for_each(f);
  taken.release();
}

}  // namespace unipool::host
