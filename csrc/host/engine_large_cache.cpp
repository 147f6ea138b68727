// unipool host: the threads' large caches (large_cache.hpp): taking a
// block, caching one, giving blocks back to their arenas.
#include <cstring>

#include "host/engine.hpp"

namespace unipool::host {
namespace {

LargeHeader* header_of(void* p) noexcept {
  return reinterpret_cast<LargeHeader*>(static_cast<char*>(p) - kLargeHeader);
}

// Every cached block of class c spans exactly this much of its arena.
int64_t class_extent(uint32_t cls) noexcept { return static_cast<int64_t>(large_cache_size(cls) + kLargeHeader); }

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

// The header in front of p names a block of exactly class cls's extent,
// 64-byte aligned, at p in the arena it names.
bool Engine::is_class_block(const LargeHeader* h, const void* p, uint32_t cls) const noexcept {
  const auto a = reinterpret_cast<uintptr_t>(p);
  if (h->pad != kLargeHeader || static_cast<int64_t>(h->extent) != class_extent(cls)) return false;
  if (h->arena >= arena_count_.load(std::memory_order_acquire)) return false;
  const Arena& arena = arenas_[h->arena];
  return arena.contains(a) && h->offset + kLargeHeader == a - reinterpret_cast<uintptr_t>(arena.base());
}

// The newest block of the request's class or of the next ones. A block
// whose header is no longer a cached block's of its class (the program
// wrote in front of its block after freeing it) is reported and left
// unused, counted live. The report may run the program's handler, which may
// free into this cache: the counts are read again after it.
void* Engine::large_cache_take(Heap* heap, size_t size) noexcept {
  LargeCache& cache = heap->large_cache;
  const uint32_t first = large_cache_class(size);
  const uint32_t last =
      first + kLargeCacheReach < kLargeCacheClasses ? first + kLargeCacheReach : kLargeCacheClasses - 1;
  for (uint32_t cls = first; cls <= last && cache.blocks.load(std::memory_order_relaxed) != 0; ++cls) {
    while (const uint32_t n = cache.cached(cls)) {
      void* p = cache.slots[cls][n - 1];
      cache.count[cls].store(n - 1, std::memory_order_relaxed);
      shift(cache.blocks, -1);
      shift(cache.extent, -class_extent(cls));
      LargeHeader* h = header_of(p);
      const auto a = reinterpret_cast<uintptr_t>(p);
      if (__atomic_load_n(&h->magic, __ATOMIC_ACQUIRE) != (kLargeCached ^ a ^ secret_) || !is_class_block(h, p, cls)) {
        account_large(heap, 1, 0, class_extent(cls));
        report_large_corruption(p);
        continue;
      }
      h->requested = size;
      __atomic_store_n(&h->magic, kLargeLive ^ a ^ secret_, __ATOMIC_RELEASE);
      account_large(heap, 1, static_cast<int64_t>(size), class_extent(cls));
      return p;
    }
  }
  return nullptr;
}

// Only a block of exactly its class's extent, 64-byte aligned, in the
// arena it says: a block resized in place or made with a larger alignment
// goes back the locked way. The magic goes from live to cached in one
// atomic step: of two threads freeing the same block at once, one caches it
// and the other's locked path finds it free. The header is read again
// after the step (before it, a second free racing with a new block at the
// same address could have read the old block's).
bool Engine::large_cache_put(Heap* heap, uint32_t arena_index, void* p) noexcept {
  check_drain_epoch(heap);
  LargeCache& cache = heap->large_cache;
  if (cache.live < kLargeCacheMinLive) return false;
  const LargeHeader* found = large_header_unlocked(&arenas_[arena_index], p);
  if (found == nullptr) return false;
  const uint64_t usable = found->extent - kLargeHeader;
  if (usable <= kLargeCacheMin || usable > kLargeCacheMax) return false;
  const uint32_t cls = large_cache_class(usable);
  if (cache.limit[cls] == 0) return false;
  LargeHeader* h = header_of(p);
  const auto a = reinterpret_cast<uintptr_t>(p);
  uintptr_t live = kLargeLive ^ a ^ secret_;
  if (!__atomic_compare_exchange_n(&h->magic, &live, kLargeCached ^ a ^ secret_, false, __ATOMIC_ACQ_REL,
                                   __ATOMIC_RELAXED)) {
    return false;
  }
  if (!is_class_block(h, p, cls) || h->arena != arena_index) {
    __atomic_store_n(&h->magic, kLargeLive ^ a ^ secret_, __ATOMIC_RELEASE);
    return false;
  }
  const int64_t requested = static_cast<int64_t>(h->requested);
  large_cache_make_room(heap, cls);
  const uint32_t n = cache.cached(cls);
  cache.slots[cls][n] = p;
  cache.count[cls].store(n + 1, std::memory_order_relaxed);
  shift(cache.blocks, 1);
  shift(cache.extent, class_extent(cls));
  account_large(heap, -1, -requested, -class_extent(cls));
  return true;
}

// Room for one more block of class cls: while past the budget, the fullest
// class gives back its older half; then a full class gives back its older
// half (the newer blocks are the ones still in the core's caches). A
// corruption report on the way runs the program's handler, which may free
// into this cache: the class is checked again until it has room.
void Engine::large_cache_make_room(Heap* heap, uint32_t cls) noexcept {
  LargeCache& cache = heap->large_cache;
  while (cache.extent.load(std::memory_order_relaxed) + class_extent(cls) > static_cast<int64_t>(cache.budget)) {
    const uint32_t fullest = large_cache_fullest(cache);
    if (fullest == kLargeCacheClasses) break;
    large_cache_drain(heap, fullest, cache.cached(fullest) - cache.cached(fullest) / 2);
  }
  while (cache.cached(cls) >= cache.limit[cls]) large_cache_drain(heap, cls, cache.cached(cls) - cache.cached(cls) / 2);
}

void Engine::large_cache_drain(Heap* heap, uint32_t cls, uint32_t n) noexcept {
  LargeCache& cache = heap->large_cache;
  void* out[kLargeCacheSlots];
  const uint32_t had = cache.cached(cls);
  std::memcpy(out, cache.slots[cls], n * sizeof(void*));
  std::memmove(cache.slots[cls], cache.slots[cls] + n, (had - n) * sizeof(void*));
  cache.count[cls].store(had - n, std::memory_order_relaxed);
  shift(cache.blocks, -static_cast<int64_t>(n));
  shift(cache.extent, -static_cast<int64_t>(n) * class_extent(cls));
  for (uint32_t i = 0; i < n; ++i) {
    if (!large_cache_release(out[i], cls)) {
      account_large(heap, 1, 0, class_extent(cls));
      report_large_corruption(out[i]);
    }
  }
}

void Engine::large_cache_drain_all(Heap* heap) noexcept {
  for (uint32_t cls = 0; cls < kLargeCacheClasses; ++cls) {
    if (heap->large_cache.cached(cls) != 0) large_cache_drain(heap, cls, heap->large_cache.cached(cls));
  }
}

// A cached block of class `cls` back to its arena; false, with nothing
// done, when its header is no longer a cached block's of that class.
bool Engine::large_cache_release(void* p, uint32_t cls) noexcept {
  const LargeHeader* h = header_of(p);
  const uint32_t index = h->arena;
  if (index >= arena_count_.load(std::memory_order_acquire) ||
      !arenas_[index].contains(reinterpret_cast<uintptr_t>(p))) {
    return false;
  }
  Arena* arena = &arenas_[index];
  FutexGuard lock(arena->mutex());
  LargeHeader* checked = large_header_as(arena, p, kLargeCached);
  if (checked == nullptr || static_cast<int64_t>(checked->extent) != class_extent(cls)) return false;
  __atomic_store_n(&checked->magic, kLargeFreed ^ reinterpret_cast<uintptr_t>(p) ^ secret_, __ATOMIC_RELEASE);
  give_range_back(arena, checked);
  return true;
}

}  // namespace unipool::host
