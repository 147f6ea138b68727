// unipool host: the engine's fast paths, inlined into HostPool's members and
// the malloc face's entry points.
//
// allocate: the thread's recent heap (t_recent_heap) when it is this pool's,
//   else thread state -> heap of this pool; then the class's hot line ->
//   the top of its block cache (block_cache.hpp); else the current page's
//   free list, its link checked first (free_link.hpp). No lock, no atomic
//   read-modify-write.
// free: arena bounds -> segment (mask) -> the block's tag (shift) and the
//   block's live bit (layout.hpp) -> owner is this thread, a live block
//   starts here (and, with remote frees pending on the page, carries no
//   free cookie) -> push on the class's block cache; a
//   full one sends its older half to the pages (out of line). Anything else
//   (other thread's page, shared page, large, huge, misuse) goes to
//   free_slow().
#pragma once

#include "core/assert.hpp"
#include "host/engine.hpp"
#include "host/free_link.hpp"

namespace unipool::host {

#define UNIPOOL_LIKELY(x) __builtin_expect(!!(x), 1)
#define UNIPOOL_UNLIKELY(x) __builtin_expect(!!(x), 0)

inline void* Engine::pop_fast(uint32_t cls) noexcept {
  return UNIPOOL_UNLIKELY(hardened_) ? pop_fast_as<true>(cls) : pop_fast_as<false>(cls);
}

template <bool kHardened>
inline void* Engine::pop_fast_as(uint32_t cls) noexcept {
  Heap* heap = t_recent_heap.heap;
  if (UNIPOOL_UNLIKELY(t_recent_heap.generation != generation_)) {
    const HeapRef& ref = t_thread->heaps[slot_];
    if (ref.generation != generation_) return nullptr;
    t_recent_heap = ref;
    heap = ref.heap;
  }
  HeapClassHot& hot = heap->hot[cls];
  // One load of the count: it is atomic (stats() reads it), so a second
  // read in take_cached would be a second load.
  const uint32_t cached = hot.cached();
  if (UNIPOOL_LIKELY(cached != 0)) return take_cached(hot, cached);
  Page* page = hot.page;
  Block* b = page->free;
  Block* next = nullptr;
  // A block that fails its checks is left for the slow path, which pops
  // the same block, fails the same check and reports it.
  if (UNIPOOL_LIKELY(b != nullptr) && UNIPOOL_LIKELY(next_as<kHardened>(page, b, &next))) {
    // The next block of this class is usually a cold line (freed long ago
    // in a big live set): start fetching it now, not at the next call.
    __builtin_prefetch(next, 1, 3);
    take_local(page, b, next);
    bump(hot.allocs);
    return b;
  }
  return nullptr;
}

template <bool kHardened>
inline void* Engine::allocate_as(size_t size) noexcept {
  if (UNIPOOL_LIKELY(size - 1 < middle_max_)) {
    if (void* p = pop_fast_as<kHardened>(class_of(size))) return p;
  }
  return allocate_slow(size, 0);
}

inline void* Engine::allocate(size_t size) noexcept {
  if (UNIPOOL_UNLIKELY(hardened_)) return allocate_hardened(size);
  return allocate_as<false>(size);
}

inline void* Engine::allocate_fast(size_t size) noexcept {
  return UNIPOOL_LIKELY(size - 1 < middle_max_) ? pop_fast(class_of(size)) : nullptr;
}

inline void* Engine::allocate_aligned_fast(size_t size, size_t alignment) noexcept {
  UNIPOOL_ASSERT(alignment > 16 && (alignment & (alignment - 1)) == 0, "a power of two above 16");
  // size <= middle_max_ <= kMiddleLimit: the table's case. A class it finds
  // past middle_max_ (or none: kNumClasses) fails the second test.
  if (UNIPOOL_LIKELY(alignment <= kMaxClassAlignment && size - 1 < middle_max_)) {
    const uint32_t cls = aligned_class_unchecked(size, alignment);
    if (UNIPOOL_LIKELY(cls < middle_classes_)) return pop_fast(cls);
  }
  return nullptr;
}

inline void* Engine::allocate_aligned(size_t size, size_t alignment) noexcept {
  // 0 and the powers of two up to 16 are the default alignment. 3, 6, 12,
  // ... go to allocate_slow, which refuses every non-power of two
  // (bad_alignment).
  if ((alignment & (alignment - 1)) == 0) {
    if (alignment <= 16) return allocate(size);
    if (void* p = allocate_aligned_fast(size, alignment)) return p;
  }
  return allocate_slow(size, alignment);
}

inline void* Engine::take_cached(HeapClassHot& hot, uint32_t cached) noexcept {
  const uint32_t n = cached - 1;
  hot.set_cached(n);
  Block* b = hot.slots[n];
  mark_block_live(b);
  // Live again: should another thread free it a second time meanwhile, the
  // owner's collect then finds no cookie on it (collect_remote).
  b->cookie = 0;
  // No prefetch of the next cached block: its free prefetched it, and a
  // second one cost 0-3% in rl_small, rl_medium and alignment64.
  return b;
}

inline void Engine::cache_push(HeapClassHot& hot, Block* b, uint32_t n) noexcept {
  mark_block_free(b);
  hot.put(b, n);
}

UNIPOOL_ALWAYS_INLINE void Engine::free_local(Heap* heap, Page* page, Block* b) noexcept {
  const uint32_t used = push_local(page, b);
  if (UNIPOOL_UNLIKELY((used == 0 && page != heap->hot[page->cls].page) || page->in_full || used == page->shed_at)) {
    heap_free_slow(heap, page);
  }
}

// The live proof from the page's tag and the block's bit (layout.hpp): p
// lies in a segment of arena 0, a live block starts there, and this thread
// owns its page. While another thread's free of the page's blocks is pending
// (kRemotePending set), a block waiting on the remote list still has its
// bit: then the block's cookie tells it apart (a remote free writes it, a
// live block has none). The owner's class line, or nullptr when any of that
// fails (the slow paths then look closer).
inline HeapClassHot* Engine::owned_live_block(const void* p, LiveWord* live) const noexcept {
  const auto a = reinterpret_cast<uintptr_t>(p);
  const uintptr_t off0 = a - arena0_base_.load(std::memory_order_relaxed);
  if (UNIPOOL_LIKELY(off0 < fast_span_.load(std::memory_order_relaxed)) &&
      UNIPOOL_LIKELY(arena0_slots_.load(std::memory_order_relaxed)[off0 >> kSegmentShift].load(
                         std::memory_order_relaxed) == kSlotSegment)) {
    const Segment* seg = Segment::of(p);
    const PageTag& tag = seg->tags[Segment::tag_index_of(p)];
    live->word = block_bit_word(a);
    live->bits = __atomic_load_n(live->word, __ATOMIC_RELAXED);
    live->mask = uint64_t{1} << block_bit(a);
    const uintptr_t owner = tag.owner.load(std::memory_order_relaxed);
    const auto self = reinterpret_cast<uintptr_t>(t_thread);
    live->remote_pending = false;
    if (UNIPOOL_LIKELY((a & 15) == 0 && (live->bits & live->mask) != 0)) {
      if (UNIPOOL_LIKELY(owner == self)) return tag.hot;
      // A page other threads free into keeps the flag until its owner
      // collects: its owner's own frees stay here, one read of a line the
      // program just used, not the whole slow path (exchange: 82% of local
      // frees went there).
      if (owner == (self | kRemotePending) && static_cast<const Block*>(p)->cookie != (a ^ secret_)) {
        live->remote_pending = true;
        return tag.hot;
      }
    }
  }
  return nullptr;
}

inline bool Engine::free_owned(void* p) noexcept {
  LiveWord live;
  HeapClassHot* hot = owned_live_block(p, &live);
  if (UNIPOOL_UNLIKELY(hot == nullptr)) return false;
  // On a page other threads free into, the block gets its cookie too (the
  // test read its line): their second free of it is then refused on the
  // spot, as for a block on a list, not only found when the owner collects.
  if (UNIPOOL_UNLIKELY(live.remote_pending)) {
    static_cast<Block*>(p)->cookie = reinterpret_cast<uintptr_t>(p) ^ secret_;
  }
  const uint32_t cached = hot->cached();  // once: an atomic, as in pop_fast_as
  if (UNIPOOL_UNLIKELY(cached >= hot->cache_limit)) {
    free_uncached(Segment::of(p)->page_of(p), static_cast<Block*>(p));
    return true;
  }
  // Handed out again soon (LIFO), to a program that writes it: fetch its
  // line now, in the background, as a push onto a list would.
  __builtin_prefetch(p, 1, 3);
  // The bit cleared from the word the test loaded: only this thread writes
  // it, and a second load would wait on the same line again.
  __atomic_store_n(live.word, live.bits & ~live.mask, __ATOMIC_RELAXED);
  hot->put(static_cast<Block*>(p), cached);
  return true;
}

inline Status Engine::free(void* p) noexcept { return free_owned(p) ? Status::ok : free_slow(p); }

}  // namespace unipool::host
