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
// cleared when it is handed out. The slow paths tell a double free from a
// first one by the cookie.
//
// The owner's fast free path reads neither the block (a cold line that it
// otherwise only writes; but while other threads' frees are pending on the
// page, see PageTag) nor the page descriptor (two lines per page, too many
// to stay cached under a big live set). It reads two things the segment
// header keeps for it:
// - the live bitmap: one bit per 16-byte granule of the segment, set only
//   at the first granule of a block its owner handed out and has not had
//   back (blocks on the local free list, in the owner's block cache,
//   never carved, and every granule inside a block keep a clear bit). On a
//   page its owner formatted, a set bit alone proves "a live block starts
//   here": a 16-aligned pointer inside a block or into the page's tail
//   finds a clear bit, and so does one into the header. (A free page's bits
//   may hold anything until it is formatted: its tag names no owner.) Its
//   place follows from the address (block_bit_word). An emptied page has no
//   bit set, so formatting clears bits but sets none.
// - the page tags (PageTag): each page's owner and its owner's class line,
//   16 bytes per 64 KiB of the segment, 64 tags in 16 lines. A middle page
//   (256 KiB) has four, all alike: a block's tag then follows from its
//   address by a shift, without first reading the segment's page size.
#pragma once

#include <atomic>
#include <cstdint>

#include "core/align.hpp"
#include "host/size_classes.hpp"

namespace unipool::host {

class Engine;
struct Heap;
struct ThreadState;

inline constexpr unsigned kSegmentShift = 22;
inline constexpr uint64_t kSegmentSize = uint64_t{1} << kSegmentShift;
inline constexpr unsigned kSmallPageShift = 16;   // 64 KiB
inline constexpr unsigned kMiddlePageShift = 18;  // 256 KiB
inline constexpr uint32_t kMaxPagesPerSegment = 64;

// A segment's kind: which classes its pages hold, hence their size and
// whether huge_pages=auto advises it (Engine::wants_huge_pages). Dense
// segments (blocks <= 1 KiB, 64 or more to a page but the first) and small
// ones (1-8 KiB) have 64 KiB pages, middle ones 256 KiB. Only dense get huge
// pages: their pages fill densely, and a set of tiny blocks is where page
// walks cost most, while a huge page over sparse pages of larger blocks
// backs 2 MiB the program never asked for.
enum SegmentKind : uint8_t { kDenseSegment = 0, kMiddleSegment = 1, kSmallSegment = 2 };
inline constexpr uint32_t kSegmentKinds = 3;
inline constexpr unsigned page_shift_of(uint8_t kind) noexcept {
  return kind == kMiddleSegment ? kMiddlePageShift : kSmallPageShift;
}
inline uint8_t segment_kind_of(uint32_t cls) noexcept {
  if (cls < kNumDenseClasses) return kDenseSegment;
  return is_small_class(cls) ? kSmallSegment : kMiddleSegment;
}
// The header: the Segment struct, then the live bitmap, a bit per granule
// (32 KiB; the bits of the header's own granules stay clear). In one place
// the bits stay cached; at the pages' tails, 64 KiB apart, they would all
// fall into the same few cache sets.
inline constexpr unsigned kGranuleShift = 4;  // every block starts 16-aligned
inline constexpr uint64_t kSegmentBitmapsOffset = 12 << 10;
inline constexpr uint64_t kBitmapBytes = kSegmentSize >> kGranuleShift >> 3;
// The first page starts after the header, on a 4 KiB boundary (so every
// class alignment up to 4 KiB holds in page 0 too).
inline constexpr uint64_t kSegmentHeaderBytes = kSegmentBitmapsOffset + kBitmapBytes;

// The word of the live bitmap that holds the bit of the block at `a`, and
// the bit in it: 64 granules, 1 KiB of the segment, per word.
inline uint64_t* block_bit_word(uintptr_t a) noexcept {
  return reinterpret_cast<uint64_t*>(align_down(a, kSegmentSize) + kSegmentBitmapsOffset) +
         ((a & (kSegmentSize - 1)) >> (kGranuleShift + 6));
}
inline uint32_t block_bit(uintptr_t a) noexcept { return static_cast<uint32_t>(a >> kGranuleShift) & 63; }

// Written by the owner only (a relaxed load and store, no locked
// instruction); atomic so that a free from another thread may read a bit to
// tell a double free (check_block).
inline bool block_is_live(const void* block) noexcept {
  const auto a = reinterpret_cast<uintptr_t>(block);
  return (__atomic_load_n(block_bit_word(a), __ATOMIC_RELAXED) >> block_bit(a)) & 1;
}
inline void mark_block_live(const void* block) noexcept {
  const auto a = reinterpret_cast<uintptr_t>(block);
  uint64_t* word = block_bit_word(a);
  __atomic_store_n(word, __atomic_load_n(word, __ATOMIC_RELAXED) | (uint64_t{1} << block_bit(a)), __ATOMIC_RELAXED);
}
inline void mark_block_free(const void* block) noexcept {
  const auto a = reinterpret_cast<uintptr_t>(block);
  uint64_t* word = block_bit_word(a);
  __atomic_store_n(word, __atomic_load_n(word, __ATOMIC_RELAXED) & ~(uint64_t{1} << block_bit(a)), __ATOMIC_RELAXED);
}

struct Block {
  uintptr_t link;    // the next free block: read it with Engine::next_of, never directly
  uintptr_t cookie;  // address ^ pool secret while free, 0 while live
};

// Who may touch a page's free list.
inline constexpr uintptr_t kOwnerNone = 0;    // page not formatted
inline constexpr uintptr_t kOwnerShared = 1;  // the shared class lists, under their lock
// Otherwise: the ThreadState* of the owning thread.

struct alignas(64) Page {
  // ---- line 0: what a free reads, written only when the page changes hands
  // or grows. A free by another thread reads these (check_block, give_back)
  // on every block; kept apart from line 1, which the owner writes at each
  // allocation from the page, they stay shared in both cores' caches.
  uint32_t block_size = 0;
  uint32_t reciprocal = 0;               // ceil(2^32 / block_size) (<= 2^28)
  uint32_t span = 0;                     // capacity * block_size: the bytes its blocks may occupy
  uint32_t capacity = 0;                 // blocks that fit
  char* start = nullptr;                 // first block
  std::atomic<uintptr_t> owner{kOwnerNone};
  std::atomic<Heap*> heap{nullptr};      // owning heap (nullptr when shared)
  std::atomic<uint32_t> extended{0};     // blocks carved so far (bump)
  // A local free that leaves this many blocks live hands the page to the
  // shared lists (Engine::shed_threshold); ~0: never.
  uint32_t shed_at = ~uint32_t{0};
  uint64_t link_key = 0;  // hardened=on: encodes the links of its blocks (set once per segment)
  uint8_t cls = 0;
  uint8_t kind = 0;   // its segment's (SegmentKind)
  uint8_t index = 0;  // in its segment
  // ---- line 1: the owner's list state, and remote frees --------------------
  alignas(64) Block* free = nullptr;  // owner only (or the class lock)
  std::atomic<uint32_t> used{0};      // live blocks; written by the owner only
  uint8_t in_full = 0;                // on its list's full side
  Page* next = nullptr;
  Page* prev = nullptr;
  std::atomic<Block*> xfree{nullptr};  // frees by other threads (lock-free push)

  // At most shed_at live blocks (a drain of the block cache can step over
  // the exact count a single free meets).
  bool below_shed(uint32_t live) const noexcept { return live <= shed_at && shed_at != ~uint32_t{0}; }
  // A plain load first: most pages have no remote frees, and an exchange
  // would take the line exclusive every time.
  Block* take_remote() noexcept {
    if (xfree.load(std::memory_order_relaxed) == nullptr) return nullptr;
    return xfree.exchange(nullptr, std::memory_order_acquire);
  }
  const char* block_at(uint32_t i) const noexcept { return start + uint64_t{i} * block_size; }
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

struct HeapClassHot;

// What the owner's fast free path needs of a page, kept apart from its
// descriptor (heap.hpp's hot lines and engine_fast.hpp's free()).
// owner mirrors Page::owner (Engine::set_owner writes both), plus one flag:
// kRemotePending, set by a free from another thread before it pushes onto
// the page's remote list (push_remote), cleared by the owner after it
// takes the list (collect_remote) or by a change of owner. With it set the
// owner's fast free path reads the block's cookie too, which tells a block
// pending on the remote list apart from a live one (Engine::owned_live_block).
// hot: the owning heap's line of the page's class; nullptr for a shared or
// free page (an unformatted page a heap keeps has no set bit, so the fast
// path never reads it).
inline constexpr uintptr_t kRemotePending = 2;  // a ThreadState* is 8-aligned
struct PageTag {
  std::atomic<uintptr_t> owner{kOwnerNone};
  HeapClassHot* hot = nullptr;

  uintptr_t owner_without_flag() const noexcept { return owner.load(std::memory_order_relaxed) & ~kRemotePending; }
  // A plain load first: the flag is usually set already (a run of remote
  // frees) or clear (no remote free), and a locked instruction would take
  // the line from the owner every time.
  void set_remote_pending() noexcept {
    if ((owner.load(std::memory_order_relaxed) & kRemotePending) == 0) {
      owner.fetch_or(kRemotePending, std::memory_order_seq_cst);
    }
  }
  void clear_remote_pending() noexcept {
    if (owner.load(std::memory_order_relaxed) & kRemotePending) {
      owner.fetch_and(~kRemotePending, std::memory_order_seq_cst);
    }
  }
};
static_assert(sizeof(PageTag) == 16);

struct Segment {
  uintptr_t magic;            // kSegmentMagic ^ address ^ secret
  Engine* engine;
  uint8_t kind;  // SegmentKind
  uint8_t page_shift;
  uint32_t page_count;
  uint32_t pages_in_use;      // formatted for a class or cached by a heap
  uint64_t free_mask;         // bit i: page i is free in the segment
  uint64_t range_offset;      // in the arena's range allocator
  uint64_t range_handle;
  uint32_t arena;             // index in the engine's arenas
  Segment* next;              // the segment store's list of its kind, or of cached ones
  Segment* prev;
  Segment* all_next;  // the segment store's list of every segment held
  Segment* all_prev;
  bool in_free_list;  // on one of the store's lists (next/prev)
  bool huge_advised;  // huge_pages=auto advised it (Engine::advise_segment)
  alignas(64) PageTag tags[kMaxPagesPerSegment];
  Page pages[kMaxPagesPerSegment];

  static Segment* of(const void* p) noexcept {
    return reinterpret_cast<Segment*>(align_down(reinterpret_cast<uintptr_t>(p), kSegmentSize));
  }
  uint32_t page_index_of(const void* p) const noexcept {
    return static_cast<uint32_t>((reinterpret_cast<uintptr_t>(p) - reinterpret_cast<uintptr_t>(this)) >> page_shift);
  }
  Page* page_of(const void* p) noexcept { return &pages[page_index_of(p)]; }
  // The tag of the 64 KiB the block at p starts in (its page's, or a copy).
  static uint32_t tag_index_of(const void* p) noexcept {
    return static_cast<uint32_t>(reinterpret_cast<uintptr_t>(p) >> kSmallPageShift) & (kMaxPagesPerSegment - 1);
  }
  // A page's tags: tags_per_page() of them from first_tag(page).
  uint32_t tags_per_page() const noexcept { return 1u << (page_shift - kSmallPageShift); }
  PageTag* first_tag(const Page* page) noexcept { return &tags[uint32_t{page->index} * tags_per_page()]; }
  const PageTag* first_tag(const Page* page) const noexcept { return &tags[uint32_t{page->index} * tags_per_page()]; }
  template <class F>
  void for_each_tag(const Page* page, F f) noexcept {
    PageTag* t = first_tag(page);
    for (uint32_t i = 0, n = tags_per_page(); i < n; ++i) f(t[i]);
  }
  char* page_start(uint32_t i) noexcept {
    char* base = reinterpret_cast<char*>(this) + (uint64_t{i} << page_shift);
    return i == 0 ? base + kSegmentHeaderBytes : base;
  }
  uint64_t page_bytes(uint32_t i) const noexcept {
    const uint64_t full = uint64_t{1} << page_shift;
    return i == 0 ? full - kSegmentHeaderBytes : full;
  }
  // The live bitmap's words of page i: its first granule starts a word
  // (pages start on 1 KiB boundaries), and its last word holds no other
  // page's bits.
  uint64_t* page_bits(uint32_t i) noexcept { return block_bit_word(reinterpret_cast<uintptr_t>(page_start(i))); }
  uint32_t page_bit_words(uint32_t i) const noexcept { return static_cast<uint32_t>(page_bytes(i) >> 10); }
};
static_assert(sizeof(Segment) <= kSegmentBitmapsOffset);
static_assert((kSegmentHeaderBytes & 4095) == 0);
static_assert((kSegmentHeaderBytes & 1023) == 0, "a page's bits start a bitmap word");

inline constexpr uintptr_t kSegmentMagic = 0x756e69706f6f6c53ull;  // "unipoolS"

}  // namespace unipool::host
