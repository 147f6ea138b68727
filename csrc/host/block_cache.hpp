// unipool host: a thread's block cache, the blocks of each class it freed
// last, kept in front of its pages.
//
// Why: in a live set larger than the core's caches, a page's free list
// hands back a block freed long ago (a cold line), and pushing a block on a
// list writes into it, another cold line, at every free. So each heap keeps,
// per class, a bounded stack of pointers to the blocks it freed most
// recently from its own pages. A free pushes the pointer and clears the
// block's live bit; an allocation pops the top, a block it freed a few
// operations ago. Neither reads or writes the block (but a free into a page
// with other threads' frees pending, which reads and writes its cookie:
// Engine::owned_live_block). jemalloc's tcache and tcmalloc's per-CPU
// caches keep pointers the same way.
//
// Invariants (validate() checks each):
// - A cached block is free for its user (counted as cached, not live), its
//   live bit is clear (so the owner's second free, usable_size() and the slow
//   paths see a free block), and it is still counted in page->used and on
//   no page list: a page never empties under a cached block. The pages'
//   live blocks are the heaps' live blocks plus the cached ones. Another
//   thread's second free is found when the owner collects it: its bit is
//   clear, or, if the owner handed the block out again, its cookie is gone.
//   A block cached while other threads' frees were pending on its page
//   carries its cookie, so that second free is refused at once.
// - Every cached block is on a page its heap owns. A page leaves its heap
//   (shed to the shared lists, abandoned at thread exit) only after its
//   cached blocks went back to its local list.
// - Only the owning thread touches its stacks (and validate(), which the
//   program calls with its threads quiet, as for the page lists).
// - A class holds at most HeapClassHot::cache_limit blocks (block_cache_limit()).
//   When full, the older half goes to the pages' local lists. The whole
//   cache goes back at thread exit, flush_thread_cache(), trim(), and after
//   the pool asked every thread for it (trim(), an allocation refused for
//   lack of memory: the drain epoch), at the thread's next refill or next
//   free into a full cache. A thread that does neither keeps its cache.
// - Blocks freed by a thread that does not own their page skip the cache:
//   the owner could not tell such a block free without reading it.
// - hardened=on has no cache: a free block there always carries its checked
//   link and cookie (free_link.hpp).
#pragma once

#include <cstdint>

#include "host/layout.hpp"
#include "host/size_classes.hpp"
#include "unipool/host_config.hpp"

namespace unipool::host {

inline constexpr uint32_t kCacheSlots = 64;

// Blocks of `block_size` a class may cache under a policy: about 64 KiB of
// them, at least 16 (but no more than 512 KiB), at most kCacheSlots; under
// `size`, about 8 KiB, at least one, at most 16. `none` has no heaps, so no
// cache.
// Why at least 16: with 64 KiB alone a class of 32 KiB blocks caches two,
// and a thread that frees a few in a row drains its cache at almost every
// free (mid_mt: 8-32 KiB blocks freed and allocated at random ran 1.25x
// faster with 16 than with 64 KiB alone, for 0.7 MiB more peak RSS at 4
// threads). The 512 KiB bound keeps a thread's cache of each of the largest
// classes (40-128 KiB) at 12 to 4 blocks.
constexpr uint32_t block_cache_limit(HostThreadCache policy, bool hardened, uint32_t block_size) noexcept {
  if (policy == HostThreadCache::none || hardened) return 0;
  const bool lean = policy == HostThreadCache::size;
  const uint32_t bytes = lean ? 8u << 10 : 64u << 10;
  const uint32_t most = lean ? 16 : kCacheSlots;
  const uint32_t n = bytes / block_size;
  const uint32_t floor_by_bytes = (512u << 10) / block_size;
  const uint32_t least = lean ? 1 : (floor_by_bytes < 16 ? floor_by_bytes : 16);
  return n < least ? least : (n > most ? most : n);
}

}  // namespace unipool::host
