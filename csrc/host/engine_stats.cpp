// unipool host: statistics.
#include "host/engine.hpp"

namespace unipool::host {

static_assert(kNumClasses <= kHostMaxClasses, "HostPoolStats has room for every class");

void Engine::count_small(int64_t live[kNumClasses], uint64_t refills[kNumClasses], int64_t* unflushed,
                         uint64_t* cached) const noexcept {
  *unflushed = 0;
  for (uint32_t c = 0; c < kNumClasses; ++c) {
    const SharedClass& sc = shared_[c];
    live[c] = static_cast<int64_t>(sc.allocs.load(std::memory_order_relaxed) +
                                   sc.retired_allocs.load(std::memory_order_relaxed) -
                                   sc.frees.load(std::memory_order_relaxed) -
                                   sc.retired_frees.load(std::memory_order_relaxed));
    refills[c] = sc.refills.load(std::memory_order_relaxed) + refills_retired_[c].load(std::memory_order_relaxed);
  }
  for (const Heap* h = heaps_; h != nullptr; h = h->next) {
    for (uint32_t c = 0; c < kNumClasses; ++c) {
      const HeapClassHot& hot = h->hot[c];
      const uint64_t l = hot.live();
      live[c] += static_cast<int64_t>(l);
      *unflushed += static_cast<int64_t>(l - hot.flushed_live.load(std::memory_order_relaxed)) * static_cast<int64_t>(kClassSize[c]);
      refills[c] += h->lists[c].refills.load(std::memory_order_relaxed);
      if (cached != nullptr) cached[c] += hot.cached();
    }
  }
}

// Live small and middle blocks per class, and the large tallies threads
// have not folded into the gauges yet.
Engine::LiveSums Engine::count_live(HostPoolStats& st) const noexcept {
  int64_t live[kNumClasses];
  uint64_t refills[kNumClasses];
  int64_t unflushed = 0;  // validate() checks it; the figures below do not need it
  uint64_t cached[kNumClasses] = {};
  LiveSums sums;
  {
    LockGuard lock(heaps_lock_);
    count_small(live, refills, &unflushed, cached);
    sums.large = count_large_tallies();
  }
  for (uint32_t c = 0; c < kNumClasses; ++c) {
    HostClassStats& cs = st.classes[c];
    cs.block_size = kClassSize[c];
    cs.live_blocks = live[c] > 0 ? static_cast<uint64_t>(live[c]) : 0;
    cs.refills = refills[c];
    cs.cached_blocks = cached[c];
    sums.small_bytes += live[c] * static_cast<int64_t>(kClassSize[c]);
    if (c < kNumSmallClasses) st.small_blocks += cs.live_blocks;
    else st.middle_blocks += cs.live_blocks;
  }
  st.num_classes = kNumClasses;
  return sums;
}

// Pages formatted per class and the free blocks in them; segment bytes and
// what of them holds no block (headers, page tails).
Engine::SegmentSums Engine::count_segments(HostPoolStats& st) const noexcept {
  SegmentSums sums;
  {
    LockGuard lock(segments_.lock());
    for (const Segment* seg = segments_.first_locked(); seg != nullptr; seg = seg->all_next) {
      sums.bytes += kSegmentSize;
      sums.overhead += kSegmentHeaderBytes;
      for (uint32_t i = 0; i < seg->page_count; ++i) {
        const Page& page = seg->pages[i];
        if (page.owner.load(std::memory_order_relaxed) == kOwnerNone || page.cls == kNoClass) continue;
        HostClassStats& cs = st.classes[page.cls];
        ++cs.pages;
        cs.free_blocks += page.capacity;
        sums.overhead += const_cast<Segment*>(seg)->page_bytes(i) - uint64_t{page.capacity} * page.block_size;
      }
    }
  }
  for (uint32_t c = 0; c < kNumClasses; ++c) {
    HostClassStats& cs = st.classes[c];
    cs.free_blocks = cs.free_blocks > cs.live_blocks ? cs.free_blocks - cs.live_blocks : 0;
  }
  return sums;
}

void Engine::count_arenas(HostPoolStats& st) const noexcept {
  for (uint32_t i = 0; i < arena_count_.load(std::memory_order_acquire); ++i) {
    FutexGuard lock(arenas_[i].mutex());
    st.arena_free_bytes += arenas_[i].free_committed_bytes();
    st.reserved_bytes += arenas_[i].reserved();
  }
}

// The byte figures and their peaks. Small and middle blocks count from the
// classes' live counts; the gauges hold the rest (minus what was folded).
void Engine::fill_bytes(HostPoolStats& st, const LiveSums& live, const SegmentSums& segments) const noexcept {
  const uint64_t huge_cache_bytes = huge_.cached_bytes();
  const int64_t flushed = counters_.small_flushed.load(std::memory_order_relaxed);
  const int64_t other_allocated = counters_.allocated.now.load(std::memory_order_relaxed) - flushed + live.large.extent;
  const int64_t other_requested =
      counters_.requested.now.load(std::memory_order_relaxed) - flushed + live.large.requested;
  const uint64_t deferred = counters_.deferred_bytes.get();
  const auto allocated_total = static_cast<uint64_t>(live.small_bytes + other_allocated);
  const auto requested_total = static_cast<uint64_t>(live.small_bytes + other_requested);
  const uint64_t small_cached = segments.bytes - segments.overhead - static_cast<uint64_t>(live.small_bytes);

  st.allocated_bytes = allocated_total - deferred;
  // A block freed with free_after is freed for its user: neither allocated
  // nor requested, only deferred, until its fence completes.
  st.requested_bytes = requested_total - counters_.deferred_requested.get();
  st.deferred_bytes = deferred;
  st.committed_bytes = counters_.committed.get();
  st.pinned_bytes = counters_.pinned.get();
  st.cached_bytes = small_cached + huge_cache_bytes + static_cast<uint64_t>(live.large.cached_extent);
  st.overhead_bytes = segments.overhead;
  counters_.cached.now.store(static_cast<int64_t>(st.cached_bytes), std::memory_order_relaxed);
  counters_.cached.observe(static_cast<int64_t>(st.cached_bytes));

  auto peak = [](const Gauge& g, uint64_t now) {
    const auto p = static_cast<uint64_t>(g.peak.load(std::memory_order_relaxed));
    return p > now ? p : now;
  };
  st.peak_allocated_bytes = peak(counters_.allocated, allocated_total);
  st.peak_requested_bytes = peak(counters_.requested, requested_total);
  st.peak_committed_bytes = peak(counters_.committed, st.committed_bytes);
  st.peak_pinned_bytes = peak(counters_.pinned, st.pinned_bytes);
  st.peak_cached_bytes = peak(counters_.cached, st.cached_bytes);
  st.peak_deferred_bytes = peak(counters_.deferred_bytes, deferred);
}

void Engine::fill_counters(HostPoolStats& st, const LiveSums& live) const noexcept {
  constexpr auto relaxed = std::memory_order_relaxed;
  st.deferred_blocks = deferred_.count();
  st.large_blocks = counters_.large_blocks.load(relaxed) + static_cast<uint64_t>(live.large.blocks);
  st.huge_blocks = huge_.count();
  st.huge_cache_hits = huge_.hits();
  st.huge_cache_misses = huge_.misses();
  st.pin_registrations = counters_.registrations.load(relaxed);
  st.pin_failures = counters_.pin_failures.load(relaxed);
  st.pageable_bytes = counters_.pageable_bytes.load(relaxed);
  st.hugetlb_fallbacks = counters_.hugetlb_fallbacks.load(relaxed);
  st.pin_thread_registrations = pin_.registrations();
  st.pin_thread_waits = pin_.waits();
  st.misuse_errors = counters_.misuse.load(relaxed);
}

HostPoolStats Engine::stats() const noexcept {
  HostPoolStats st;
  const LiveSums live = count_live(st);
  const SegmentSums segments = count_segments(st);
  count_arenas(st);
  fill_bytes(st, live, segments);
  fill_counters(st, live);
  return st;
}

void Engine::reset_peak_stats() noexcept {
  const HostPoolStats now = stats();
  auto reset = [](Gauge& g, uint64_t v) { g.peak.store(static_cast<int64_t>(v), std::memory_order_relaxed); };
  reset(counters_.requested, now.requested_bytes + counters_.deferred_requested.get());
  reset(counters_.allocated, now.allocated_bytes + now.deferred_bytes);
  reset(counters_.committed, now.committed_bytes);
  reset(counters_.pinned, now.pinned_bytes);
  reset(counters_.cached, now.cached_bytes);
  reset(counters_.deferred_bytes, now.deferred_bytes);
}

}  // namespace unipool::host
