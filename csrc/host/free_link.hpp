// unipool host: how a free block links to the next one, and the checks made
// before a link is followed.
//
// A free small or middle block's first word is the link to the next block of
// its list (the page's local list or its remote list), the second its cookie
// (layout.hpp). Those words sit in memory the program owned a moment ago: a
// write after free lands on them, and following a damaged link would crash
// inside the allocator or hand out memory that is not a free block.
//
// Two modes (HostPoolConfig::hardened):
//   off  the link is the plain address. Before it is followed it must be the
//        end of the list or point into its own page's blocks: a garbage link
//        is reported, not dereferenced. A link redirected inside
//        its page, or a cookie overwritten, is not seen here (validate() and
//        the double-free check still read cookies).
//   on   the link is stored encoded with the page's secret key, and a block
//        is checked before its link is followed: its cookie must be intact
//        and the decoded link must be the end or a carved block start of the
//        same page. Garbage, zero, an address (into this page or another)
//        and a partial overwrite all decode to something that fails, so the
//        program cannot redirect the list without knowing the key.
//
// Encoding: (next ^ key) * M, decoded by (stored * M^-1) ^ key, M odd. The
// multiply spreads any change of the stored word over every higher bit of
// the decoded one, so even a one-byte overwrite moves the link out of its
// page (an xor alone would let a low-byte write move it one block over). The
// key has its top bit set: a zeroed link decodes to an address no page has.
#pragma once

#include <cstdint>

#include "core/compiler.hpp"
#include "host/engine.hpp"

namespace unipool::host {

inline constexpr uint64_t kLinkMul = 0x9e3779b97f4a7c15ull;  // odd: invertible mod 2^64

// The inverse of an odd number mod 2^64 (Newton's iteration doubles the
// correct low bits each step: 5 steps from the 3 that x = odd gets right).
constexpr uint64_t inverse_mod_2_64(uint64_t odd) noexcept {
  uint64_t x = odd;
  for (int i = 0; i < 5; ++i) x *= 2 - odd * x;
  return x;
}
inline constexpr uint64_t kLinkMulInverse = inverse_mod_2_64(kLinkMul);
static_assert(kLinkMul * kLinkMulInverse == 1);

inline uint64_t mix64(uint64_t x) noexcept {  // splitmix64's finalizer
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ull;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// A page's key: secret to the program (derived from the pool's secret), and
// different for every page, so a key learnt from one page opens no other.
inline uint64_t page_link_key(uint64_t secret, const Page* page) noexcept {
  return mix64(secret ^ reinterpret_cast<uintptr_t>(page)) | (uint64_t{1} << 63);
}

inline uintptr_t encode_link(uint64_t key, const Block* next) noexcept {
  return (reinterpret_cast<uintptr_t>(next) ^ key) * kLinkMul;
}

inline Block* decode_link(uint64_t key, uintptr_t stored) noexcept {
  return reinterpret_cast<Block*>((stored * kLinkMulInverse) ^ key);
}

// p lies where the page's blocks go (carved or not; no alignment check): a
// block popped from there reads mapped memory, and its live bit lies in the
// page's own bitmap words, so neither the pop nor its bitmap write leaves
// the page.
inline bool in_page_span(const Page* page, const void* p) noexcept { return page->page_offset_of(p) < page->span; }

// p is the start of a block carved from the page.
inline bool is_carved_block(const Page* page, const void* p) noexcept {
  const uint64_t off = page->page_offset_of(p);
  return off < uint64_t{page->extended.load(std::memory_order_relaxed)} * page->block_size &&
         ((off * page->reciprocal) >> 32) * page->block_size == off;
}

inline void Engine::set_link(const Page* page, Block* block, const Block* next) const noexcept {
  block->link = hardened_ ? encode_link(page->link_key, next) : reinterpret_cast<uintptr_t>(next);
}

UNIPOOL_ALWAYS_INLINE uint32_t Engine::push_local(Page* page, Block* block) noexcept {
  set_link(page, block, page->free);
  block->cookie = reinterpret_cast<uintptr_t>(block) ^ secret_;
  mark_block_free(block);
  page->free = block;
  const uint32_t used = page->used.load(std::memory_order_relaxed) - 1;
  page->used.store(used, std::memory_order_relaxed);
  return used;
}

UNIPOOL_ALWAYS_INLINE void Engine::take_local(Page* page, Block* b, Block* next) noexcept {
  page->free = next;
  b->cookie = 0;
  mark_block_live(b);
  page->used.store(page->used.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
}

template <bool kHardened>
inline bool Engine::next_as(const Page* page, const Block* block, Block** next) const noexcept {
  if constexpr (kHardened) {
    return next_checked(page, block, next);
  } else {
    // One compare (and one for the end) on the allocation fast path: enough
    // that a garbage link is reported instead of dereferenced.
    *next = reinterpret_cast<Block*>(block->link);
    return in_page_span(page, *next) || *next == nullptr;
  }
}

inline bool Engine::next_of(const Page* page, const Block* block, Block** next) const noexcept {
  return hardened_ ? next_as<true>(page, block, next) : next_as<false>(page, block, next);
}

inline bool Engine::next_checked(const Page* page, const Block* block, Block** next) const noexcept {
  if (block->cookie != (reinterpret_cast<uintptr_t>(block) ^ secret_)) return false;
  *next = hardened_ ? decode_link(page->link_key, block->link) : reinterpret_cast<Block*>(block->link);
  return *next == nullptr || is_carved_block(page, *next);
}

}  // namespace unipool::host
