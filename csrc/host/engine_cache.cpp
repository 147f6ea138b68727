// unipool host: the block cache's slow side (block_cache.hpp): a free that
// finds the cache full, the slow path's pop, giving blocks back to their
// pages, and the drains.
#include <algorithm>
#include <cstring>

#include "host/engine_fast.hpp"

namespace unipool::host {

void Engine::free_uncached(Page* page, Block* b) noexcept {
  Heap* heap = page->heap.load(std::memory_order_relaxed);
  HeapClassHot& hot = heap->hot[page->cls];
  if (hot.cache_limit == 0) {
    bump(hot.frees);
    free_local(heap, page, b);
    return;
  }
  check_drain_epoch(heap);
  // The older half (all of a one-block cache): the newer blocks are the
  // ones still in the core's caches.
  if (hot.cached() != 0) drain_cache(heap, page->cls, hot.cached() - hot.cached() / 2);
  // A drained block of b's page may have shed the page (Page::shed_at).
  if (page->owner.load(std::memory_order_relaxed) == reinterpret_cast<uintptr_t>(heap->thread)) {
    cache_push(hot, b, hot.cached());
  } else {
    bump(hot.frees);
    give_back(reinterpret_cast<uintptr_t>(heap->thread), page, b);
  }
}

void Engine::drain_cache(Heap* heap, uint32_t cls, uint32_t n) noexcept {
  HeapClassHot& hot = heap->hot[cls];
  Block** slots = hot.slots;
  Block* out[kCacheSlots];
  std::memcpy(out, slots, n * sizeof(Block*));
  std::memmove(slots, slots + n, (hot.cached() - n) * sizeof(Block*));
  bump(hot.frees, n);  // a stats() meanwhile may see one change and not the other
  hot.set_cached(hot.cached() - n);
  // Every block onto its page's list first, while every page is still this
  // heap's; then each page once, in address order, where a page may leave
  // the heap (emptied, or shed: Page::shed_at).
  std::sort(out, out + n);
  for (uint32_t i = 0; i < n; ++i) {
    Page* page = Segment::of(out[i])->page_of(out[i]);
    push_local(page, out[i]);
  }
  for (uint32_t i = 0; i < n; ++i) {
    Page* page = Segment::of(out[i])->page_of(out[i]);
    if (i + 1 < n && Segment::of(out[i + 1])->page_of(out[i + 1]) == page) continue;
    const uint32_t used = page->used.load(std::memory_order_relaxed);
    if (used == 0 || page->in_full || page->below_shed(used)) heap_free_slow(heap, page);
  }
}

void Engine::drain_caches(Heap* heap) noexcept {
  for (uint32_t cls = 0; cls < kNumClasses; ++cls) {
    if (heap->hot[cls].cached() != 0) drain_cache(heap, cls, heap->hot[cls].cached());
  }
  large_cache_drain_all(heap);
}

// Straight onto the local list, without the checks of heap_free_slow: the
// caller is moving the page out of the heap.
void Engine::drain_page(Heap* heap, Page* page) noexcept {
  HeapClassHot& hot = heap->hot[page->cls];
  Block** slots = hot.slots;
  uint32_t kept = 0;
  for (uint32_t i = 0; i < hot.cached(); ++i) {
    Block* b = slots[i];
    if (Segment::of(b)->page_of(b) == page) {
      push_local(page, b);
    } else {
      slots[kept++] = b;
    }
  }
  bump(hot.frees, hot.cached() - kept);
  hot.set_cached(kept);
}

void Engine::check_drain_epoch(Heap* heap) noexcept {
  const uint32_t epoch = drain_epoch_.load(std::memory_order_relaxed);
  if (heap->drain_seen == epoch) return;
  heap->drain_seen = epoch;
  drain_caches(heap);
}

bool Engine::relieve_pressure() noexcept {
  // An allocation of the engine's own (t_internal) may come from under a
  // page or class lock that a drain would take again.
  if (t_internal != 0) return false;
  const Status why = thread_last_status();
  if (why != Status::out_of_space && why != Status::allocation_limit) return false;
  drain_epoch_.fetch_add(1, std::memory_order_relaxed);
  if (slot_ == 0) return false;
  const HeapRef& ref = t_thread->heaps[slot_];
  if (ref.generation != generation_) return false;
  bool had = false;
  for (const HeapClassHot& hot : ref.heap->hot) had = had || hot.cached() != 0;
  had = had || ref.heap->large_cache.blocks.load(std::memory_order_relaxed) != 0;
  ref.heap->drain_seen = drain_epoch_.load(std::memory_order_relaxed);
  drain_caches(ref.heap);
  return had;
}

}  // namespace unipool::host
