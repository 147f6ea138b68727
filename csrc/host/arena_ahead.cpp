// unipool host: growing an arena ahead of demand (pin_thread=on). The
// pinning thread claims the chunks past the committed end under the arena's
// lock, commits and registers them without it (the slow part: ~0.1 s/GB),
// and appends them under the lock again. Until then nobody else commits
// there: an allocation that must grow the arena waits for the claim.
#include "host/arena.hpp"

#include "backend/host_pinner.hpp"
#include "backend/pin_pieces.hpp"
#include "host/thread_state.hpp"

namespace unipool::host {

uint64_t Arena::ahead_wanted(const ArenaSettings& settings, uint64_t headroom) const noexcept {
  if (settings.pinner == nullptr || pending_ != 0 || ahead_failed_ || meta_ == nullptr) return 0;
  const uint64_t trailing = ranges_->trailing_free();
  if (trailing >= ahead_target_) return 0;
  uint64_t bytes = round_up(ahead_target_ - trailing, chunk_);
  const uint64_t one_registration = backend::pin_piece_bytes(settings.max_pin, chunk_);
  if (bytes > one_registration) bytes = one_registration;
  if (bytes > reserved_ - committed_end_) bytes = (reserved_ - committed_end_) / chunk_ * chunk_;
  if (bytes > headroom) bytes = headroom / chunk_ * chunk_;
  return bytes;
}

char* Arena::claim_ahead(uint64_t bytes) noexcept {
  pending_ = bytes;
  return base_ + committed_end_;
}

AheadWork Arena::prepare_ahead(char* start, uint64_t bytes, const ArenaSettings& settings) const noexcept {
  AheadWork work;
  work.start = start;
  work.bytes = bytes;
  work.commit = settings.commit_range(base_, static_cast<uint64_t>(start - base_), bytes);
  if (!work.commit.ok) {
    work.why.add(work.commit.what).add(" failed committing ").add_dec(bytes).add(" bytes ahead at ").add_ptr(start);
    return work;
  }
  InternalScope internal;  // the CUDA runtime may allocate
  const BackendStatus pinned = settings.pinner->pin(start, bytes);
  work.pinned = pinned.is_ok();
  if (!work.pinned) {
    work.why.add("pinning ").add_dec(bytes).add(" bytes ahead at ").add_ptr(start).add(" failed: ").add(pinned.message);
    // Never kept unpinned with pinned=on; the pool never saw these pages.
    if (settings.pinned == HostPinned::on) backend::os::uncommit(start, bytes);
  }
  return work;
}

Status Arena::finish_ahead(AheadWork& work, const ArenaSettings& settings, ArenaDelta* delta) noexcept {
  pending_ = 0;
  if (!work.commit.ok) return Status::out_of_space;
  if (work.commit.hugetlb_fallback) ++delta->hugetlb_fallbacks;
  const uint64_t first = committed_end_ / chunk_;
  const uint64_t count = work.bytes / chunk_;
  if (!work.pinned) {
    ++delta->pin_failures;
    if (settings.pinned == HostPinned::on) {
      ahead_failed_ = true;  // allocations pin for themselves until one succeeds
      return Status::out_of_space;
    }
  }
  {
    InternalScope internal;
    if (ranges_->extend(work.bytes) != Status::ok) {
      if (work.pinned) settings.pinner->unpin(work.start);
      backend::os::uncommit(work.start, work.bytes);
      work.why.add("the arena's range allocator could not grow");
      return Status::out_of_space;
    }
  }
  if (work.pinned) ++delta->registrations;  // counted once it is the arena's
  const uint8_t s = work.pinned ? kPinned : kPinFailed;
  for (uint64_t k = 0; k < count; ++k) chunks_[first + k] = s;
  if (work.pinned) chunks_[first] |= kRegistrationStart;
  __atomic_store_n(&committed_end_, committed_end_ + work.bytes, __ATOMIC_RELEASE);
  committed_bytes_ += work.bytes;
  delta->committed += static_cast<int64_t>(work.bytes);
  if (work.pinned) {
    pinned_bytes_ += work.bytes;
    delta->pinned += static_cast<int64_t>(work.bytes);
  } else {
    delta->pageable_fallback += work.bytes;
  }
  return Status::ok;
}

}  // namespace unipool::host
