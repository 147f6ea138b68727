// unipool device pool: an arena is one stretch of device address space with
// its own range allocator: a plain segment (one backend allocation), or the
// reserved virtual range of an expandable segment, mapped from offset 0 up to
// `mapped` in granules.
//
// Free ranges of an arena belong to its owner stream: reusable there at once
// (stream order makes it safe), by other streams only once the owner's
// "marker" fence, recorded after the arena's last free, has completed.
#pragma once

#include <cstdint>
#include <vector>

#include "device/size_policy.hpp"
#include "unipool/fence.hpp"
#include "unipool/range_allocator.hpp"

namespace unipool::device {

struct StreamState;

struct Arena {
  Arena(uint32_t id_, Kind kind_, bool expandable_, StreamState* owner_, char* base_, uint64_t size_,
        RangeAllocatorOptions options)
      : id(id_), kind(kind_), expandable(expandable_), owner(owner_), base(base_), size(size_),
        ranges(size_, options) {}

  uint32_t id;
  Kind kind;
  bool expandable;
  bool whole_only = false;  // a segment of a request >= max_split_size: never split
  StreamState* owner;
  char* base;
  uint64_t size;            // plain: segment bytes; expandable: reserved bytes
  RangeAllocator ranges;
  uint64_t last_free_seq = 0;  // pool-wide free sequence number of the last free here

  // Expandable only: [0, mapped) is backed by memory. `transition` is set
  // while a thread maps or unmaps at the end (outside the pool lock); others
  // needing that end wait for it. `unpublished` counts ranges carved by a
  // thread that is still waiting for its growth.
  uint64_t granule = 0;
  uint64_t mapped = 0;
  bool transition = false;
  uint32_t unpublished = 0;

  uint64_t reserved_bytes() const noexcept { return expandable ? mapped : size; }
  bool contains(uint64_t address) const noexcept {
    const auto b = reinterpret_cast<uint64_t>(base);
    return address >= b && address < b + size;
  }
  // Where `mapped` could shrink to: the granule boundary at or after the start
  // of the free range that ends the arena.
  uint64_t releasable_end() const noexcept {
    const uint64_t tail = ranges.trailing_free();
    if (tail == 0) return mapped;
    const uint64_t end = round_up(size - tail, granule);
    return end < mapped ? end : mapped;
  }
  // Inactive split blocks, as PyTorch counts them: free blocks of a plain
  // segment that has active ones. (PyTorch leaves expandable segments out.)
  int64_t split_count() const noexcept {
    if (expandable || ranges.live_allocations() == 0) return 0;
    return static_cast<int64_t>(ranges.free_ranges());
  }
  int64_t split_bytes() const noexcept {
    if (expandable || ranges.live_allocations() == 0) return 0;
    return static_cast<int64_t>(ranges.free_bytes());
  }
};

// Per stream: the plain arenas it owns (per kind), its expandable arenas, and
// its marker fence.
struct StreamState {
  StreamHandle stream = 0;
  std::vector<uint32_t> arenas[2];  // plain arenas, by Kind
  uint32_t hint[2] = {kNoArena, kNoArena};  // where the last block came from / went to
  uint32_t expandable[2] = {kNoArena, kNoArena};
  FenceId marker = kNoFence;  // recorded on `stream`, pending
  uint64_t marker_seq = 0;    // free sequence number the marker covers
  uint64_t settled_seq = 0;   // frees up to this are known to be past

  static constexpr uint32_t kNoArena = ~uint32_t{0};
};

}  // namespace unipool::device
