// unipool: what a host pool reports about its memory.
//
// Every committed byte is in exactly one of: allocated (live blocks), deferred
// (freed with free_after, fence pending), cached (free but held for reuse:
// free blocks in pages, empty pages, free segments, the threads' large
// caches, the huge cache), arena free (committed, free in an arena's range
// allocator) or overhead (segment headers, page tails). validate() checks that the five add up to committed.
//
// Figures are exact when no thread is allocating; while threads run, each
// thread's small and middle counts are folded in as stats() reads them.
#pragma once

#include <cstdint>

namespace unipool {

inline constexpr uint32_t kHostMaxClasses = 64;

struct HostClassStats {
  uint64_t block_size = 0;
  uint64_t live_blocks = 0;    // handed out (deferred ones included)
  uint64_t free_blocks = 0;    // free in pages of this class (any owner), cached ones included
  uint64_t cached_blocks = 0;  // of those, in the threads' block caches (kept for their reuse)
  uint64_t pages = 0;          // pages currently formatted for this class
  uint64_t refills = 0;        // times a thread or the shared list got a page
};

struct HostPoolStats {
  // Sums of what callers asked for, and of the blocks' footprints. For small
  // and middle sizes the request is counted as its class size.
  uint64_t requested_bytes = 0, peak_requested_bytes = 0;
  uint64_t allocated_bytes = 0, peak_allocated_bytes = 0;
  uint64_t committed_bytes = 0, peak_committed_bytes = 0;
  uint64_t pinned_bytes = 0, peak_pinned_bytes = 0;
  uint64_t cached_bytes = 0, peak_cached_bytes = 0;
  uint64_t deferred_bytes = 0, peak_deferred_bytes = 0;
  uint64_t deferred_blocks = 0;
  uint64_t arena_free_bytes = 0;
  uint64_t overhead_bytes = 0;
  uint64_t reserved_bytes = 0;   // virtual address space of the arenas

  // Live blocks per size path.
  uint64_t small_blocks = 0, middle_blocks = 0, large_blocks = 0, huge_blocks = 0;
  uint64_t huge_cache_hits = 0, huge_cache_misses = 0;

  // Pinning (pinned=on / best_effort).
  uint64_t pin_registrations = 0;  // successful registrations
  uint64_t pin_failures = 0;       // failed registrations
  uint64_t pageable_bytes = 0;     // committed bytes served pageable because pinning failed
  uint64_t hugetlb_fallbacks = 0;  // hugetlb commits that fell back to normal pages
  // The pinning thread (pin_thread=on): of pin_registrations, those it made
  // ahead of demand; allocations that waited for its registration in flight.
  uint64_t pin_thread_registrations = 0;
  uint64_t pin_thread_waits = 0;

  // Misuse the pool refused (double, foreign or interior frees).
  uint64_t misuse_errors = 0;

  uint32_t num_classes = 0;
  HostClassStats classes[kHostMaxClasses];
};

}  // namespace unipool
