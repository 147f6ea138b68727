// unipool host: the segments a pool holds (segment_store.hpp).
#include "host/segment_store.hpp"

#include <bit>

namespace unipool::host {

void SegmentStore::link(Segment** list, Segment* seg) noexcept {
  seg->prev = nullptr;
  seg->next = *list;
  if (*list) (*list)->prev = seg;
  *list = seg;
  seg->in_free_list = true;
}

void SegmentStore::unlink(Segment** list, Segment* seg) noexcept {
  if (seg->prev)
    seg->prev->next = seg->next;
  else
    *list = seg->next;
  if (seg->next) seg->next->prev = seg->prev;
  seg->next = seg->prev = nullptr;
  seg->in_free_list = false;
}

Page* SegmentStore::take_page_locked(uint8_t kind) noexcept {
  Segment* seg = free_[kind];
  if (seg == nullptr) return nullptr;
  const uint32_t i = static_cast<uint32_t>(__builtin_ctzll(seg->free_mask));
  seg->free_mask &= ~(uint64_t{1} << i);
  ++seg->pages_in_use;
  if (seg->free_mask == 0) unlink(&free_[kind], seg);
  return &seg->pages[i];
}

Segment* SegmentStore::give_page_locked(Page* page) noexcept {
  Segment* seg = Segment::of(page);
  seg->free_mask |= uint64_t{1} << page->index;
  --seg->pages_in_use;
  if (seg->pages_in_use != 0) {
    if (!seg->in_free_list) link(&free_[seg->kind], seg);
    return nullptr;
  }
  if (seg->in_free_list) unlink(&free_[seg->kind], seg);
  if (cached_count_ < cache_limit_) {
    link(&cached_, seg);
    ++cached_count_;
    return nullptr;
  }
  forget_locked(seg);
  return seg;
}

void SegmentStore::hold_locked(Segment* seg) noexcept {
  seg->all_prev = nullptr;
  seg->all_next = all_;
  if (all_) all_->all_prev = seg;
  all_ = seg;
  ++count_;
}

void SegmentStore::open_locked(Segment* seg) noexcept { link(&free_[seg->kind], seg); }

void SegmentStore::forget_locked(Segment* seg) noexcept {
  if (seg->all_prev)
    seg->all_prev->all_next = seg->all_next;
  else
    all_ = seg->all_next;
  if (seg->all_next) seg->all_next->all_prev = seg->all_prev;
  seg->all_next = seg->all_prev = nullptr;
  --count_;
}

namespace {

bool bad(Message* why, const char* what) {
  why->add("segments: ").add(what);
  return false;
}

// How many segments `list` holds, each checked with on_list(seg); -1 (and
// the reason) when one fails or the list does not end within `most`.
template <class Check>
int64_t list_length(const Segment* list, uint64_t most, Check&& on_list, Message* why) {
  int64_t n = 0;
  for (const Segment* s = list; s != nullptr; s = s->next) {
    if (static_cast<uint64_t>(n) == most) {
      bad(why, "a list longer than the segments held");
      return -1;
    }
    if (!s->in_free_list) {
      bad(why, "a listed segment not marked listed");
      return -1;
    }
    if (!on_list(*s)) return -1;
    ++n;
  }
  return n;
}

}  // namespace

bool SegmentStore::validate_locked(Message* why) const noexcept {
  uint64_t held = 0, idle = 0, open = 0;
  for (const Segment* s = all_; s != nullptr; s = s->all_next) {
    if (++held > count_) return bad(why, "more segments on the list of all than counted");
    if (s->pages_in_use + static_cast<uint32_t>(std::popcount(s->free_mask)) != s->page_count) {
      return bad(why, "pages in use + free pages != pages");
    }
    if (s->pages_in_use == 0)
      ++idle;
    else if (s->free_mask != 0)
      ++open;
    if (s->in_free_list != (s->pages_in_use == 0 || s->free_mask != 0)) {
      return bad(why, "a segment with a free page is not listed, or a full one is");
    }
  }
  if (held != count_) return bad(why, "count differs from the list of all");
  if (idle != cached_count_ || cached_count_ > cache_limit_) {
    return bad(why, "cached count differs from the idle segments, or passes the limit");
  }
  const auto is_idle = [why](const Segment& s) { return s.pages_in_use == 0 || bad(why, "a cached segment in use"); };
  const int64_t cached = list_length(cached_, held, is_idle, why);
  if (cached < 0) return false;
  if (cached != static_cast<int64_t>(idle)) return bad(why, "the cached list misses an idle segment");
  int64_t listed = 0;
  for (uint8_t kind = 0; kind < kSegmentKinds; ++kind) {
    const auto fits = [why, kind](const Segment& s) {
      return (s.kind == kind && s.pages_in_use != 0 && s.free_mask != 0) ||
             bad(why, "a segment on a kind's list of another kind, full or idle");
    };
    const int64_t n = list_length(free_[kind], held, fits, why);
    if (n < 0) return false;
    listed += n;
  }
  if (listed != static_cast<int64_t>(open)) return bad(why, "the kinds' lists miss a segment with a free page");
  return true;
}

}  // namespace unipool::host
