// unipool host: the small and middle paths behind the fast paths: thread
// heaps (refill, full pages, remote frees), the shared class lists, and the
// hand-back of a heap's pages when its thread exits.
#include <new>

#include "backend/os/os_memory.hpp"
#include "host/engine.hpp"
#include "host/engine_fast.hpp"
#include "host/free_link.hpp"

namespace unipool::host {

// ---- heaps --------------------------------------------------------------------

Heap* Engine::heap_for_thread() noexcept {
  if (slot_ == 0) return nullptr;
  ThreadState* thread = current_thread_state();
  if (thread == nullptr) return nullptr;
  HeapRef& ref = thread->heaps[slot_];
  if (ref.generation == generation_) return ref.heap;
  Heap* heap = nullptr;
  {
    LockGuard lock(heaps_lock_);
    if (free_heaps_ != nullptr) {
      heap = free_heaps_;
      free_heaps_ = heap->next;
    }
  }
  if (heap != nullptr) {
    // Recycled: a thread that read page->heap before the old owner left may
    // still fetch_or into remote_mask, so reset field by field (atomics with
    // atomic stores) rather than construct over it. A stray bit only costs
    // the new owner one empty look at that class.
    heap->reset();
  } else {
    void* memory = backend::os::map_metadata(sizeof(Heap));
    if (memory == nullptr) return nullptr;
    heap = new (memory) Heap{};
  }
  heap->engine = this;
  heap->thread = thread;
  for (uint32_t c = 0; c < kNumClasses; ++c) heap->hot[c].cache_limit = block_cache_limit_[c];
  for (uint32_t c = 0; c < kLargeCacheClasses; ++c) {
    heap->large_cache.limit[c] = large_cache_limit(config_.thread_cache, config_.hardened, c);
  }
  heap->large_cache.budget = large_cache_budget(config_.thread_cache);
  heap->drain_seen = drain_epoch_.load(std::memory_order_relaxed);
  {
    LockGuard lock(heaps_lock_);
    heap->next = heaps_;
    if (heaps_) heaps_->prev = heap;
    heaps_ = heap;
  }
  ref.heap = heap;
  ref.generation = generation_;
  return heap;
}

void Engine::flush_class(Heap* heap, uint32_t cls) noexcept {
  HeapClassHot& hot = heap->hot[cls];
  const uint64_t live = hot.live();
  const auto delta = static_cast<int64_t>(live - hot.flushed_live.load(std::memory_order_relaxed));
  if (delta == 0) return;
  hot.flushed_live.store(live, std::memory_order_relaxed);
  const int64_t bytes = delta * static_cast<int64_t>(kClassSize[cls]);
  counters_.small_flushed.fetch_add(bytes, std::memory_order_relaxed);
  counters_.requested.add(bytes);
  counters_.allocated.add(bytes);
}

// Folding a class's live count into the pool's gauges costs five locked
// read-modify-writes; under churn the count hardly moves between two slow
// calls. So fold only when it moved by a page's worth (or before taking a new
// page, where the peak grows). stats() adds what is not folded, so the
// current figures stay exact; only a peak can lag, by less than that.
void Engine::maybe_flush_class(Heap* heap, uint32_t cls) noexcept {
  const HeapClassHot& hot = heap->hot[cls];
  const uint64_t live = hot.live();
  const auto delta = static_cast<int64_t>(live - hot.flushed_live.load(std::memory_order_relaxed));
  const int64_t bytes = delta * static_cast<int64_t>(kClassSize[cls]);
  if (bytes >= kFlushBytes || bytes <= -kFlushBytes) flush_class(heap, cls);
}

// When a remote free landed on a full page since the last look: the full
// pages that got some go back to the available ones, their frees collected.
// The first of them, or nullptr.
template <class Queue>
Page* Engine::reclaim_full(Queue& q, bool* damaged) noexcept {
  if (!q.take_remote_hint()) return nullptr;
  Page* first = nullptr;
  // Every full page is looked at, even past a damaged one: the hint is
  // spent, and a page left out would keep its remote frees until the owner
  // frees into it.
  for (Page* p = q.lists().full.head; p != nullptr;) {
    Page* next = p->next;
    if (p->xfree.load(std::memory_order_relaxed) != nullptr && collect_remote(p, damaged) > 0) {
      q.lists().full.remove(p);
      p->in_full = 0;
      q.lists().avail.push(p);
      q.avail_changed(+1);
      if (first == nullptr) first = p;
    }
    p = next;
  }
  return *damaged ? nullptr : first;
}

// The one loop behind heap_alloc_slow and shared_alloc: a block from the
// queue's current page, its own list then its remote frees; else, when a
// remote free landed on a full page since the last look, a full page that
// got some (before the current page carves fresh blocks); else fresh blocks
// of the current page; else its next page with free blocks; else a new
// page. An allocation that finds a damaged block fails
// (Status::corrupted), even where other blocks could serve it: the caller
// learns of the corruption. What differs between a thread's heap and the
// shared lists is the Queue's (see the two below).
template <class Queue>
void* Engine::alloc_from_queue(Queue& q) noexcept {
  Page* page = q.current();
  bool damaged = false;
  for (;;) {
    if (page != &g_empty_page) {
      if (page->free == nullptr) collect_remote(page, &damaged);
      if (page->free == nullptr && !damaged) {
        // Blocks other threads gave back first, fresh ones after: carving
        // first would touch new memory while freed blocks wait on full
        // pages (a producer whose consumer frees its blocks kept two pages
        // of each class resident).
        if (Page* back = reclaim_full(q, &damaged)) {
          page = back;
          q.current() = page;
        } else if (!damaged) {
          extend_page(page);
        }
      }
      if (damaged) return nullptr;
      if (page->free != nullptr) {
        Block* b = pop_block(page);  // nullptr: a damaged block, reported
        if (b != nullptr) q.count_alloc();
        return b;
      }
      q.lists().avail.remove(page);
      q.avail_changed(-1);
      page->in_full = 1;
      q.lists().full.push(page);
    }
    reclaim_full(q, &damaged);
    if (damaged) return nullptr;
    page = q.lists().avail.head;
    if (page == nullptr) {
      page = q.refill();
      if (page == nullptr) {
        q.current() = &g_empty_page;
        return nullptr;
      }
      q.lists().avail.push(page);
      q.avail_changed(+1);
    }
    q.current() = page;
  }
}

void* Engine::heap_alloc_slow(Heap* heap, uint32_t cls) noexcept {
  // A thread's heap: its own lists, remote frees flagged by a bit per class.
  struct HeapQueue {
    Engine& engine;
    Heap* heap;
    uint32_t cls;
    Page*& current() { return heap->hot[cls].page; }
    HeapClassLists& lists() { return heap->lists[cls]; }
    void count_alloc() { bump(heap->hot[cls].allocs); }
    void avail_changed(int) {}
    bool take_remote_hint() {
      const uint64_t bit = uint64_t{1} << cls;
      if ((heap->remote_mask.load(std::memory_order_relaxed) & bit) == 0) return false;
      heap->remote_mask.fetch_and(~bit, std::memory_order_acq_rel);
      return true;
    }
    Page* refill() {
      engine.flush_class(heap, cls);
      Page* page = engine.acquire_page(heap, cls);
      if (page != nullptr) bump(lists().refills);
      return page;
    }
  } queue{*this, heap, cls};
  check_drain_epoch(heap);
  maybe_flush_class(heap, cls);
  return alloc_from_queue(queue);
}

void Engine::heap_free_slow(Heap* heap, Page* page) noexcept {
  HeapClassLists& lists = heap->lists[page->cls];
  if (page->in_full) {
    lists.full.remove(page);
    page->in_full = 0;
    lists.avail.push_back(page);
  }
  const uint32_t used = page->used.load(std::memory_order_relaxed);
  if (page == heap->hot[page->cls].page) return;
  if (used == 0) {
    retire_empty_page(heap, page);
  } else if (page->below_shed(used)) {
    shed_page(heap, page);
  }
}

// A page with enough of its blocks free (Page::shed_at: a quarter under
// thread_cache=size, half of a small class's page under performance) goes
// to the shared lists, where any thread that needs a page of its class
// adopts it.
// Threads out of step (one freeing while another allocates) then share free
// blocks instead of each keeping its own: the pool's footprint follows the
// threads' live bytes at the same moment, not the sum of each thread's peak.
// Frees into a shed page take the class lock until someone adopts it.
void Engine::shed_page(Heap* heap, Page* page) noexcept {
  const uint32_t cls = page->cls;
  SharedClass& sc = shared_[cls];
  drain_page(heap, page);
  if (page->used.load(std::memory_order_relaxed) == 0) {  // every live block was a cached one
    retire_empty_page(heap, page);
    return;
  }
  FutexGuard lock(sc.lock);
  heap->lists[cls].avail.remove(page);
  collect_remote(page);
  set_owner(page, nullptr, kOwnerShared);
  collect_remote(page);  // pushes that saw the old owner
  sc.avail.push_back(page);
  sc.adoptable.fetch_add(1, std::memory_order_relaxed);
}

// ---- the shared class lists ---------------------------------------------------

void* Engine::shared_alloc(uint32_t cls) noexcept {
  // The shared lists: under the class's lock, adoptable pages counted, the
  // pool's gauges moved at each allocation (no heap folds them later).
  struct SharedQueue {
    Engine& engine;
    SharedClass& sc;
    uint32_t cls;
    Page*& current() { return sc.page; }
    SharedClass& lists() { return sc; }
    void count_alloc() {
      bump(sc.allocs);
      engine.counters_.requested.add(kClassSize[cls]);
      engine.counters_.allocated.add(kClassSize[cls]);
      engine.counters_.small_flushed.fetch_add(kClassSize[cls], std::memory_order_relaxed);
    }
    void avail_changed(int delta) { sc.adoptable.fetch_add(static_cast<uint32_t>(delta), std::memory_order_relaxed); }
    bool take_remote_hint() { return sc.remote_hint.exchange(false, std::memory_order_acq_rel); }
    Page* refill() {
      Page* page = engine.acquire_page(nullptr, cls);
      if (page != nullptr) sc.refills.fetch_add(1, std::memory_order_relaxed);
      return page;
    }
  } queue{*this, shared_[cls], cls};
  FutexGuard lock(shared_[cls].lock);
  return alloc_from_queue(queue);
}

// ---- frees that the fast path did not take --------------------------------------

void Engine::count_free(uint32_t cls) noexcept {
  const HeapRef& ref = t_thread->heaps[slot_];
  if (slot_ != 0 && ref.generation == generation_) {
    bump(ref.heap->hot[cls].frees);
    return;
  }
  shared_[cls].frees.fetch_add(1, std::memory_order_relaxed);
  counters_.requested.add(-static_cast<int64_t>(kClassSize[cls]));
  counters_.allocated.add(-static_cast<int64_t>(kClassSize[cls]));
  counters_.small_flushed.fetch_sub(kClassSize[cls], std::memory_order_relaxed);
}

Status Engine::free_block(Page* page, Block* block) noexcept {
  count_free(page->cls);
  give_back(t_thread != &g_empty_thread ? reinterpret_cast<uintptr_t>(t_thread) : kOwnerNone, page, block);
  return Status::ok;
}

void Engine::give_back(uintptr_t self, Page* page, Block* block) noexcept {
  const uintptr_t owner = page->owner.load(std::memory_order_acquire);
  if (owner == kOwnerShared) {
    give_back_shared(self, page, block);
  } else if (owner == self) {
    free_local(page->heap.load(std::memory_order_relaxed), page, block);
  } else {
    block->cookie = reinterpret_cast<uintptr_t>(block) ^ secret_;
    push_remote(page, block, block);
  }
}

static_assert(alignof(ThreadState) > kRemotePending, "the flag sits in a ThreadState*'s low bits");

void Engine::push_remote(Page* page, Block* first, Block* last) noexcept {
  // Turn the owner's fast free path away from the page (layout.hpp's
  // PageTag) before the push: until its blocks are on the list the page
  // cannot empty, so the write lands in a live segment. How the flag and a
  // racing collect meet: collect_remote.
  Segment::of(page)->for_each_tag(page, [](PageTag& tag) { tag.set_remote_pending(); });
  Block* head = page->xfree.load(std::memory_order_relaxed);
  do {
    set_link(page, last, head);
  } while (!page->xfree.compare_exchange_weak(head, first, std::memory_order_seq_cst, std::memory_order_relaxed));
  if (head == nullptr) {
    // The first pending blocks: tell whoever owns the page now.
    const uintptr_t owner = page->owner.load(std::memory_order_seq_cst);
    Heap* heap = page->heap.load(std::memory_order_seq_cst);
    if (owner == kOwnerShared || heap == nullptr) {
      shared_[page->cls].remote_hint.store(true, std::memory_order_release);
    } else {
      heap->remote_mask.fetch_or(uint64_t{1} << page->cls, std::memory_order_release);
    }
  }
}

void Engine::give_back_shared(uintptr_t self, Page* page, Block* block) noexcept {
  SharedClass& sc = shared_[page->cls];
  {
    FutexGuard lock(sc.lock);
    if (page->owner.load(std::memory_order_seq_cst) == kOwnerShared) {
      const uint32_t used = push_local(page, block);
      if (page->in_full) {
        sc.full.remove(page);
        page->in_full = 0;
        sc.avail.push_back(page);
        sc.adoptable.fetch_add(1, std::memory_order_relaxed);
      }
      if (used == 0 && page != sc.page && page->xfree.load(std::memory_order_relaxed) == nullptr) {
        sc.avail.remove(page);
        sc.adoptable.fetch_sub(1, std::memory_order_relaxed);
        release_page(page);
      }
      return;
    }
  }
  // Adopted by a heap meanwhile: back the way that owner's pages take it.
  give_back(self, page, block);
}

// ---- giving a heap back -----------------------------------------------------------

void Engine::abandon_pages(Heap* heap) noexcept {
  drain_caches(heap);
  for (uint32_t cls = 0; cls < kNumClasses; ++cls) {
    flush_class(heap, cls);
    HeapClassHot& hot = heap->hot[cls];
    HeapClassLists& lists = heap->lists[cls];
    SharedClass& sc = shared_[cls];
    FutexGuard lock(sc.lock);
    for (PageList* list : {&lists.avail, &lists.full}) {
      while (Page* page = list->pop()) {
        collect_remote(page);
        page->in_full = 0;
        if (page->used.load(std::memory_order_relaxed) == 0) {
          release_page(page);
          continue;
        }
        set_owner(page, nullptr, kOwnerShared);
        collect_remote(page);  // pushes that saw the old owner
        if (page->free != nullptr || page->extended.load(std::memory_order_relaxed) < page->capacity) {
          sc.avail.push(page);
          sc.adoptable.fetch_add(1, std::memory_order_relaxed);
        } else {
          page->in_full = 1;
          sc.full.push(page);
        }
      }
    }
    sc.retired_allocs.fetch_add(hot.allocs.load(std::memory_order_relaxed), std::memory_order_relaxed);
    // The cache is empty (drained above): frees alone balance allocs.
    sc.retired_frees.fetch_add(hot.frees.load(std::memory_order_relaxed), std::memory_order_relaxed);
    hot.allocs.store(0, std::memory_order_relaxed);
    hot.frees.store(0, std::memory_order_relaxed);
    hot.flushed_live.store(0, std::memory_order_relaxed);
    hot.page = &g_empty_page;
    refills_retired_[cls].fetch_add(lists.refills.exchange(0, std::memory_order_relaxed), std::memory_order_relaxed);
  }
  for (PageList& empty : heap->empty) {
    while (Page* page = empty.pop()) release_page(page);
  }
  heap->empty_bytes = 0;
  heap->remote_mask.store(0, std::memory_order_relaxed);
  fold_large(heap);  // its large-block tally into the gauges
}

void Engine::retire_heap(Heap* heap) noexcept {
  abandon_pages(heap);
  LockGuard lock(heaps_lock_);
  if (heap->prev) heap->prev->next = heap->next;
  else heaps_ = heap->next;
  if (heap->next) heap->next->prev = heap->prev;
  heap->prev = nullptr;
  heap->next = free_heaps_;
  free_heaps_ = heap;
}

void Engine::flush_thread_cache() noexcept {
  if (slot_ == 0) return;
  const HeapRef& ref = t_thread->heaps[slot_];
  if (ref.generation != generation_) return;
  abandon_pages(ref.heap);
}

}  // namespace unipool::host
