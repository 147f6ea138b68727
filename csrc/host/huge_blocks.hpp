// unipool host: the books of huge blocks, each its own mapping, and the
// cache of mappings freed recently, under one lock.
//
// Invariants (tally() recounts them for validate()):
//   - every live huge block has exactly one entry, keyed by its address;
//     count() is their number;
//   - the cache holds at most the configured number of mappings and bytes,
//     oldest first, and cached_bytes() is their sum;
//   - a mapping is in the book or in the cache, never in both.
// Mapping, pinning and unmapping, and the pool's byte gauges, stay the
// engine's (engine_huge.cpp): this type only keeps the books. Its lock is
// the last the engine takes (engine.hpp), held for table and cache updates,
// and across the mremap of a resize (update()); nothing is unmapped or
// unpinned under it.
#pragma once

#include <atomic>
#include <cstdint>

#include "core/assert.hpp"
#include "host/huge_table.hpp"
#include "host/lock.hpp"

namespace unipool::host {

inline constexpr uint32_t kMaxHugeCache = 64;

// A mapping that is not a live block: cached, or on its way out.
struct HugeMapping {
  char* base;
  uint64_t bytes;
  bool pinned;
  bool pin_failed;
};

struct HugeTally {
  uint64_t blocks = 0, block_bytes = 0;  // live, from the table
  uint64_t cached_bytes = 0;             // from the cache's slots
};

class HugeBlocks {
 public:
  void set_cache_limits(uint32_t max_mappings, uint64_t max_bytes) noexcept;

  // ---- the book ----
  bool insert(const HugeEntry& e) noexcept;  // false: no memory for the table
  // A copy of p's entry; false when p is not a live huge block.
  bool find(const void* p, HugeEntry* out) const noexcept;
  // Takes p's entry out of the book; false when p is not a live huge block.
  bool remove(const void* p, HugeEntry* out) noexcept;
  // Runs change(HugeEntry&) on a copy of p's entry under the lock; when it
  // returns true the copy replaces the entry (re-keyed if its address
  // moved), which cannot fail. False when p is not live or change refused.
  template <class Change>
  bool update(const void* p, Change&& change) noexcept;
  // Calls f for every live entry and forgets them all (pool destruction).
  template <class F>
  void drain(F&& f) noexcept;

  // ---- the cache ----
  // The smallest cached mapping of at least `bytes`, aligned to `align`,
  // that wastes at most a quarter of itself, taken out into *e.
  bool take_cached(uint64_t bytes, uint64_t align, HugeEntry* e) noexcept;
  // Caches a freed mapping, pushing out the oldest until both limits hold.
  // What must be unmapped (the pushed out, or `m` itself when it is too big
  // to cache) goes to out[]; returns how many.
  uint32_t cache(const HugeMapping& m, HugeMapping out[kMaxHugeCache]) noexcept;
  // Empties the cache into out[]; returns how many.
  uint32_t drop_cache(HugeMapping out[kMaxHugeCache]) noexcept;
  void note_miss() noexcept { misses_.fetch_add(1, std::memory_order_relaxed); }

  // ---- figures ----
  uint64_t count() const noexcept { return count_.load(std::memory_order_relaxed); }
  uint64_t cached_bytes() const noexcept;
  uint64_t hits() const noexcept { return hits_.load(std::memory_order_relaxed); }
  uint64_t misses() const noexcept { return misses_.load(std::memory_order_relaxed); }
  HugeTally tally() const noexcept;
  Mutex& lock() const noexcept { return lock_; }  // fork

 private:
  void pop_oldest(HugeMapping* out) noexcept;  // lock held, cache not empty

  mutable Mutex lock_;
  HugeTable table_;
  HugeMapping cache_[kMaxHugeCache] = {};
  uint32_t cache_count_ = 0;
  uint64_t cache_bytes_ = 0;
  uint32_t max_mappings_ = 0;
  uint64_t max_bytes_ = 0;
  std::atomic<uint64_t> count_{0}, hits_{0}, misses_{0};
};

template <class Change>
bool HugeBlocks::update(const void* p, Change&& change) noexcept {
  LockGuard guard(lock_);
  if (!table_.reserve_one()) return false;
  HugeEntry* e = table_.find(reinterpret_cast<uintptr_t>(p));
  if (e == nullptr) return false;
  HugeEntry copy = *e;
  if (!change(copy)) return false;
  if (copy.ptr == e->ptr) {
    *e = copy;
    return true;
  }
  table_.erase(e);
  const bool inserted = table_.insert(copy);
  UNIPOOL_ASSERT(inserted, "reserve_one() made room for the re-keyed entry");
  return inserted;
}

template <class F>
void HugeBlocks::drain(F&& f) noexcept {
  HugeTable taken;
  {
    LockGuard guard(lock_);
    taken = table_;  // the slots move over; f runs without the lock
    table_ = HugeTable{};
    count_.store(0, std::memory_order_relaxed);
  }
  taken.for_each(f);
  taken.release();
}

}  // namespace unipool::host
