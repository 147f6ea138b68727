// unipool host: a thread's heap, its private pages of one pool.
//
// One heap per (thread, pool). The allocation fast path is
// heap -> hot[class] -> the top of the class's block cache (block_cache.hpp),
// else hot[class].page -> page->free: pop, count, return. Everything here
// is touched by the owning thread only, except remote_mask (set by other
// threads when they free into one of its pages), the counters and the block
// cache's counts, which stats() reads (relaxed atomics, written by plain load
// + store), and what validate() recounts (with the program's threads quiet).
#pragma once

#include <atomic>
#include <cstdint>

#include "host/block_cache.hpp"
#include "host/large_cache.hpp"
#include "host/layout.hpp"
#include "host/size_classes.hpp"

namespace unipool::host {

// Written only by the owning thread; read by stats() on any thread.
inline void bump(std::atomic<uint64_t>& counter, uint64_t by = 1) noexcept {
  counter.store(counter.load(std::memory_order_relaxed) + by, std::memory_order_relaxed);
}

// A signed tally only its owning thread writes; stats() reads it.
inline void shift(std::atomic<int64_t>& counter, int64_t by) noexcept {
  counter.store(counter.load(std::memory_order_relaxed) + by, std::memory_order_relaxed);
}

// Per class, what an allocation or a free of the class reads: one line of
// fields, then the class's block cache (block_cache.hpp) right after it, so
// that a slot's address is the line's plus an offset, not a load away.
struct alignas(64) HeapClassHot {
  Page* page;                    // current page, never null (the empty page)
  // allocs - frees - cached: the blocks of this class this thread holds
  // live (live()). A pop from the block cache or a push onto it moves the
  // cached count alone, so the fast paths write no counter of their own.
  std::atomic<uint64_t> allocs;        // blocks this thread handed out, but from its block cache
  std::atomic<uint64_t> frees;         // blocks it freed (any page), but onto its cache; and blocks its cache gave back
  std::atomic<uint64_t> flushed_live;  // live() last folded into the pool's gauges
  std::atomic<uint32_t> cached_count;  // blocks in the class's block cache; owner writes, stats() reads
  uint32_t cache_limit;                // at most this many (0: no cache)
  uint32_t block_size;                 // the class's (usable_size() of an owned block)
  alignas(64) Block* slots[kCacheSlots];  // the block cache: [0, cached_count) hold blocks

  uint32_t cached() const noexcept { return cached_count.load(std::memory_order_relaxed); }
  void set_cached(uint32_t n) noexcept { cached_count.store(n, std::memory_order_relaxed); }
  // b onto the cache, which holds n (= cached()) blocks, fewer than its
  // limit. The block's live bit is the caller's to clear.
  void put(Block* b, uint32_t n) noexcept {
    slots[n] = b;
    set_cached(n + 1);
  }
  uint64_t live() const noexcept {
    return allocs.load(std::memory_order_relaxed) - frees.load(std::memory_order_relaxed) - cached();
  }
};
static_assert(sizeof(HeapClassHot) == 64 + kCacheSlots * sizeof(Block*));

// A thread's changes to the pool's live large blocks not yet folded into
// its gauges. Each gauge update is a locked read-modify-write on a line all
// threads write; folding once the bytes moved by kLargeFoldBytes, or when an
// allocation could raise a peak, keeps most large allocations and frees of a
// steady workload to one lock (their arena's). stats() adds the unfolded
// part, so current figures stay exact; a peak can miss only what other
// threads had not folded at that moment (less than kLargeFoldBytes each).
struct LargeTally {
  std::atomic<int64_t> blocks{0}, requested{0}, extent{0};
};
inline constexpr int64_t kLargeFoldBytes = int64_t{4} << 20;

struct HeapClassLists {
  PageList avail;  // pages with free or never-used blocks (the current one too)
  PageList full;   // pages with neither; a local free moves one back
  std::atomic<uint64_t> refills{0};
};

struct Heap {
  HeapClassHot hot[kNumClasses];
  HeapClassLists lists[kNumClasses];
  uint32_t drain_seen = 0;  // the engine's drain epoch when this heap last looked
  // Bit c: some page of class c got a remote free since the owner last looked.
  alignas(64) std::atomic<uint64_t> remote_mask{0};
  static_assert(kNumClasses <= 64, "a bit of remote_mask per class");
  alignas(64) Engine* engine = nullptr;
  ThreadState* thread = nullptr;
  PageList empty[kSegmentKinds];  // empty pages kept for reuse, by kind
  uint64_t empty_bytes = 0;
  LargeTally large;         // owner writes (relaxed load + store), stats() reads
  LargeCache large_cache;   // large_cache.hpp
  uint32_t large_arena = 0;  // 1 + the arena of this thread's large blocks; 0: not chosen yet
  Heap* next = nullptr;     // the engine's list of heaps
  Heap* prev = nullptr;

  Heap() noexcept { reset(); }
  Heap(const Heap&) = delete;
  Heap& operator=(const Heap&) = delete;
  void reset() noexcept;
};

// The page every heap class starts on: no blocks, so the first allocation
// of a class takes the slow path, which installs a real page.
extern Page g_empty_page;

// Back to a fresh heap's state without constructing over the object: other
// threads may still touch remote_mask of a heap that is being recycled.
inline void Heap::reset() noexcept {
  for (uint32_t c = 0; c < kNumClasses; ++c) {
    HeapClassHot& h = hot[c];
    h.block_size = kClassSize[c];
    h.page = &g_empty_page;
    h.allocs.store(0, std::memory_order_relaxed);
    h.frees.store(0, std::memory_order_relaxed);
    h.flushed_live.store(0, std::memory_order_relaxed);
    h.set_cached(0);
    h.cache_limit = 0;
  }
  for (HeapClassLists& l : lists) {
    l.avail = PageList{};
    l.full = PageList{};
    l.refills.store(0, std::memory_order_relaxed);
  }
  drain_seen = 0;
  remote_mask.store(0, std::memory_order_relaxed);
  engine = nullptr;
  thread = nullptr;
  for (PageList& e : empty) e = PageList{};
  empty_bytes = 0;
  large.blocks.store(0, std::memory_order_relaxed);
  large.requested.store(0, std::memory_order_relaxed);
  large.extent.store(0, std::memory_order_relaxed);
  large_cache.reset();
  large_arena = 0;
  next = nullptr;
  prev = nullptr;
}

}  // namespace unipool::host
