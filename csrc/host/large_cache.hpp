// unipool host: a thread's cache of the large blocks it freed last, by size
// class, kept in front of the arenas.
//
// Why: a large block otherwise costs its arena's lock and two steps of the
// range allocator at each allocation and free, and with many large blocks
// live the range the allocator picks is seldom the one freed a moment ago,
// so the program's first writes to it miss the core's caches and TLB.
// tcmalloc keeps blocks up to 256 KiB in its per-thread size classes for
// the same reason. Here large blocks of at most kLargeCacheMax are rounded
// up to a class size (four per power of two, as the middle classes above
// 16 KiB: at most 25% more address space; the tail a request leaves
// untouched costs no memory), so that any cached block of a class serves
// any request of it. A free pushes the block (no lock); an allocation pops
// the block freed last of its class, or of one of the next
// kLargeCacheReach classes.
//
// When it caches: a thread caches only while it holds at least
// kLargeCacheMinLive live large blocks. With few, the arena's best fit hands
// the same hot memory back anyway, and the cache only held memory the next
// requests of other classes then took new: hakmem_mir (rounds of four 128-
// 384 KiB blocks) ran 9% slower with 200 more page faults, hakmem_mixed 3%.
// With 146 live (fragmentation_mix), the cache made it 1.2x faster.
// And a request the cache cannot serve takes memory the arena handed out
// before, or, when none fits, gives the whole cache back before the arena
// takes memory new to the program (a fault per page, and an arena grown
// around the cached blocks).
//
// Invariants (validate() checks each):
// - A cached block is a used range of its arena whose header holds the
//   cached magic (kLargeCached ^ address ^ secret), so a second free, a
//   usable_size() or a realloc() of it finds no live block. It is free for
//   its user: counted in the heap's cached tally, not in the live one.
// - Each class holds at most its limit (large_cache_limit()), every block
//   exactly the class size (a block resized in place, or made with an
//   alignment above 64, is never cached), in the arena its header names.
// - Only the owning thread touches its cache (and validate(), with the
//   program's threads quiet). Any thread may cache a block it frees, from
//   whichever arena: the block goes back to that arena when drained.
// - The whole cache goes back to the arenas where the block caches do
//   (block_cache.hpp): thread exit, flush_thread_cache(), trim(), the drain
//   epoch, an allocation refused for lack of memory, a miss that finds no
//   used memory to fit (above). A free into a full class gives the older
//   half of the class back, and past the budget (large_cache_budget()) the
//   fullest class gives back its older half.
// - thread_cache=size and none, and hardened=on, have no large cache.
#pragma once

#include <atomic>
#include <cstdint>

#include "unipool/host_config.hpp"

namespace unipool::host {

inline constexpr uint64_t kLargeCacheMin = 8 << 10;    // classes start above this
inline constexpr uint64_t kLargeCacheMax = 256 << 10;  // and end here
inline constexpr uint32_t kLargeCacheClasses = 20;     // 5 powers of two, 4 classes each
inline constexpr uint32_t kLargeCacheSlots = 16;

// Class of a size in (kLargeCacheMin, kLargeCacheMax]: the power of two
// below size - 1 picks the group, the next two bits the quarter.
constexpr uint32_t large_cache_class(uint64_t size) noexcept {
  const uint64_t m = size - 1;
  const uint32_t octave = 63u - static_cast<uint32_t>(__builtin_clzll(m));
  return (octave - 13) * 4 + static_cast<uint32_t>((m >> (octave - 2)) & 3);
}

constexpr uint64_t large_cache_size(uint32_t cls) noexcept { return uint64_t{5 + cls % 4} << (cls / 4 + 11); }

static_assert(large_cache_class(kLargeCacheMin + 1) == 0 && large_cache_size(0) == 10 << 10);
static_assert(large_cache_class(kLargeCacheMax) == kLargeCacheClasses - 1);
static_assert(large_cache_size(kLargeCacheClasses - 1) == kLargeCacheMax);
static_assert(large_cache_class(12 << 10) == 1 && large_cache_class((12 << 10) + 1) == 2);

// Blocks of class `cls` a thread may cache under a policy: about 1 MiB of
// them, at least 2, at most 8 (unlimited: 2 MiB, 4 to kLargeCacheSlots);
// none under thread_cache=size or none, or hardened=on.
constexpr uint32_t large_cache_limit(HostThreadCache policy, bool hardened, uint32_t cls) noexcept {
  if (hardened || policy == HostThreadCache::size || policy == HostThreadCache::none) return 0;
  const bool unlimited = policy == HostThreadCache::unlimited;
  const uint64_t n = (uint64_t{unlimited ? 2u : 1u} << 20) / large_cache_size(cls);
  const uint64_t least = unlimited ? 4 : 2, most = unlimited ? kLargeCacheSlots : 8;
  return static_cast<uint32_t>(n < least ? least : (n > most ? most : n));
}

// Bytes (block extents) a thread's large cache holds in all: past it, the
// fullest class gives back its older half.
constexpr uint64_t large_cache_budget(HostThreadCache policy) noexcept {
  return policy == HostThreadCache::unlimited ? uint64_t{4} << 20 : uint64_t{1} << 20;
}

// A thread caches the large blocks it frees only while it holds at least
// this many live ones (counted by its own allocations and frees).
inline constexpr int64_t kLargeCacheMinLive = 16;

// A request takes a cached block of its class, else of one of the next
// classes (a block at most this many classes larger).
inline constexpr uint32_t kLargeCacheReach = 3;

struct LargeCache {
  // The owner writes (relaxed load + store); stats() reads.
  std::atomic<uint32_t> count[kLargeCacheClasses];
  std::atomic<int64_t> blocks{0}, extent{0};  // over all classes
  uint32_t limit[kLargeCacheClasses];
  uint64_t budget = 0;
  int64_t live = 0;                                   // large blocks this thread allocated less those it freed
  void* slots[kLargeCacheClasses][kLargeCacheSlots];  // [0, count) hold blocks, oldest first

  uint32_t cached(uint32_t cls) const noexcept { return count[cls].load(std::memory_order_relaxed); }
  void reset() noexcept {
    for (uint32_t c = 0; c < kLargeCacheClasses; ++c) {
      count[c].store(0, std::memory_order_relaxed);
      limit[c] = 0;
    }
    budget = 0;
    live = 0;
    blocks.store(0, std::memory_order_relaxed);
    extent.store(0, std::memory_order_relaxed);
  }
};

}  // namespace unipool::host
