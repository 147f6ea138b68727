// unipool host: how small and middle blocks sit in memory.
//
// A segment is a 4 MiB, 4 MiB-aligned block of an arena. Its header (this
// struct) holds the descriptors of its pages; the pages follow: 64 pages of
// 64 KiB (small classes) or 16 pages of 256 KiB (middle classes). A page holds
// blocks of one size class. From any block address the free path finds the
// segment by masking and the page by a shift: no search, no registry.
//
// A free block holds the link to the next block of its list (plain, or
// encoded with its page's key under hardened=on: free_link.hpp) and a cookie
// (its address mixed with the pool's secret); a live block's cookie word is
// cleared when it is handed out. The slow paths tell a double free from a first one by the
// cookie. The owner's fast free path must not read the block (a cold line that
// it otherwise only writes), so each page also keeps a bitmap in the segment
// header:
// bit i is set while block i is on the page's local free list or in its
// owner's block cache (block_cache.hpp). Together with "no remote frees
// pending" (xfree empty) a clear bit proves the block live.
#pragma once

#include <atomic>
#include <cstdint>

#include "core/align.hpp"

namespace unipool::host {

class Engine;
struct Heap;
struct ThreadState;

inline constexpr unsigned kSegmentShift = 22;
inline constexpr uint64_t kSegmentSize = uint64_t{1} << kSegmentShift;
inline constexpr unsigned kSmallPageShift = 16;   // 64 KiB
inline constexpr unsigned kMiddlePageShift = 18;  // 256 KiB
inline constexpr uint32_t kMaxPagesPerSegment = 64;
// The header: the Segment struct, then the pages' free bitmaps, one slot of
// kBitmapBytes per page (a 64 KiB page of 16-byte blocks needs all 512 bytes).
// Side by side they stay cached; at the pages' tails, 64 KiB apart, they
// would all fall into the same few cache sets.
inline constexpr uint64_t kSegmentBitmapsOffset = 12 << 10;
inline constexpr uint64_t kBitmapBytes = 512;
// The first page starts after the header, on a 4 KiB boundary (so every
// class alignment up to 4 KiB holds in page 0 too).
inline constexpr uint64_t kSegmentHeaderBytes = kSegmentBitmapsOffset + 64 * kBitmapBytes;

struct Block {
  uintptr_t link;    // the next free block: read it with Engine::next_of, never directly
  uintptr_t cookie;  // address ^ pool secret while free, 0 while live
};

// Who may touch a page's free list.
inline constexpr uintptr_t kOwnerNone = 0;    // page not formatted
inline constexpr uintptr_t kOwnerShared = 1;  // the shared class lists, under their lock
// Otherwise: the ThreadState* of the owning thread.

struct alignas(64) Page {
  // ---- line 0: the owner's fast paths --------------------------------------
  Block* free = nullptr;                 // owner only (or the class lock)
  std::atomic<uint32_t> used{0};         // live blocks; written by the owner only
  uint32_t block_size = 0;
  uint32_t reciprocal = 0;               // ceil(2^32 / block_size) (<= 2^28)
  uint32_t span = 0;                     // capacity * block_size: the bytes its blocks may occupy
  char* start = nullptr;                 // first block
  std::atomic<uintptr_t> owner{kOwnerNone};
  std::atomic<Heap*> heap{nullptr};      // owning heap (nullptr when shared)
  std::atomic<uint32_t> extended{0};     // blocks carved so far (bump)
  uint32_t capacity = 0;                 // blocks that fit
  uint8_t cls = 0;
  uint8_t in_full = 0;                   // on its list's full side
  uint8_t kind = 0;                      // 0 small, 1 middle (the segment's)
  uint8_t index = 0;                     // in its segment
  // A local free that leaves this many blocks live hands the page to the
  // shared lists (thread_cache=size: engine_small.cpp); ~0 otherwise.
  uint32_t shed_at = ~uint32_t{0};
  // At most shed_at live blocks (a drain of the block cache can step over
  // the exact count a single free meets).
  bool below_shed(uint32_t live) const noexcept { return live <= shed_at && shed_at != ~uint32_t{0}; }
  // ---- line 1: list links and remote frees ---------------------------------
  Page* next = nullptr;
  Page* prev = nullptr;
  std::atomic<Block*> xfree{nullptr};    // frees by other threads (lock-free push)
  uint64_t link_key = 0;                 // hardened=on: encodes the links of its blocks (set once per segment)

  // A plain load first: most pages have no remote frees, and an exchange
  // would take the line exclusive every time.
  Block* take_remote() noexcept {
    if (xfree.load(std::memory_order_relaxed) == nullptr) return nullptr;
    return xfree.exchange(nullptr, std::memory_order_acquire);
  }
  uint64_t* free_bitmap() const noexcept {
    const uintptr_t segment = align_down(reinterpret_cast<uintptr_t>(this), kSegmentSize);
    return reinterpret_cast<uint64_t*>(segment + kSegmentBitmapsOffset + uint64_t{index} * kBitmapBytes);
  }
  // Block i's bit counted from the segment's first bitmap: with the block's
  // address it finds the bit without reading the page (segment_mark_live).
  uint32_t segment_bit(uint32_t i) const noexcept { return uint32_t{index} * uint32_t{kBitmapBytes * 8} + i; }
  uint32_t index_of(const void* p) const noexcept {
    return static_cast<uint32_t>((page_offset_of(p) * reciprocal) >> 32);
  }
  // Written by the owner only (a relaxed load and store, no locked
  // instruction); atomic so that a free from another thread may read a bit
  // to tell a double free (check_block).
  bool bit_is_free(uint32_t i) const noexcept {
    return (__atomic_load_n(&free_bitmap()[i >> 6], __ATOMIC_RELAXED) >> (i & 63)) & 1;
  }
  void mark_free(uint32_t i) noexcept { set_bit(&free_bitmap()[i >> 6], i & 63); }
  void mark_live(uint32_t i) noexcept { clear_bit(&free_bitmap()[i >> 6], i & 63); }
  // The owner's writes: a relaxed load and store, no locked instruction.
  static void set_bit(uint64_t* word, uint32_t bit) noexcept {
    __atomic_store_n(word, __atomic_load_n(word, __ATOMIC_RELAXED) | (uint64_t{1} << bit), __ATOMIC_RELAXED);
  }
  static void clear_bit(uint64_t* word, uint32_t bit) noexcept {
    __atomic_store_n(word, __atomic_load_n(word, __ATOMIC_RELAXED) & ~(uint64_t{1} << bit), __ATOMIC_RELAXED);
  }
  uint64_t page_offset_of(const void* p) const noexcept {
    return reinterpret_cast<uintptr_t>(p) - reinterpret_cast<uintptr_t>(start);
  }
};
static_assert(sizeof(Page) == 128);

// An intrusive doubly linked list of pages (a heap's or shared class's).
struct PageList {
  Page* head = nullptr;
  Page* tail = nullptr;
  uint32_t count = 0;

  void push(Page* p) noexcept {
    p->prev = nullptr;
    p->next = head;
    if (head) head->prev = p;
    else tail = p;
    head = p;
    ++count;
  }
  // At the far end: a page that just left the full list has one free block;
  // taken at once it would be full again after one allocation. Queued behind
  // the others it gathers frees first (mimalloc's queues do the same).
  void push_back(Page* p) noexcept {
    p->next = nullptr;
    p->prev = tail;
    if (tail) tail->next = p;
    else head = p;
    tail = p;
    ++count;
  }
  void remove(Page* p) noexcept {
    if (p->prev) p->prev->next = p->next;
    else head = p->next;
    if (p->next) p->next->prev = p->prev;
    else tail = p->prev;
    p->next = p->prev = nullptr;
    --count;
  }
  Page* pop() noexcept {
    Page* p = head;
    if (p) remove(p);
    return p;
  }
};

struct Segment {
  uintptr_t magic;            // kSegmentMagic ^ address ^ secret
  Engine* engine;
  uint8_t kind;               // 0 small pages, 1 middle pages
  uint8_t page_shift;
  uint32_t page_count;
  uint32_t pages_in_use;      // formatted for a class or cached by a heap
  uint64_t free_mask;         // bit i: page i is free in the segment
  uint64_t range_offset;      // in the arena's range allocator
  uint64_t range_handle;
  uint32_t arena;             // index in the engine's arenas
  Segment* next;              // the engine's list of segments with free pages (or cached)
  Segment* prev;
  Segment* all_next;          // the engine's list of every segment it holds
  Segment* all_prev;
  bool in_free_list;
  alignas(64) Page pages[kMaxPagesPerSegment];

  static Segment* of(const void* p) noexcept {
    return reinterpret_cast<Segment*>(align_down(reinterpret_cast<uintptr_t>(p), kSegmentSize));
  }
  Page* page_of(const void* p) noexcept {
    return &pages[(reinterpret_cast<uintptr_t>(p) - reinterpret_cast<uintptr_t>(this)) >> page_shift];
  }
  char* page_start(uint32_t i) noexcept {
    char* base = reinterpret_cast<char*>(this) + (uint64_t{i} << page_shift);
    return i == 0 ? base + kSegmentHeaderBytes : base;
  }
  uint64_t page_bytes(uint32_t i) const noexcept {
    const uint64_t full = uint64_t{1} << page_shift;
    return i == 0 ? full - kSegmentHeaderBytes : full;
  }
};
static_assert(sizeof(Segment) <= kSegmentBitmapsOffset);
static_assert((kSegmentHeaderBytes & 4095) == 0);
// The most blocks of a page (16-byte blocks in a 64 KiB page) fit its bitmap.
static_assert((uint64_t{1} << kSmallPageShift) / 16 <= kBitmapBytes * 8);

// Clears the free bit `segment_bit` (Page::segment_bit) of the segment of
// `block`: what the owner's mark_live does, from the block's address alone.
inline void segment_mark_live(const void* block, uint32_t segment_bit) noexcept {
  auto* words =
      reinterpret_cast<uint64_t*>(align_down(reinterpret_cast<uintptr_t>(block), kSegmentSize) + kSegmentBitmapsOffset);
  Page::clear_bit(words + (segment_bit >> 6), segment_bit & 63);
}

inline constexpr uintptr_t kSegmentMagic = 0x756e69706f6f6c53ull;  // "unipoolS"

}  // namespace unipool::host
