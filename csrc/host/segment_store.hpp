// unipool host: the segments a pool holds, and which of their pages are free.
//
// A segment is a 4 MiB range of an arena cut in pages of one size, its kind
// (layout.hpp). The store keeps three lists of them:
//   - every segment the pool holds (for stats() and validate());
//   - by kind, the segments with a page in use and a free page, where the
//     next page of that kind is taken;
//   - up to a limit, the segments with no page in use, kept for reuse by
//     any kind (the thread-cache policy sets the limit).
// Invariants, whenever the lock is free (validate_locked() checks them; a
// segment open_locked() offers has no page in use until its caller, under
// the same hold of the lock, takes one):
//   - count() segments are held, cached_count() of them cached, at most the
//     limit;
//   - a segment is on its kind's free list iff it has a page in use and a
//     free page, and cached iff it has no page in use;
//   - pages in use + free pages == pages, for every segment.
// Getting a segment's range from an arena and formatting its header, and
// giving the range back, stay the engine's (Engine::new_segment,
// Engine::release_segment in engine_pages.cpp): this type only keeps the
// lists and the page bits. Its lock also guards the pages' formats, which
// stats() and validate() read under it; engine.hpp gives its place in the
// engine's lock order (after the shared classes', before the arenas').
#pragma once

#include <cstdint>

#include "core/thread_safety.hpp"
#include "host/errors.hpp"
#include "host/layout.hpp"
#include "host/lock.hpp"

namespace unipool::host {

class SegmentStore {
 public:
  Mutex& lock() const noexcept UNIPOOL_TSA(lock_returned(lock_)) { return lock_; }
  void set_cache_limit(uint64_t segments) noexcept { cache_limit_ = segments; }

  // A free page of a segment of `kind`, counted in use; nullptr when no
  // segment of that kind has one (the caller adds a segment and asks again).
  Page* take_page_locked(uint8_t kind) noexcept UNIPOOL_REQUIRES(lock_);
  // Page `page` (no longer owned or formatted) free again. Returns its
  // segment when that now has no page in use and the cache is full: the
  // store no longer holds it, and the caller gives its range back.
  Segment* give_page_locked(Page* page) noexcept UNIPOOL_REQUIRES(lock_);

  // A segment new to the pool joins the list of all (its header may still
  // be unformatted); open_locked() then offers its pages.
  void hold_locked(Segment* seg) noexcept UNIPOOL_REQUIRES(lock_);
  // A freshly formatted segment (every page free) joins its kind's list.
  void open_locked(Segment* seg) noexcept UNIPOOL_REQUIRES(lock_);
  // The store lets `seg` go (no page in use, on no list but that of all).
  void forget_locked(Segment* seg) noexcept UNIPOOL_REQUIRES(lock_);

  // A cached segment taken off the cache (still held): the first of the
  // first eight for which prefer(seg) is true, else the first; nullptr when
  // none is cached.
  template <class Prefer>
  Segment* take_cached_locked(Prefer&& prefer) noexcept UNIPOOL_REQUIRES(lock_);

  // The first segment held; each one's all_next leads to the next.
  const Segment* first_locked() const noexcept UNIPOOL_REQUIRES(lock_) { return all_; }
  uint64_t count() const noexcept UNIPOOL_REQUIRES(lock_) { return count_; }
  uint64_t cached_count() const noexcept UNIPOOL_REQUIRES(lock_) { return cached_count_; }
  bool validate_locked(Message* why) const noexcept UNIPOOL_REQUIRES(lock_);

 private:
  static void link(Segment** list, Segment* seg) noexcept;
  static void unlink(Segment** list, Segment* seg) noexcept;

  mutable Mutex lock_;
  Segment* free_[kSegmentKinds] UNIPOOL_GUARDED_BY(lock_) = {};  // by kind: a page in use and a free page
  Segment* cached_ UNIPOOL_GUARDED_BY(lock_) = nullptr;          // no page in use, kept
  Segment* all_ UNIPOOL_GUARDED_BY(lock_) = nullptr;             // every segment held (all_next/all_prev)
  uint64_t cached_count_ UNIPOOL_GUARDED_BY(lock_) = 0;
  uint64_t count_ UNIPOOL_GUARDED_BY(lock_) = 0;
  uint64_t cache_limit_ = 0;  // set once, before any thread uses the pool
};

template <class Prefer>
Segment* SegmentStore::take_cached_locked(Prefer&& prefer) noexcept {
  Segment* seg = cached_;
  int looked = 0;
  for (Segment* s = cached_; s != nullptr && looked < 8; s = s->next, ++looked) {
    if (prefer(*s)) {
      seg = s;
      break;
    }
  }
  if (seg == nullptr) return nullptr;
  unlink(&cached_, seg);
  --cached_count_;
  return seg;
}

}  // namespace unipool::host
