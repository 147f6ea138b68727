// unipool host: validate(), every invariant of the pool, recounted.
#include <bit>

#include "host/engine.hpp"
#include "host/free_link.hpp"

namespace unipool::host {
namespace {

bool bad(Message* why, const char* what) {
  why->add(what);
  return false;
}

// Bits set in page i's live bitmap, each of which must be the first granule
// of a carved block (none at all on an unformatted page): the live blocks,
// those pending on the remote list too, but not the cached ones. -1, with
// the reason, for a bit anywhere else.
int64_t live_bit_count(Segment& seg, uint32_t i, Message* why) {
  const Page& page = seg.pages[i];
  const uint64_t* words = seg.page_bits(i);
  int64_t set = 0;
  for (uint32_t w = 0; w < seg.page_bit_words(i); ++w) {
    for (uint64_t bits = __atomic_load_n(&words[w], __ATOMIC_RELAXED); bits != 0; bits &= bits - 1) {
      const char* at =
          seg.page_start(i) + ((uint64_t{w} * 64 + static_cast<uint64_t>(std::countr_zero(bits))) << kGranuleShift);
      if (page.cls == kNoClass || !is_carved_block(&page, at)) {
        bad(why, "page: a live bit that is not the start of a carved block");
        return -1;
      }
      ++set;
    }
  }
  return set;
}

// The fast free path's view of the page (each of its tags) agrees with the page.
bool tag_matches(const Segment& seg, uint32_t i) {
  const Page& page = seg.pages[i];
  const Heap* heap = page.heap.load(std::memory_order_relaxed);
  const PageTag* tags = seg.first_tag(&page);
  for (uint32_t t = 0; t < seg.tags_per_page(); ++t) {
    if (tags[t].owner_without_flag() != page.owner.load(std::memory_order_relaxed)) return false;
    if (page.cls == kNoClass) continue;  // a heap's empty page: no live bit, the tag's line unread
    if (tags[t].hot != (heap != nullptr ? &heap->hot[page.cls] : nullptr)) return false;
  }
  return true;
}

}  // namespace

// Walks a free list of a page with every check of free_link.hpp: each block
// a carved block start with its cookie, its live bit clear on the local list
// and set on the remote one, no cycle. Returns the count, or -1 with the reason.
int64_t Engine::free_list_length(const Page& page, const Block* head, bool local, Message* why) const {
  int64_t n = 0;
  for (const Block* b = head; b != nullptr;) {
    Block* next = nullptr;
    if (!next_checked(&page, b, &next)) {
      why->add("heap corruption: the free block at ")
          .add_ptr(b)
          .add(" was written after it was freed (a ")
          .add_dec(page.block_size)
          .add("-byte block)");
      return -1;
    }
    if (block_is_live(b) == local) {
      bad(why, local ? "page: a block on the local free list has its live bit set"
                     : "page: a block on the remote free list has its live bit clear");
      return -1;
    }
    if (++n > page.capacity) {
      bad(why, "page: a cycle in a free list");
      return -1;
    }
    b = next;
  }
  return n;
}

// Every used range of the arenas that is not a segment: a large block with
// a valid header, live or cached, counted into *out. The caller holds every
// arena's lock (taken by index, not analysed).
UNIPOOL_NO_THREAD_SAFETY_ANALYSIS bool Engine::recount_large(LargeRecount* out, Message* why) const {
  for (uint32_t i = 0; i < arena_count_.load(std::memory_order_relaxed); ++i) {
    Arena& a = const_cast<Arena&>(arenas_[i]);
    bool headers_ok = true;
    a.ranges().for_each_range([&](const RangeInfo& r) UNIPOOL_NO_THREAD_SAFETY_ANALYSIS {
      if (!r.used) return;
      char* start = a.base() + r.offset;
      if (a.slot_kind(reinterpret_cast<uintptr_t>(start)) == kSlotSegment && r.size == kSegmentSize) return;
      // The header sits pad - 64 bytes into the range; pad is a power of two >= 64.
      for (uint64_t pad = kLargeHeader; pad <= r.size; pad *= 2) {
        const auto* hdr = reinterpret_cast<const LargeHeader*>(start + pad - kLargeHeader);
        if (large_header(&a, start + pad) == hdr && hdr->pad == pad) {
          ++out->blocks;
          out->extent += r.size;
          return;
        }
      }
      if (large_header_as(&a, start + kLargeHeader, kLargeCached) == reinterpret_cast<const LargeHeader*>(start)) {
        ++out->cached_blocks;
        out->cached_extent += r.size;
        return;
      }
      headers_ok = false;
    });
    if (!headers_ok) return bad(why, "large: a used range is neither a segment nor a block with a valid header");
  }
  return true;
}

// Every heap's large cache: within its limits, each block of its class
// with a cached header, listed once (each header is marked while the lists
// are walked, then restored), the heap's tallies their sums. The caller
// holds every lock, with the program's threads quiet.
bool Engine::validate_large_caches(Message* why) const {
  constexpr uintptr_t kSeen = kLargeCached ^ 1;
  bool ok = true;
  for (int pass = 0; pass < 2; ++pass) {
    for (const Heap* heap = heaps_; heap != nullptr; heap = heap->next) {
      const LargeCache& cache = heap->large_cache;
      int64_t blocks = 0, extent = 0;
      for (uint32_t cls = 0; cls < kLargeCacheClasses; ++cls) {
        if (cache.cached(cls) > cache.limit[cls] || cache.limit[cls] > kLargeCacheSlots) {
          ok = bad(why, "large cache: a class holds more than its limit");
        }
        for (uint32_t i = 0; i < cache.cached(cls) && i < kLargeCacheSlots; ++i) {
          const auto a = reinterpret_cast<uintptr_t>(cache.slots[cls][i]);
          auto* h = reinterpret_cast<LargeHeader*>(a - kLargeHeader);
          const uintptr_t magic = h->magic ^ a ^ secret_;
          if (pass == 1) {
            if (magic == kSeen) h->magic = kLargeCached ^ a ^ secret_;
            continue;
          }
          if (magic != kLargeCached) {
            ok = bad(why, magic == kSeen ? "large cache: a block is cached twice"
                                         : "large cache: a cached block's header is not a cached one");
            continue;
          }
          h->magic = kSeen ^ a ^ secret_;
          if (h->pad != kLargeHeader || h->extent != large_cache_size(cls) + kLargeHeader) {
            ok = bad(why, "large cache: a block is in the wrong class");
          }
          ++blocks;
          extent += static_cast<int64_t>(h->extent);
        }
      }
      if (pass == 0 && (blocks != cache.blocks.load(std::memory_order_relaxed) ||
                        extent != cache.extent.load(std::memory_order_relaxed))) {
        ok = bad(why, "large cache: the heap's tally differs from its blocks");
      }
    }
  }
  return ok;
}

// Every cached block: a carved block of a page of its class that its heap
// owns, its live bit clear. Counts them per class; validate_pages() checks the
// count against the bits, which a block cached twice or a stray bit breaks.
bool Engine::validate_caches(int64_t cached[kNumClasses], Message* why) const {
  for (uint32_t c = 0; c < kNumClasses; ++c) {
    cached[c] = 0;
    for (const Heap* h = heaps_; h != nullptr; h = h->next) {
      const HeapClassHot& hot = h->hot[c];
      if (hot.cached() > hot.cache_limit || hot.cache_limit > kCacheSlots) {
        return bad(why, "block cache: more blocks than its limit");
      }
      for (uint32_t i = 0; i < hot.cached(); ++i) {
        const Block* b = hot.slots[i];
        const Located loc = locate(b);
        if (loc.kind != Kind::small || loc.page->cls != c || !is_carved_block(loc.page, b)) {
          return bad(why, "block cache: a block that is not a carved block of its class");
        }
        if (loc.page->owner.load(std::memory_order_relaxed) != reinterpret_cast<uintptr_t>(h->thread) ||
            loc.page->heap.load(std::memory_order_relaxed) != h) {
          return bad(why, "block cache: a block of a page its heap does not own");
        }
        if (block_is_live(b)) return bad(why, "block cache: a block with its live bit set");
        ++cached[c];
      }
    }
  }
  return true;
}

bool Engine::validate_pages(const int64_t live[kNumClasses], Message* why) const {
  if (const uint64_t n = counters_.corruption.load(std::memory_order_relaxed)) {
    why->add("heap corruption was found ")
        .add_dec(n)
        .add(n == 1 ? " time" : " times")
        .add(" (the blocks were dropped)")
        .add("; the first: ")
        .add(first_corruption_.c_str());
    return false;
  }
  int64_t page_live[kNumClasses] = {};
  uint64_t formatted = 0, listed = 0;
  int64_t cached_bits = 0;  // used blocks without a live bit: the cached ones
  if (!segments_.validate_locked(why)) return false;
  for (const Segment* seg = segments_.first_locked(); seg != nullptr; seg = seg->all_next) {
    if (seg->magic != (kSegmentMagic ^ reinterpret_cast<uintptr_t>(seg) ^ secret_) || seg->engine != this) {
      return bad(why, "segment: bad magic or engine");
    }
    const Arena& arena = arenas_[seg->arena];
    if (arena.slot_kind(reinterpret_cast<uintptr_t>(seg)) != kSlotSegment ||
        arena.ranges().allocation_size(seg->range_offset, seg->range_handle) != kSegmentSize ||
        arena.base() + seg->range_offset != reinterpret_cast<const char*>(seg)) {
      return bad(why, "segment: not a live 4 MiB range of its arena, or not marked in the slot map");
    }
    const uint32_t expect_pages = static_cast<uint32_t>(kSegmentSize >> seg->page_shift);
    if (seg->page_count != expect_pages || seg->kind >= kSegmentKinds || seg->page_shift != page_shift_of(seg->kind)) {
      return bad(why, "segment: page count or shift does not match its kind");
    }
    const uint64_t* header_bits = block_bit_word(reinterpret_cast<uintptr_t>(seg));
    for (uint64_t w = 0; w < (kSegmentHeaderBytes >> kGranuleShift >> 6); ++w) {
      if (__atomic_load_n(&header_bits[w], __ATOMIC_RELAXED) != 0) return bad(why, "segment: a live bit in its header");
    }
    for (uint32_t i = 0; i < seg->page_count; ++i) {
      const Page& page = seg->pages[i];
      const bool is_free = (seg->free_mask >> i) & 1;
      const uintptr_t owner = page.owner.load(std::memory_order_relaxed);
      if (is_free != (owner == kOwnerNone)) return bad(why, "page: free mask and owner disagree");
      // A free page's tags name no owner, as the page does.
      if (!tag_matches(*seg, i)) return bad(why, "page: its tag's owner or class line differs from the page's");
      if (is_free) continue;
      const int64_t bits = live_bit_count(const_cast<Segment&>(*seg), i, why);
      if (bits < 0) return false;
      if (page.cls == kNoClass) continue;
      ++formatted;
      if (page.block_size != kClassSize[page.cls] || page.index != i ||
          page.start != const_cast<Segment*>(seg)->page_start(i) ||
          page.capacity != const_cast<Segment*>(seg)->page_bytes(i) / page.block_size) {
        return bad(why, "page: format does not match its class");
      }
      if (page.kind != seg->kind || segment_kind_of(page.cls) != seg->kind) {
        return bad(why, "page: class of the wrong page kind");
      }
      const int64_t local = free_list_length(page, page.free, true, why);
      if (local < 0) return false;
      const int64_t remote = free_list_length(page, page.xfree.load(std::memory_order_relaxed), false, why);
      if (remote < 0) return false;
      const uint32_t used = page.used.load(std::memory_order_relaxed);
      if (bits > used) return bad(why, "page: more live bits than used blocks");
      cached_bits += used - bits;
      const uint32_t extended = page.extended.load(std::memory_order_relaxed);
      if (extended > page.capacity || used + local != extended) {
        return bad(why, "page: used + free blocks != carved blocks");
      }
      if (remote > used) return bad(why, "page: more remote frees than used blocks");
      page_live[page.cls] += used - remote;
    }
  }
  int64_t cached[kNumClasses];
  if (!validate_caches(cached, why)) return false;
  int64_t all_cached = 0;
  for (const int64_t n : cached) all_cached += n;
  if (all_cached != cached_bits) return bad(why, "page: used blocks without a live bit differ from the cached blocks");
  for (uint32_t c = 0; c < kNumClasses; ++c) {
    if (page_live[c] != live[c] + cached[c]) {
      why->add("class ")
          .add_dec(kClassSize[c])
          .add(": live blocks in pages (")
          .add_dec(static_cast<uint64_t>(page_live[c]))
          .add(") != the heaps' and shared lists' live count (")
          .add_dec(static_cast<uint64_t>(live[c]))
          .add(") + cached (")
          .add_dec(static_cast<uint64_t>(cached[c]))
          .add(")");
      return false;
    }
  }
  // Every formatted page is on exactly one list: a heap's or a shared class's.
  auto check_list = [&](const PageList& list, uintptr_t owner, const Heap* heap, uint32_t cls, uint8_t in_full) {
    uint32_t n = 0;
    const Page* last = nullptr;
    for (const Page* p = list.head; p != nullptr; p = p->next) {
      if (p->owner.load(std::memory_order_relaxed) != owner || p->heap.load(std::memory_order_relaxed) != heap ||
          p->cls != cls || p->in_full != in_full || (p->next && p->next->prev != p)) {
        return false;
      }
      last = p;
      ++n;
    }
    listed += n;
    return n == list.count && last == list.tail;
  };
  for (uint32_t c = 0; c < kNumClasses; ++c) {
    const SharedClass& sc = shared_[c];
    if (!check_list(sc.avail, kOwnerShared, nullptr, c, 0) || !check_list(sc.full, kOwnerShared, nullptr, c, 1)) {
      return bad(why, "shared class: a page on its lists has the wrong owner, class or side");
    }
    if (sc.page != &g_empty_page && (sc.page->owner.load(std::memory_order_relaxed) != kOwnerShared || sc.page->in_full)) {
      return bad(why, "shared class: current page not on its avail list");
    }
  }
  for (const Heap* h = heaps_; h != nullptr; h = h->next) {
    const auto owner = reinterpret_cast<uintptr_t>(h->thread);
    for (uint32_t c = 0; c < kNumClasses; ++c) {
      if (!check_list(h->lists[c].avail, owner, h, c, 0) || !check_list(h->lists[c].full, owner, h, c, 1)) {
        return bad(why, "heap: a page on its lists has the wrong owner, class or side");
      }
      const Page* cur = h->hot[c].page;
      if (cur != &g_empty_page && (cur->owner.load(std::memory_order_relaxed) != owner || cur->in_full || cur->cls != c)) {
        return bad(why, "heap: current page is not one of its avail pages");
      }
    }
    uint64_t empty_bytes = 0;
    for (uint32_t kind = 0; kind < kSegmentKinds; ++kind) {
      for (const Page* p = h->empty[kind].head; p != nullptr; p = p->next) {
        if (p->owner.load(std::memory_order_relaxed) != owner || p->cls != kNoClass ||
            p->extended.load(std::memory_order_relaxed) != 0) {
          return bad(why, "heap: a kept empty page is not empty");
        }
        if (p->kind != kind) return bad(why, "heap: a kept empty page is on another kind's list");
        empty_bytes += Segment::of(p)->page_bytes(p->index);
      }
    }
    if (empty_bytes != h->empty_bytes) return bad(why, "heap: kept empty bytes differ from a recount");
  }
  if (listed != formatted) return bad(why, "pages: a formatted page is on no list, or on two");
  return true;
}

bool Engine::validate(std::string* why_out) const {
  // The pinning thread appends to arenas: no job runs while this recounts.
  pin_.pause();
  const bool ok = validate_paused(why_out);
  pin_.resume();
  return ok;
}

// Every class and arena lock, taken by index (not analysed).
UNIPOOL_NO_THREAD_SAFETY_ANALYSIS bool Engine::validate_paused(std::string* why_out) const {
  Message why;
  bool ok = true;
  int64_t live[kNumClasses];
  uint64_t refills[kNumClasses];
  int64_t unflushed = 0;
  {
    LockGuard heaps(heaps_lock_);
    for (const SharedClass& sc : shared_) sc.lock.lock();
    LockGuard pages(segments_.lock());
    LockGuard setup(setup_lock_);
    for (const Arena& a : arenas_) a.mutex().lock();
    count_small(live, refills, &unflushed);
    const LargeSums unfolded = count_large_tallies();
    ok = validate_pages(live, &why);
    for (uint32_t i = 0; ok && i < arena_count_.load(std::memory_order_relaxed); ++i) ok = arenas_[i].validate(&why);
    for (uint32_t i = 0; ok && i < kMaxArenas; ++i) {
      if (arenas_[i].pending_ahead() != 0) ok = bad(&why, "arena: a claim of the pinning thread outlives its job");
    }
    if (ok && pin_.pending() != 0) {
      ok = bad(&why, "pinning thread: claimed bytes pending while it is paused");
    }
    LargeRecount large;
    if (ok) ok = recount_large(&large, &why);
    const uint64_t large_count = large.blocks, large_extent = large.extent;
    const uint64_t cached_count = large.cached_blocks, cached_extent = large.cached_extent;
    if (ok && static_cast<int64_t>(large_count) !=
                  static_cast<int64_t>(counters_.large_blocks.load(std::memory_order_relaxed)) + unfolded.blocks) {
      ok = bad(&why, "large: live block count differs from a recount");
    }
    if (ok && (static_cast<int64_t>(cached_count) != unfolded.cached_blocks ||
               static_cast<int64_t>(cached_extent) != unfolded.cached_extent)) {
      ok = bad(&why, "large caches: cached blocks or bytes differ from the ranges with a cached header");
    }
    if (ok) ok = validate_large_caches(&why);
    // Exact accounting.
    if (ok) {
      const HugeTally huge = huge_.tally();
      const uint64_t huge_bytes = huge.block_bytes, cache_bytes = huge.cached_bytes;
      if (huge.blocks != huge_.count() || cache_bytes != huge_.cached_bytes()) {
        ok = bad(&why, "huge: block count or cached bytes differ from a recount");
      }
      uint64_t segment_bytes = segments_.count() * kSegmentSize, arena_committed = 0, arena_used = 0;
      for (uint32_t i = 0; i < arena_count_.load(std::memory_order_relaxed); ++i) {
        arena_committed += arenas_[i].committed_bytes();
        arena_used += arenas_[i].used_bytes();
      }
      if (ok && arena_used != segment_bytes + large_extent + cached_extent) {
        ok = bad(&why, "arenas: used bytes != segments + large blocks (live and cached)");
      }
      if (ok && arena_committed + huge_bytes + cache_bytes != counters_.committed.get()) {
        ok = bad(&why, "committed bytes differ from arenas + huge blocks + huge cache");
      }
      int64_t small_live = 0;
      for (uint32_t c = 0; c < kNumClasses; ++c) small_live += live[c] * static_cast<int64_t>(kClassSize[c]);
      const int64_t flushed = counters_.small_flushed.load(std::memory_order_relaxed);
      // Large blocks' changes not yet folded from the heaps' tallies count too.
      const int64_t allocated =
          counters_.allocated.now.load(std::memory_order_relaxed) - flushed + small_live + unfolded.extent;
      if (ok && static_cast<uint64_t>(allocated) != small_live + large_extent + huge_bytes) {
        ok = bad(&why, "allocated bytes differ from small + large + huge live blocks");
      }
      if (ok && unflushed + flushed != small_live) {
        ok = bad(&why, "small/middle bytes folded into the gauges + unflushed != live");
      }
    }
    for (uint32_t i = kMaxArenas; i-- > 0;) arenas_[i].mutex().unlock();
    for (uint32_t c = kNumClasses; c-- > 0;) shared_[c].lock.unlock();
  }
  if (ok) {
    // The stats identity, from the public figures.
    const HostPoolStats st = stats();
    if (st.allocated_bytes + st.deferred_bytes + st.cached_bytes + st.overhead_bytes + st.arena_free_bytes !=
        st.committed_bytes) {
      why.add("allocated (").add_dec(st.allocated_bytes).add(") + deferred (").add_dec(st.deferred_bytes)
          .add(") + cached (").add_dec(st.cached_bytes).add(") + overhead (").add_dec(st.overhead_bytes)
          .add(") + arena free (").add_dec(st.arena_free_bytes).add(") != committed (").add_dec(st.committed_bytes)
          .add(")");
      ok = false;
    }
  }
  if (ok) {
    const DeferredTally deferred = deferred_.tally();
    if (deferred.blocks != deferred_.count() || deferred.bytes != counters_.deferred_bytes.get()) {
      ok = bad(&why, "deferred: count or bytes differ from a recount");
    }
  }
  if (!ok && why_out != nullptr) *why_out = why.c_str();
  return ok;
}

}  // namespace unipool::host
