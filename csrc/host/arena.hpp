// unipool host: an arena, one reserved range of address space that grows.
//
// The range is reserved once, aligned to the segment size. Its committed
// prefix [0, committed_end) is the capacity of a RangeAllocator: segments
// (4 MiB, 4 MiB-aligned) and large blocks (exact sizes) are carved from it.
// When nothing fits, the arena commits more at the end, in whole chunks, and
// pins the new chunks (one registration per piece of at most max_pin bytes)
// when the pool is pinned. Free whole chunks of pageable arenas can be
// decommitted; a later allocation over them counts them committed again.
// With pin_thread=on the pool's pinning thread grows the arena ahead of
// demand (arena_ahead.cpp): it claims the next chunks, commits and registers
// them without the lock, then appends them, so an allocation that runs past
// the committed end usually finds them free and already pinned.
//
// Not thread-safe: the engine takes `mutex` around every call but init and
// destroy (and the lock-free reads of slot_kind and contains).
#pragma once

#include <atomic>
#include <cstdint>

#include "backend/os/os_memory.hpp"
#include "host/errors.hpp"
#include "host/lock.hpp"
#include "host/layout.hpp"
#include "unipool/host_config.hpp"
#include "unipool/range_allocator.hpp"

namespace unipool::backend {
class HostPinner;
}

namespace unipool::host {

struct ArenaSettings {
  uint64_t reserve = 0;
  uint64_t min_reserve = 0;  // init() halves `reserve` down to this when mmap refuses
  uint64_t chunk = 0;
  uint64_t max_pin = 0;
  HostPinned pinned = HostPinned::off;
  backend::HostPinner* pinner = nullptr;  // null: nothing is pinned
  backend::os::CommitOptions commit;
  // An arena's memory from this offset on is advised to transparent huge
  // pages (huge_pages=auto); ~0: none but what `commit` asks.
  uint64_t thp_after = ~uint64_t{0};
  // Commits [base + offset, + bytes) with `commit`, and advises the part of
  // it past thp_after (a growth may start below and end above it).
  backend::os::CommitResult commit_range(char* base, uint64_t offset, uint64_t bytes) const noexcept;
};

// What one call changed, for the pool's counters.
struct ArenaDelta {
  int64_t committed = 0;
  int64_t pinned = 0;
  uint64_t pageable_fallback = 0;  // bytes left pageable because pinning failed
  uint64_t pin_failures = 0;
  uint64_t registrations = 0;
  uint64_t hugetlb_fallbacks = 0;
};

// Why Arena::allocate could not serve a request without growing further.
enum class ArenaBlocked : uint8_t {
  no,       // it could (or failed for another reason: see the status)
  full,     // the reserved address space is used up
  limit,    // growing would pass the pool's limit on committed bytes
  pinning,  // the pinning thread is registering the chunks at the end
  fresh,    // allocate_used(): only memory never handed out would fit
};

// Chunks the pinning thread committed and registered without the arena's
// lock, before Arena::finish_ahead appends them.
struct AheadWork {
  char* start = nullptr;
  uint64_t bytes = 0;
  backend::os::CommitResult commit;
  bool pinned = false;
  Message why;  // what failed
};

enum : uint8_t { kSlotOther = 0, kSlotSegment = 1 };

// Two cache lines: what every thread's pointer lookup reads (base, size,
// slot map), never written after init; then the lock with the counters
// written under it. With both on one line, each lock by one thread evicted
// the line from the other threads' caches in the middle of their lookups
// (hakmem_mixed, 2 threads: the lock's CAS and locate() were 16% of the run).
class alignas(64) Arena {
 public:
  FutexMutex& mutex() const noexcept { return mutex_; }

  // Reserves the range and maps the arena's own metadata.
  bool init(const ArenaSettings& settings) noexcept;
  // Unpins every registration and returns everything to the OS.
  void destroy(const ArenaSettings& settings) noexcept;

  // [offset, offset + extent) with offset aligned to max(alignment, 64).
  // Commits (and pins) more when needed, at most `headroom` bytes. *fresh:
  // no byte of the range was handed out since it was committed, so it reads
  // zero (calloc need not clear it).
  // *blocked says why growing was not possible (full, or a registration of
  // the pinning thread at the end is in flight: wait for it and retry).
  Status allocate(uint64_t size, uint64_t alignment, uint64_t headroom, const ArenaSettings& settings,
                  RangeAllocation* out, ArenaDelta* delta, Message* why, ArenaBlocked* blocked, bool* fresh) noexcept;
  // The same without growing, and only below the highest range ever handed
  // out (memory the program touched before, unless trimmed since): else
  // out_of_space with *blocked = fresh, nothing changed.
  Status allocate_used(uint64_t size, uint64_t alignment, const ArenaSettings& settings, RangeAllocation* out,
                       ArenaDelta* delta, ArenaBlocked* blocked) noexcept;
  Status free(uint64_t offset, uint64_t handle) noexcept;
  // A used range grown into the free range after it or shrunk in place
  // (RangeAllocator::resize); decommitted chunks it grows over are
  // committed again. Its status, nothing changed on a refusal.
  Status resize(uint64_t offset, uint64_t handle, uint64_t size, const ArenaSettings& settings,
                ArenaDelta* delta) noexcept;
  // Decommits whole free chunks until at most `retain` free bytes stay
  // committed. Pageable arenas only.
  void trim(uint64_t retain, ArenaDelta* delta) noexcept;
  // Trims when the free committed bytes grew past the last trim by 2 chunks.
  void maybe_trim(uint64_t retain, ArenaDelta* delta) noexcept;

  // ---- pinning ahead (pin_thread=on): arena_ahead.cpp ----
  // Bytes the pinning thread should append now: whole chunks, one
  // registration (at most max_pin), until the free range at the end holds
  // the target; 0 when it does, a claim is in flight, the last registration
  // ahead failed with pinned=on (until an allocation grows the arena), or
  // there is no room (reservation, `headroom`).
  uint64_t ahead_wanted(const ArenaSettings& settings, uint64_t headroom) const noexcept;
  // Claims [committed end, + bytes) for the pinning thread; its address.
  char* claim_ahead(uint64_t bytes) noexcept;
  // Without the lock: commits and registers the claimed range (one
  // registration). With pinned=on a failed registration uncommits it again.
  AheadWork prepare_ahead(char* start, uint64_t bytes, const ArenaSettings& settings) const noexcept;
  // Appends the claimed range as prepared: pinned, or pageable and counted
  // (best_effort); with pinned=on a failed one is dropped (Status not ok).
  Status finish_ahead(AheadWork& work, const ArenaSettings& settings, ArenaDelta* delta) noexcept;
  // A forked child: the claim's thread is gone; forget the claim.
  void drop_ahead() noexcept { pending_ = 0; }
  uint64_t pending_ahead() const noexcept { return pending_; }

  bool contains(uintptr_t a) const noexcept { return a - reinterpret_cast<uintptr_t>(base_) < reserved_; }
  bool range_pinned(uint64_t offset, uint64_t bytes) const noexcept;
  uint8_t slot_kind(uintptr_t a) const noexcept {
    return slots_[(a - reinterpret_cast<uintptr_t>(base_)) >> kSegmentShift].load(std::memory_order_relaxed);
  }
  void set_slot(uint64_t offset, uint8_t kind) noexcept {
    slots_[offset >> kSegmentShift].store(kind, std::memory_order_relaxed);
  }

  char* base() const noexcept { return base_; }
  const std::atomic<uint8_t>* slots() const noexcept { return slots_; }
  uint64_t reserved() const noexcept { return reserved_; }
  uint64_t committed_end() const noexcept { return committed_end_; }
  // Without the lock (usable_size of a large block): it only ever grows.
  uint64_t committed_end_unlocked() const noexcept { return __atomic_load_n(&committed_end_, __ATOMIC_ACQUIRE); }
  uint64_t committed_bytes() const noexcept { return committed_bytes_; }
  uint64_t pinned_bytes() const noexcept { return pinned_bytes_; }
  uint64_t used_bytes() const noexcept { return ranges_->used_bytes(); }
  uint64_t free_committed_bytes() const noexcept { return committed_bytes_ - ranges_->used_bytes(); }
  const RangeAllocator& ranges() const noexcept { return *ranges_; }
  // Checks chunk states against the counters and the range allocator.
  bool validate(Message* why) const;

 private:
  enum : uint8_t {
    kUncommitted = 0,
    kPageable = 1,
    kPinned = 2,
    kPinFailed = 3,
    kDecommitted = 4,
    kStateMask = 0x7F,
    kRegistrationStart = 0x80,  // a pin registration begins at this chunk
  };

  char* reserve_range(const ArenaSettings& settings) noexcept;
  bool take_range(uint64_t size, uint64_t alignment, RangeAllocation* out) noexcept;
  Status grow(uint64_t bytes, const ArenaSettings& settings, ArenaDelta* delta, Message* why) noexcept;
  Status pin_growth(char* start, uint64_t bytes, const ArenaSettings& settings, ArenaDelta* delta,
                    Message* why) noexcept;
  // Gives a growth back that cannot be handed out: pieces unpinned, chunks
  // uncommitted, the pageable bytes it counted taken off again.
  void undo_growth(char* start, uint64_t bytes, const ArenaSettings& settings, ArenaDelta* delta) noexcept;
  void recommit(uint64_t offset, uint64_t bytes, const ArenaSettings& settings, ArenaDelta* delta) noexcept;
  uint8_t state(uint64_t chunk) const noexcept { return chunks_[chunk] & kStateMask; }
  void set_state(uint64_t chunk, uint8_t s) noexcept {
    chunks_[chunk] = static_cast<uint8_t>((chunks_[chunk] & kRegistrationStart) | s);
  }

  char* base_ = nullptr;
  RangeAllocator* ranges_ = nullptr;    // lives in meta_
  uint64_t reserved_ = 0;
  uint64_t chunk_ = 0;
  std::atomic<uint8_t>* slots_ = nullptr;  // per 4 MiB: kSlotSegment or not
  uint8_t* chunks_ = nullptr;           // per chunk: state
  void* meta_ = nullptr;
  uint64_t meta_bytes_ = 0;
  alignas(64) mutable FutexMutex mutex_;
  uint64_t committed_end_ = 0;
  uint64_t committed_bytes_ = 0;
  uint64_t pinned_bytes_ = 0;
  uint64_t trim_floor_ = 0;
  // End of the highest range ever handed out: committed memory above it was
  // never written (commit maps zero pages; first touch writes zeros).
  uint64_t handed_high_ = 0;
  // Pinning ahead: bytes claimed past committed_end_ by the pinning thread
  // (0: none); the free bytes it keeps at the end (at least 2 chunks, the
  // largest growth an allocation had to make itself, at most max_pin);
  // set when a registration ahead failed with pinned=on.
  uint64_t pending_ = 0;
  uint64_t ahead_target_ = 0;
  bool ahead_failed_ = false;
};

}  // namespace unipool::host
