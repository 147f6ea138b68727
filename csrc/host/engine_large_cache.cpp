// unipool host: the threads' large caches (large_cache.hpp): taking a
// block, caching one, giving blocks back to their arenas.
#include <cstring>

#include "host/engine.hpp"

namespace unipool::host {
namespace {

void move(std::atomic<int64_t>& counter, int64_t by) noexcept {  // owner only
  counter.store(counter.load(std::memory_order_relaxed) + by, std::memory_order_relaxed);
}

LargeHeader* header_of(void* p) noexcept {
  return reinterpret_cast<LargeHeader*>(static_cast<char*>(p) - kLargeHeader);
}

// The class holding the most bytes; kLargeCacheClasses when all are empty.
uint32_t large_cache_fullest(const LargeCache& cache) noexcept {
  uint32_t best = kLargeCacheClasses;
  uint64_t most = 0;
  for (uint32_t c = 0; c < kLargeCacheClasses; ++c) {
    const uint64_t bytes = cache.cached(c) * large_cache_size(c);
    if (bytes > most) best = c, most = bytes;
  }
  return best;
}

}  // namespace

uint64_t Engine::large_cache_fit(Heap* heap, size_t size, size_t alignment) const noexcept {
  if (heap == nullptr || alignment > kLargeHeader || size <= kLargeCacheMin || size > kLargeCacheMax) return 0;
  const uint32_t cls = large_cache_class(size);
  return heap->large_cache.limit[cls] != 0 ? large_cache_size(cls) : 0;
}

void* Engine::large_cache_take(Heap* heap, size_t size) noexcept {
  check_drain_epoch(heap);
  LargeCache& cache = heap->large_cache;
  if (cache.blocks.load(std::memory_order_relaxed) == 0) return nullptr;
  uint32_t cls = large_cache_class(size);
  const uint32_t last = cls + kLargeCacheReach < kLargeCacheClasses ? cls + kLargeCacheReach : kLargeCacheClasses - 1;
  while (cls < last && cache.cached(cls) == 0) ++cls;
  const uint32_t n = cache.cached(cls);
  if (n == 0) return nullptr;
  void* p = cache.slots[cls][n - 1];
  cache.count[cls].store(n - 1, std::memory_order_relaxed);
  LargeHeader* h = header_of(p);
  const auto extent = static_cast<int64_t>(h->extent);
  move(cache.blocks, -1);
  move(cache.extent, -extent);
  h->requested = size;
  __atomic_store_n(&h->magic, kLargeLive ^ reinterpret_cast<uintptr_t>(p) ^ secret_, __ATOMIC_RELEASE);
  account_large(heap, 1, static_cast<int64_t>(size), extent);
  return p;
}

// The magic goes from live to cached in one atomic step: of two threads
// freeing the same block at once, one caches it and the other's locked path
// finds it free.
bool Engine::large_cache_put(Heap* heap, const Arena* arena, void* p) noexcept {
  const LargeHeader* found = large_header_unlocked(arena, p);
  if (found == nullptr || found->pad != kLargeHeader) return false;
  const uint32_t cls = large_cache_floor_class(found->extent - found->pad);
  LargeCache& cache = heap->large_cache;
  if (cls == kLargeCacheClasses || cache.limit[cls] == 0 || cache.live < kLargeCacheMinLive) return false;
  LargeHeader* h = header_of(p);
  const auto a = reinterpret_cast<uintptr_t>(p);
  uintptr_t live = kLargeLive ^ a ^ secret_;
  if (!__atomic_compare_exchange_n(&h->magic, &live, kLargeCached ^ a ^ secret_, false, __ATOMIC_ACQ_REL,
                                   __ATOMIC_RELAXED)) {
    return false;
  }
  check_drain_epoch(heap);
  // The older half: the newer blocks are the ones still in the core's caches.
  if (cache.cached(cls) == cache.limit[cls]) large_cache_drain(heap, cls, cache.cached(cls) - cache.cached(cls) / 2);
  const auto extent = static_cast<int64_t>(h->extent);
  while (cache.extent.load(std::memory_order_relaxed) + extent > static_cast<int64_t>(cache.budget)) {
    const uint32_t fullest = large_cache_fullest(cache);
    if (fullest == kLargeCacheClasses) break;
    large_cache_drain(heap, fullest, cache.cached(fullest) - cache.cached(fullest) / 2);
  }
  const uint32_t n = cache.cached(cls);
  cache.slots[cls][n] = p;
  cache.count[cls].store(n + 1, std::memory_order_relaxed);
  move(cache.blocks, 1);
  move(cache.extent, extent);
  account_large(heap, -1, -static_cast<int64_t>(h->requested), -extent);
  return true;
}

void Engine::large_cache_drain(Heap* heap, uint32_t cls, uint32_t n) noexcept {
  LargeCache& cache = heap->large_cache;
  void* out[kLargeCacheSlots];
  const uint32_t had = cache.cached(cls);
  std::memcpy(out, cache.slots[cls], n * sizeof(void*));
  std::memmove(cache.slots[cls], cache.slots[cls] + n, (had - n) * sizeof(void*));
  cache.count[cls].store(had - n, std::memory_order_relaxed);
  for (uint32_t i = 0; i < n; ++i) {
    move(cache.blocks, -1);
    move(cache.extent, -static_cast<int64_t>(large_cache_release(out[i])));
  }
}

void Engine::large_cache_drain_all(Heap* heap) noexcept {
  for (uint32_t cls = 0; cls < kLargeCacheClasses; ++cls) {
    if (heap->large_cache.cached(cls) != 0) large_cache_drain(heap, cls, heap->large_cache.cached(cls));
  }
}

// A cached block back to its arena; its extent. A header found overwritten
// is reported and its range left used: the block is leaked, never reused.
uint64_t Engine::large_cache_release(void* p) noexcept {
  const LargeHeader* h = header_of(p);
  const uint64_t extent = h->extent;
  const uint32_t index = h->arena;
  if (index >= arena_count_.load(std::memory_order_acquire) ||
      !arenas_[index].contains(reinterpret_cast<uintptr_t>(p))) {
    report_large_corruption(p);
    return extent;
  }
  Arena* arena = &arenas_[index];
  FutexGuard lock(arena->mutex());
  LargeHeader* checked = large_header_as(arena, p, kLargeCached);
  if (checked == nullptr) {
    report_large_corruption(p);
    return extent;
  }
  __atomic_store_n(&checked->magic, kLargeFreed ^ reinterpret_cast<uintptr_t>(p) ^ secret_, __ATOMIC_RELEASE);
  arena->free(checked->offset, checked->handle);
  ArenaDelta delta;
  arena->maybe_trim(retain_, &delta);
  counters_.apply(delta);
  return extent;
}

}  // namespace unipool::host
