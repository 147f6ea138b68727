// unipool host: arenas: reserve once, commit and pin in chunks, carve with
// the range allocator, decommit free chunks.
#include "host/arena.hpp"

#include <new>

#include "backend/host_pinner.hpp"
#include "backend/pin_pieces.hpp"
#include "core/assert.hpp"
#include "host/layout.hpp"
#include "host/leak_roots.hpp"
#include "host/thread_state.hpp"

namespace unipool::host {
namespace {

constexpr uint64_t kBlockAlignment = 64;

}  // namespace

backend::os::CommitResult ArenaSettings::commit_range(char* base, uint64_t offset, uint64_t bytes) const noexcept {
  backend::os::CommitOptions options = commit;
  if (offset + bytes > thp_after) options.thp_from = offset >= thp_after ? 0 : thp_after - offset;
  return backend::os::commit(base + offset, bytes, options);
}

// The reservation, halved while mmap refuses it (the address space is
// limited or crowded) down to settings.min_reserve, so an arena is made if
// any usable size fits.
char* Arena::reserve_range(const ArenaSettings& settings) noexcept {
  const uint64_t floor = settings.min_reserve != 0 ? settings.min_reserve : settings.reserve;
  for (uint64_t bytes = settings.reserve;; bytes = bytes / 2 / settings.chunk * settings.chunk) {
    reserved_ = bytes / kSegmentSize * kSegmentSize;
    auto* base = static_cast<char*>(backend::os::reserve(reserved_, kSegmentSize));
    if (base != nullptr) return base;
    if (bytes / 2 < floor) {
      reserved_ = 0;
      return nullptr;
    }
  }
}

bool Arena::init(const ArenaSettings& settings) noexcept {
  chunk_ = settings.chunk;
  ahead_target_ = 2 * chunk_;
  base_ = reserve_range(settings);
  if (base_ == nullptr) return false;
  const uint64_t slots = reserved_ / kSegmentSize;
  const uint64_t chunks = reserved_ / chunk_;
  meta_bytes_ = round_up(sizeof(RangeAllocator), 64) + slots + chunks;
  meta_ = backend::os::map_metadata(meta_bytes_);
  if (meta_ == nullptr) {
    backend::os::release(base_, reserved_);
    base_ = nullptr;
    reserved_ = 0;
    return false;
  }
  auto* bytes = static_cast<char*>(meta_);
  slots_ = reinterpret_cast<std::atomic<uint8_t>*>(bytes + round_up(sizeof(RangeAllocator), 64));
  chunks_ = reinterpret_cast<uint8_t*>(slots_) + slots;
  RangeAllocatorOptions options;
  options.alignment = kBlockAlignment;
  // The range allocator keeps its nodes in std::vectors; under a malloc
  // replacement those allocations are served on the side (thread_state.hpp).
  InternalScope internal;
  add_leak_root(meta_, sizeof(RangeAllocator));
  try {
    ranges_ = new (meta_) RangeAllocator(0, options);
  } catch (...) {
    remove_leak_root(meta_, sizeof(RangeAllocator));
    backend::os::release(base_, reserved_);
    backend::os::unmap_metadata(meta_, meta_bytes_);
    base_ = nullptr;
    meta_ = nullptr;
    return false;
  }
  return true;
}

void Arena::destroy(const ArenaSettings& settings) noexcept {
  if (meta_ == nullptr) return;
  if (settings.pinner != nullptr) {
    for (uint64_t c = 0; c < committed_end_ / chunk_; ++c) {
      if (chunks_[c] & kRegistrationStart) settings.pinner->unpin(base_ + c * chunk_);
    }
  }
  backend::os::release(base_, reserved_);
  {
    InternalScope internal;
    ranges_->~RangeAllocator();
  }
  remove_leak_root(meta_, sizeof(RangeAllocator));
  backend::os::unmap_metadata(meta_, meta_bytes_);
  // Field by field: the mutex is an atomic (and nobody holds it here).
  base_ = nullptr;
  ranges_ = nullptr;
  reserved_ = chunk_ = 0;
  slots_ = nullptr;
  chunks_ = nullptr;
  meta_ = nullptr;
  meta_bytes_ = committed_end_ = committed_bytes_ = pinned_bytes_ = trim_floor_ = handed_high_ = 0;
  pending_ = ahead_target_ = 0;
  ahead_failed_ = false;
}

// Built in place: the range allocator's result, stored field by field, was
// copied with 16-byte loads, which no one 8-byte store can forward to: each
// such load waited until the stores reached the cache. False when the range
// allocator could not grow its own metadata (it throws); *out is then unset.
bool Arena::take_range(uint64_t size, uint64_t alignment, RangeAllocation* out) noexcept {
  try {
    new (out) RangeAllocation(ranges_->allocate(size, alignment > kBlockAlignment ? alignment : 0));
  } catch (...) {
    return false;
  }
  return true;
}

Status Arena::allocate(uint64_t size, uint64_t alignment, uint64_t headroom, const ArenaSettings& settings,
                       RangeAllocation* out, ArenaDelta* delta, Message* why, ArenaBlocked* blocked,
                       bool* fresh) noexcept {
  *blocked = ArenaBlocked::no;
  InternalScope internal;  // node vectors may grow
  uint64_t grown = 0;      // by earlier attempts: taken from the headroom
  for (int attempt = 0; attempt < 3; ++attempt) {
    if (!take_range(size, alignment, out)) return Status::out_of_space;
    const RangeAllocation& r = *out;
    if (r) {
      const uint64_t extent = r.extent;
      recommit(r.offset, extent, settings, delta);
      *fresh = r.offset >= handed_high_;
      if (r.offset + extent > handed_high_) handed_high_ = r.offset + extent;
      return Status::ok;
    }
    if (r.status != Status::out_of_space && r.status != Status::too_large) {
      why->add("the range allocator refused: ").add(to_string(r.status));
      return r.status;
    }
    if (pending_ != 0) {
      // The pinning thread is registering the chunks at the end: growing past
      // them would need them first. The caller waits for them and retries.
      *blocked = ArenaBlocked::pinning;
      why->add("the pinning thread is registering the next chunks");
      return Status::out_of_space;
    }
    // Grow just enough for the request to fit at the end: from the start of
    // the trailing free range (or the end), aligned, plus the size.
    const uint64_t align = alignment > kBlockAlignment ? alignment : kBlockAlignment;
    const uint64_t start = round_up(committed_end_ - ranges_->trailing_free(), align);
    const uint64_t end = round_up(start + size, kBlockAlignment);
    uint64_t bytes = end > committed_end_ ? round_up(end - committed_end_, chunk_) : chunk_;
    if (attempt > 0) bytes += chunk_;  // a previous estimate fell short
    if (bytes > headroom - grown) {
      *blocked = ArenaBlocked::limit;
      why->add("the pool's limit on committed bytes is reached");
      return Status::out_of_space;
    }
    if (committed_end_ + bytes > reserved_) {
      *blocked = ArenaBlocked::full;
      why->add("the arena's reserved address space is full");
      return Status::out_of_space;
    }
    const Status s = grow(bytes, settings, delta, why);
    if (s != Status::ok) return s;
    grown += bytes;
  }
  why->add("no range fits after growing the arena");
  return Status::out_of_space;
}

Status Arena::allocate_used(uint64_t size, uint64_t alignment, const ArenaSettings& settings, RangeAllocation* out,
                            ArenaDelta* delta, ArenaBlocked* blocked) noexcept {
  *blocked = ArenaBlocked::fresh;
  InternalScope internal;
  if (!take_range(size, alignment, out) || !*out) return Status::out_of_space;
  if (out->offset + out->extent > handed_high_) {
    ranges_->deallocate(out->offset, out->handle);
    return Status::out_of_space;
  }
  *blocked = ArenaBlocked::no;
  recommit(out->offset, out->extent, settings, delta);
  return Status::ok;
}

Status Arena::free(uint64_t offset, uint64_t handle) noexcept {
  InternalScope internal;
  return ranges_->deallocate(offset, handle);
}

// Pins the chunks of a growth at `start` in pieces of at most max_pin bytes
// (whole chunks, at least one) and records each chunk's state. With
// pinned=on a failure undoes the whole growth, uncommitted; with best_effort
// the chunks that failed are served pageable and counted.
Status Arena::pin_growth(char* start, uint64_t bytes, const ArenaSettings& settings, ArenaDelta* delta,
                         Message* why) noexcept {
  UNIPOOL_ASSERT(start >= base_ && (start - base_) % chunk_ == 0 && bytes % chunk_ == 0,
                 "a growth is whole chunks of this arena");
  const uint64_t first = static_cast<uint64_t>(start - base_) / chunk_;
  const uint64_t piece = backend::pin_piece_bytes(settings.max_pin, chunk_);
  for (uint64_t done = 0; done < bytes;) {
    const backend::PinProgress p = backend::pin_pieces(*settings.pinner, start + done, bytes - done, piece);
    delta->registrations += p.registrations;
    for (uint64_t off = 0; off < p.pinned_bytes; off += chunk_) {
      chunks_[first + (done + off) / chunk_] = off % piece == 0 ? kRegistrationStart | kPinned : kPinned;
    }
    done += p.pinned_bytes;
    if (done == bytes) break;
    ++delta->pin_failures;
    const uint64_t n = bytes - done < piece ? bytes - done : piece;
    if (settings.pinned == HostPinned::on) {
      // Never hand out memory as pinned that is not: undo the whole growth.
      undo_growth(start, bytes, settings, delta);
      why->add("pinning ")
          .add_dec(n)
          .add(" bytes at ")
          .add_ptr(start + done)
          .add(" failed (pinned=on): ")
          .add(p.failure.message);
      return Status::out_of_space;
    }
    for (uint64_t c = done / chunk_; c < (done + n) / chunk_; ++c) chunks_[first + c] = kPinFailed;
    delta->pageable_fallback += n;
    done += n;
  }
  return Status::ok;
}

void Arena::undo_growth(char* start, uint64_t bytes, const ArenaSettings& settings, ArenaDelta* delta) noexcept {
  const uint64_t first = static_cast<uint64_t>(start - base_) / chunk_;
  for (uint64_t c = first; c < first + bytes / chunk_; ++c) {
    if (settings.pinner != nullptr && (chunks_[c] & kRegistrationStart)) settings.pinner->unpin(base_ + c * chunk_);
    if (state(c) == kPinFailed) delta->pageable_fallback -= chunk_;
    chunks_[c] = kUncommitted;
  }
  backend::os::uncommit(start, bytes);
}

Status Arena::grow(uint64_t bytes, const ArenaSettings& settings, ArenaDelta* delta, Message* why) noexcept {
  char* start = base_ + committed_end_;
  const backend::os::CommitResult committed = settings.commit_range(base_, committed_end_, bytes);
  if (!committed.ok) {
    why->add(committed.what).add(" failed committing ").add_dec(bytes).add(" bytes at ").add_ptr(start)
        .add(" (errno ").add_dec(static_cast<uint64_t>(committed.error)).add(")");
    return Status::out_of_space;
  }
  if (committed.hugetlb_fallback) ++delta->hugetlb_fallbacks;
  const uint64_t first = committed_end_ / chunk_;
  const uint64_t count = bytes / chunk_;
  if (settings.pinner == nullptr) {
    for (uint64_t k = 0; k < count; ++k) chunks_[first + k] = kPageable;
  } else if (pin_growth(start, bytes, settings, delta, why) != Status::ok) {
    return Status::out_of_space;
  }
  uint64_t newly_pinned = 0;
  for (uint64_t k = 0; k < count; ++k) {
    if (state(first + k) == kPinned) newly_pinned += chunk_;
  }
  {
    InternalScope internal;
    if (ranges_->extend(bytes) != Status::ok) {
      undo_growth(start, bytes, settings, delta);
      why->add("the arena's range allocator could not grow");
      return Status::out_of_space;
    }
  }
  __atomic_store_n(&committed_end_, committed_end_ + bytes, __ATOMIC_RELEASE);
  committed_bytes_ += bytes;
  pinned_bytes_ += newly_pinned;
  delta->committed += static_cast<int64_t>(bytes);
  delta->pinned += static_cast<int64_t>(newly_pinned);
  if (settings.pinner != nullptr) {
    // What an allocation had to pin itself, the pinning thread keeps ahead.
    const uint64_t one_registration = backend::pin_piece_bytes(settings.max_pin, chunk_);
    const uint64_t target = bytes < settings.max_pin ? bytes : one_registration;
    if (target > ahead_target_) ahead_target_ = target;
    ahead_failed_ = false;
  }
  return Status::ok;
}

Status Arena::resize(uint64_t offset, uint64_t handle, uint64_t size, const ArenaSettings& settings,
                     ArenaDelta* delta) noexcept {
  InternalScope internal;  // a shrink may need a node
  const uint64_t before = ranges_->allocation_size(offset, handle);
  Status s = Status::out_of_space;
  try {
    s = ranges_->resize(offset, handle, size);
  } catch (...) {
    return Status::out_of_space;
  }
  if (s != Status::ok) return s;
  const uint64_t after = ranges_->allocation_size(offset, handle);
  if (after > before) {
    recommit(offset + before, after - before, settings, delta);
    if (offset + after > handed_high_) handed_high_ = offset + after;
  }
  return Status::ok;
}

void Arena::recommit(uint64_t offset, uint64_t bytes, const ArenaSettings& settings, ArenaDelta* delta) noexcept {
  if (committed_bytes_ == committed_end_) return;  // no chunk is decommitted
  for (uint64_t c = offset / chunk_; c * chunk_ < offset + bytes; ++c) {
    if (state(c) != kDecommitted) continue;
    set_state(c, kPageable);
    committed_bytes_ += chunk_;
    delta->committed += static_cast<int64_t>(chunk_);
    if (settings.commit.first_touch) backend::os::touch_pages(base_ + c * chunk_, chunk_);
  }
}

void Arena::maybe_trim(uint64_t retain, ArenaDelta* delta) noexcept {
  const uint64_t free_committed = free_committed_bytes();
  if (free_committed > retain && free_committed >= trim_floor_ + 2 * chunk_) trim(retain, delta);
}

void Arena::trim(uint64_t retain, ArenaDelta* delta) noexcept {
  if (pinned_bytes_ != 0) return;  // re-pinning costs ~0.1 s/GB: pinned arenas keep their chunks
  ranges_->for_each_range([&](const RangeInfo& r) {
    if (r.used || free_committed_bytes() <= retain) return;
    const uint64_t first = (r.offset + chunk_ - 1) / chunk_;
    const uint64_t end = (r.offset + r.size) / chunk_;
    for (uint64_t c = first; c < end && free_committed_bytes() > retain; ++c) {
      if (state(c) != kPageable) continue;
      backend::os::decommit(base_ + c * chunk_, chunk_);
      set_state(c, kDecommitted);
      committed_bytes_ -= chunk_;
      delta->committed -= static_cast<int64_t>(chunk_);
    }
  });
  trim_floor_ = free_committed_bytes();
}

bool Arena::range_pinned(uint64_t offset, uint64_t bytes) const noexcept {
  if (pinned_bytes_ == 0) return false;
  for (uint64_t c = offset / chunk_; c * chunk_ < offset + bytes; ++c) {
    if (state(c) != kPinned) return false;
  }
  return true;
}

bool Arena::validate(Message* why) const {
  if (meta_ == nullptr) return true;
  if (ranges_->capacity() != committed_end_) {
    why->add("arena: range allocator capacity differs from the committed end");
    return false;
  }
  uint64_t committed = 0, pinned = 0;
  for (uint64_t c = 0; c < committed_end_ / chunk_; ++c) {
    const uint8_t s = state(c);
    if (s == kUncommitted) {
      why->add("arena: chunk ").add_dec(c).add(" below the committed end is uncommitted");
      return false;
    }
    if (s != kDecommitted) committed += chunk_;
    if (s == kPinned) pinned += chunk_;
  }
  for (uint64_t c = committed_end_ / chunk_; c < reserved_ / chunk_; ++c) {
    if (chunks_[c] != kUncommitted) {
      why->add("arena: chunk ").add_dec(c).add(" above the committed end has a state");
      return false;
    }
  }
  if (committed != committed_bytes_ || pinned != pinned_bytes_) {
    why->add("arena: committed or pinned bytes differ from a recount of the chunks");
    return false;
  }
  if (ranges_->used_bytes() > committed_bytes_) {
    why->add("arena: more bytes used than committed");
    return false;
  }
  bool overlap = false;
  ranges_->for_each_range([&](const RangeInfo& r) {
    if (!r.used) return;
    for (uint64_t c = r.offset / chunk_; c * chunk_ < r.offset + r.size; ++c) {
      if (state(c) == kDecommitted) overlap = true;
    }
  });
  if (overlap) {
    why->add("arena: a used range lies over a decommitted chunk");
    return false;
  }
  std::string range_why;
  if (!ranges_->validate(&range_why)) {
    why->add("arena range allocator: ").add(range_why.c_str());
    return false;
  }
  return true;
}

}  // namespace unipool::host
