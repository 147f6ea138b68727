// unipool host: pages and segments: formatting, bump extension, remote-free
// collection, and the way pages travel between heaps, the shared lists,
// segments and arenas.
#include <new>

#include <cstring>

#include "host/engine.hpp"
#include "host/free_link.hpp"

namespace unipool::host {

Page g_empty_page;

namespace {

// Blocks carved from the bump region at once: about 8 KiB worth, at least 4.
uint32_t extend_count(uint32_t block_size) noexcept {
  const uint32_t n = (8u << 10) / block_size;
  return n < 4 ? 4 : n;
}

}  // namespace

// Page::reciprocal is 32 bits; the smallest class has the largest.
static_assert(kClassReciprocal[0] <= UINT32_MAX);
// Every middle page holds a block of the largest class, page 0 (after the
// segment's header) too.
static_assert(kMiddleLimit <= (uint64_t{1} << kMiddlePageShift) - kSegmentHeaderBytes);
// And every small page a block of the largest small class (page 0: two of
// 8 KiB after the 44 KiB header).
static_assert(kSmallMax <= (uint64_t{1} << kSmallPageShift) - kSegmentHeaderBytes);

void Engine::format_page(Page* page, uint32_t cls) noexcept {
  Segment* seg = Segment::of(page);
  page->cls = static_cast<uint8_t>(cls);
  page->block_size = kClassSize[cls];
  page->reciprocal = static_cast<uint32_t>(kClassReciprocal[cls]);
  page->start = seg->page_start(page->index);
  page->capacity = static_cast<uint32_t>(seg->page_bytes(page->index) / page->block_size);
  page->span = page->capacity * page->block_size;
  page->shed_at = shed_threshold(cls, page->capacity);
  // No block is live yet: every bit of the page clear, its tail's too.
  std::memset(seg->page_bits(page->index), 0, uint64_t{seg->page_bit_words(page->index)} * 8);
  page->free = nullptr;
  page->in_full = 0;
  page->used.store(0, std::memory_order_relaxed);
  page->extended.store(0, std::memory_order_relaxed);
}

// Live blocks at which a local free hands the page to the shared lists
// (shed_page, engine_small.cpp); ~0: never.
// - size: at a quarter free. At half free, rpmalloc_random x4 kept 6% more
//   RSS (2,309 vs 2,170 MiB).
// - performance: at half free, and only pages of small classes (64 KiB).
//   exchange (16 B-8 KiB objects passed between threads) peaked at 35.0 /
//   80.2 MiB where no shedding kept 41.5 / 98.1 MiB (2 / 4 threads), at the
//   same speed. Shedding at a quarter free (size's point) went further (31.1
//   / 68.2 MiB) but cost exchange x4 6% of its speed; middle pages (mid_mt's
//   9-32 KiB classes, 8 to 28 blocks to a page) cross half free so often
//   that mid_mt x2 lost 18%.
uint32_t Engine::shed_threshold(uint32_t cls, uint32_t capacity) const noexcept {
  switch (config_.thread_cache) {
    case HostThreadCache::size: return capacity / 4 * 3;
    case HostThreadCache::performance: return is_small_class(cls) ? capacity / 2 : ~uint32_t{0};
    case HostThreadCache::unlimited:
    case HostThreadCache::none: break;
  }
  return ~uint32_t{0};
}

bool Engine::extend_page(Page* page) noexcept {
  const uint32_t done = page->extended.load(std::memory_order_relaxed);
  if (done >= page->capacity) return false;
  const uint32_t left = page->capacity - done;
  const uint32_t want = extend_count(page->block_size);
  const uint32_t n = left < want ? left : want;
  char* first = page->start + uint64_t{done} * page->block_size;
  Block* head = page->free;
  // Link back to front, so the list runs in address order.
  for (uint32_t i = n; i-- > 0;) {
    auto* b = reinterpret_cast<Block*>(first + uint64_t{i} * page->block_size);
    set_link(page, b, head);
    b->cookie = reinterpret_cast<uintptr_t>(b) ^ secret_;
    head = b;
  }
  page->free = head;
  page->extended.store(done + n, std::memory_order_relaxed);
  return true;
}

// Every link of the remote list gets every check (this is no fast path), and
// a block already free for the owner (its bit clear: on the local list or in
// the block cache) cannot be on this one too. The page's kRemotePending flag
// is cleared after the list is taken: a flag set before the clear either
// came with a push the take got, or leaves a push pending without the flag
// (only the owner's on-the-spot refusal of a second free of that block is
// lost: this walk still reports it); a flag set after it always comes
// before a push that lands after the take. So no flag is left set over an
// empty list, which would make the owner's frees read their blocks.
// A block that fails ends the walk: it and the blocks behind it stay counted
// as used and are never handed out (engine_corruption.cpp).
uint32_t Engine::collect_remote(Page* page, bool* damaged) noexcept {
  Block* list = page->take_remote();
  Segment::of(page)->for_each_tag(page, [](PageTag& tag) { tag.clear_remote_pending(); });
  uint32_t n = 0;
  Block* tail = nullptr;
  for (Block* b = list; b != nullptr;) {
    Block* next = nullptr;
    if (!next_checked(page, b, &next) || !block_is_live(b) || n == page->capacity) {
      // A clear bit: the owner holds it free (its list or block cache) and
      // another thread freed it again.
      report_corruption(page, b, !block_is_live(b));
      if (damaged != nullptr) *damaged = true;
      break;
    }
    mark_block_free(b);
    tail = b;
    ++n;
    b = next;
  }
  if (n == 0) return 0;
  set_link(page, tail, page->free);
  page->free = list;
  page->used.store(page->used.load(std::memory_order_relaxed) - n, std::memory_order_relaxed);
  return n;
}

Block* Engine::pop_block(Page* page) noexcept {
  Block* b = page->free;
  Block* next = nullptr;
  // The fast path's check, so a block it left here fails here too.
  if (!next_of(page, b, &next)) {
    report_corruption(page, b);
    page->free = nullptr;  // the rest of the list is behind the damaged link
    return nullptr;
  }
  take_local(page, b, next);
  return b;
}

// ---- pages between owners ---------------------------------------------------

// Page::heap and Page::owner, and the page's tags (layout.hpp: one per 64
// KiB) with them: the fast free path reads a tag only. Whoever may change the
// owner writes them all (the owner itself, or the class lock's holder for a
// shared page); the tags' kRemotePending flag starts clear.
void Engine::set_owner(Page* page, Heap* heap, uintptr_t owner) noexcept {
  page->heap.store(heap, std::memory_order_seq_cst);
  page->owner.store(owner, std::memory_order_seq_cst);
  HeapClassHot* hot = heap != nullptr && page->cls != kNoClass ? &heap->hot[page->cls] : nullptr;
  Segment::of(page)->for_each_tag(page, [&](PageTag& tag) {
    tag.hot = hot;
    tag.owner.store(owner, std::memory_order_seq_cst);
  });
}

Page* Engine::acquire_page(Heap* heap, uint32_t cls) noexcept {
  const uint8_t kind = segment_kind_of(cls);
  const uintptr_t owner = heap ? reinterpret_cast<uintptr_t>(heap->thread) : kOwnerShared;
  if (heap != nullptr) {
    if (Page* page = heap->empty[kind].pop()) {
      heap->empty_bytes -= Segment::of(page)->page_bytes(page->index);
      LockGuard lock(segments_.lock());  // stats() reads page formats under it
      format_page(page, cls);
      set_owner(page, heap, reinterpret_cast<uintptr_t>(heap->thread));  // still this thread's: a new class line
      return page;
    }
    if (Page* page = take_shared_page(cls, heap->thread, heap)) return page;
  }
  Page* page = nullptr;
  {
    LockGuard lock(segments_.lock());
    page = segments_.take_page_locked(kind);
    if (page == nullptr) {
      if (new_segment(kind) == nullptr) return nullptr;
      page = segments_.take_page_locked(kind);
    }
    format_page(page, cls);
  }
  set_owner(page, heap, owner);
  return page;
}

Page* Engine::take_shared_page(uint32_t cls, ThreadState* thread, Heap* heap) noexcept {
  SharedClass& sc = shared_[cls];
  if (sc.adoptable.load(std::memory_order_relaxed) == 0) return nullptr;
  FutexGuard lock(sc.lock);
  for (Page* page = sc.avail.head; page != nullptr; page = page->next) {
    if (page == sc.page) continue;
    sc.avail.remove(page);
    sc.adoptable.fetch_sub(1, std::memory_order_relaxed);
    set_owner(page, heap, reinterpret_cast<uintptr_t>(thread));
    collect_remote(page);
    return page;
  }
  return nullptr;
}

void Engine::retire_empty_page(Heap* heap, Page* page) noexcept {
  HeapClassLists& lists = heap->lists[page->cls];
  if (page->in_full) lists.full.remove(page);
  else lists.avail.remove(page);
  page->in_full = 0;
  const uint64_t bytes = Segment::of(page)->page_bytes(page->index);
  if (heap->empty_bytes + bytes <= heap_cache_limit_) {
    // Kept by the thread, unformatted: a free into it finds no block.
    LockGuard lock(segments_.lock());
    page->extended.store(0, std::memory_order_relaxed);
    page->free = nullptr;
    page->cls = kNoClass;
    heap->empty[page->kind].push(page);
    heap->empty_bytes += bytes;
    return;
  }
  release_page(page);
}

void Engine::release_page(Page* page) noexcept {
  page->extended.store(0, std::memory_order_relaxed);
  page->free = nullptr;
  page->in_full = 0;
  page->used.store(0, std::memory_order_relaxed);
  set_owner(page, nullptr, kOwnerNone);
  LockGuard lock(segments_.lock());
  if (Segment* idle = segments_.give_page_locked(page)) release_segment(idle);
}

// ---- segments (segments_.lock() held) ---------------------------------------

Segment* Engine::new_segment(uint8_t kind) noexcept {
  Segment* seg = take_cached_segment(kind == kDenseSegment);
  if (seg != nullptr) {
    advise_segment(seg, kind == kDenseSegment);
  } else {
    // Segments go to arena 0 first, where the fast free path looks.
    ArenaGrant g;
    Message why;
    if (arena_allocate(0, kSegmentSize, kSegmentSize, &g, &why) != Status::ok) {
      fail(Status::out_of_space, Message{}.add("unipool host pool: cannot get a segment: ").add(why.c_str()));
      return nullptr;
    }
    const RangeAllocation r = g.range;
    const uint32_t index = g.index;
    arenas_[index].set_slot(r.offset, kSlotSegment);
    seg = reinterpret_cast<Segment*>(arenas_[index].base() + r.offset);
    // Before the first write to it: a page touched before the advice stays
    // a 4 KiB page, and so does the rest of its 2 MiB.
    const bool huge = wants_huge_pages(index, r.offset, kind == kDenseSegment);
    if (huge) backend::os::advise_huge_pages(seg, kSegmentSize);
    seg->huge_advised = huge;
    seg->range_offset = r.offset;
    seg->range_handle = r.handle;
    seg->arena = index;
    segments_.hold_locked(seg);
  }
  seg->magic = kSegmentMagic ^ reinterpret_cast<uintptr_t>(seg) ^ secret_;
  seg->engine = this;
  seg->kind = kind;
  seg->page_shift = static_cast<uint8_t>(page_shift_of(kind));
  seg->page_count = static_cast<uint32_t>(kSegmentSize >> seg->page_shift);
  seg->pages_in_use = 0;
  // The header's granules hold no block: their bits stay clear, so that a
  // pointer into the header fails the fast free path's live test. (An
  // arena range may hold anything before it becomes a segment.)
  std::memset(block_bit_word(reinterpret_cast<uintptr_t>(seg)), 0, kSegmentHeaderBytes >> kGranuleShift >> 3);
  seg->free_mask = seg->page_count == 64 ? ~uint64_t{0} : (uint64_t{1} << seg->page_count) - 1;
  for (PageTag& tag : seg->tags) new (&tag) PageTag{};
  for (uint32_t i = 0; i < seg->page_count; ++i) {
    Page* page = new (&seg->pages[i]) Page{};
    page->index = static_cast<uint8_t>(i);
    page->kind = kind;
    page->link_key = page_link_key(secret_, page);
  }
  segments_.open_locked(seg);
  return seg;
}

// huge_pages=auto's rule for dense segments (host_config.hpp,
// kHostAutoThpSmallAfter; layout.hpp, SegmentKind). Advised while the
// segment holds blocks of up to 1 KiB, past that mark and below the
// arena-wide one (whose advice came at commit), on memory neither pinned nor
// touched at commit: the advice reaches only pages not yet touched, and
// pinned ones never become huge.
bool Engine::wants_huge_pages(uint32_t arena, uint64_t offset, bool dense) const noexcept {
  return dense && config_.huge_pages == HostHugePages::automatic && arena == 0 && offset >= kHostAutoThpSmallAfter &&
         offset < kHostAutoThpAfter && config_.pinned == HostPinned::off && !arena_settings_.commit.first_touch;
}

// A cached segment for a new one of `dense` kind or not: one whose huge page
// advice already fits, if any of the first few does (advise_segment then
// has nothing to undo), else the first.
Segment* Engine::take_cached_segment(bool dense) noexcept {
  return segments_.take_cached_locked(
      [this, dense](const Segment& s) { return s.huge_advised == wants_huge_pages(s.arena, s.range_offset, dense); });
}

// The advice follows a cached segment that changes kind, and goes when the
// range returns to the arena, so large blocks never inherit it. Taking it
// back gives the memory of the segment's pages back too (decommit; the
// header, which holds the segment's place in its arena and lists, stays):
// huge pages already faulted in would stay huge under MADV_NOHUGEPAGE, over
// pages of larger blocks or large blocks that may stay sparse (layout.hpp,
// SegmentKind). A pool whose segments are never advised (pinned,
// first_touch) never decommits here.
static_assert(kSegmentHeaderBytes % 4096 == 0);  // the header's pages stay as they are

void Engine::advise_segment(Segment* seg, bool dense) noexcept {
  const bool want = wants_huge_pages(seg->arena, seg->range_offset, dense);
  if (want == seg->huge_advised) return;
  if (want) {
    backend::os::advise_huge_pages(seg, kSegmentSize);
  } else {
    backend::os::advise_no_huge_pages(seg, kSegmentSize);
    backend::os::decommit(reinterpret_cast<char*>(seg) + kSegmentHeaderBytes, kSegmentSize - kSegmentHeaderBytes);
  }
  seg->huge_advised = want;
}

void Engine::release_segment(Segment* seg) noexcept {
  advise_segment(seg, false);
  FutexGuard lock(arenas_[seg->arena].mutex());
  Arena& arena = arenas_[seg->arena];
  arena.set_slot(seg->range_offset, kSlotOther);
  arena.free(seg->range_offset, seg->range_handle);
  ArenaDelta delta;
  arena.maybe_trim(retain_, &delta);
  counters_.apply(delta);
}

}  // namespace unipool::host
