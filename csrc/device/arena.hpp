// unipool device pool: an arena is one stretch of device address space with
// its own range allocator: a plain segment (one backend allocation), or the
// reserved virtual range of an expandable segment, mapped granule by granule
// where blocks need memory and unmapped where whole granules are free.
//
// Free ranges of an arena belong to its owner stream: reusable there at once
// (stream order makes it safe), by other streams only once the owner's
// "marker" fence, recorded after the arena's last free, has completed.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "device/size_policy.hpp"
#include "unipool/device_tags.hpp"
#include "unipool/fence.hpp"
#include "unipool/range_allocator.hpp"

namespace unipool::device {

struct StreamState;

struct Arena {
  Arena(uint32_t id_, Kind kind_, bool expandable_, StreamState* owner_, char* base_, uint64_t size_,
        RangeAllocatorOptions options, DeviceTag tag_)
      : id(id_), kind(kind_), expandable(expandable_), tag(tag_), owner(owner_), base(base_), size(size_),
        ranges(size_, options) {}

  uint32_t id;
  Kind kind;
  bool expandable;
  DeviceTag tag;            // of every block in it (and of its owner's StreamState)
  bool whole_only = false;  // a segment of a request >= max_split_size: never split
  StreamState* owner;
  char* base;
  uint64_t size;            // plain: segment bytes; expandable: reserved bytes
  RangeAllocator ranges;
  uint64_t last_free_seq = 0;  // pool-wide free sequence number of the last free here

  // Plain segments: filed in the owner's FitIndex under their largest free
  // range, so a request finds a segment that holds it in O(1).
  static constexpr uint8_t kNotFiled = 0xFF;
  uint64_t largest = 0;
  uint32_t fit_prev = ~uint32_t{0}, fit_next = ~uint32_t{0};
  uint8_t fit_bucket = kNotFiled;

  // Expandable only: which granules are backed by memory. `transition` is
  // set while a thread maps or unmaps granules (outside the pool lock);
  // others needing an unmapped granule wait for it. `unpublished` counts
  // ranges carved by a thread that is still waiting for its growth.
  uint64_t granule = 0;
  std::vector<uint8_t> granule_mapped;
  uint64_t mapped = 0;  // bytes mapped
  uint64_t runs = 0;    // maximal runs of mapped granules: the snapshot's segments
  bool transition = false;
  uint32_t unpublished = 0;

  // Sleep (pool_sleep.cpp): the memory given back while the tag sleeps, to be
  // mapped again at the same addresses on wake. Expandable: granule runs
  // [first, last), unmapped in granule_mapped. Plain: the whole segment.
  std::vector<std::pair<uint64_t, uint64_t>> slept;
  bool plain_asleep = false;
  bool has_slept() const noexcept { return plain_asleep || !slept.empty(); }

  uint64_t reserved_bytes() const noexcept {
    if (expandable) return mapped;
    return plain_asleep ? 0 : size;
  }
  bool contains(uint64_t address) const noexcept {
    const auto b = reinterpret_cast<uint64_t>(base);
    return address >= b && address < b + size;
  }
  void init_granules(uint64_t g) {
    granule = g;
    granule_mapped.assign(size / g, 0);
  }
  bool is_mapped(uint64_t g) const noexcept { return g < granule_mapped.size() && granule_mapped[g] != 0; }
  // True if every granule [offset, offset + bytes) touches is mapped.
  bool range_mapped(uint64_t offset, uint64_t bytes) const noexcept {
    for (uint64_t g = offset / granule, end = (offset + bytes + granule - 1) / granule; g < end; ++g) {
      if (granule_mapped[g] == 0) return false;
    }
    return true;
  }
  // Appends the runs [first, last) of unmapped granules that [offset,
  // offset + bytes) touches.
  void unmapped_runs(uint64_t offset, uint64_t bytes, std::vector<std::pair<uint64_t, uint64_t>>& out) const {
    const uint64_t end = (offset + bytes + granule - 1) / granule;
    for (uint64_t g = offset / granule; g < end;) {
      if (granule_mapped[g] != 0) {
        ++g;
        continue;
      }
      const uint64_t first = g;
      while (g < end && granule_mapped[g] == 0) ++g;
      out.emplace_back(first, g);
    }
  }
  // Marks granules [first, last), all in the other state now, (un)mapped;
  // keeps `mapped` and `runs` (a run flips: 1 - left - right neighbours).
  void set_mapped(uint64_t first, uint64_t last, bool on) noexcept {
    const uint64_t neighbours = (first > 0 && is_mapped(first - 1)) + is_mapped(last);
    for (uint64_t g = first; g < last; ++g) granule_mapped[g] = on ? 1 : 0;
    const uint64_t bytes = (last - first) * granule;
    if (on) {
      mapped += bytes;
      runs = runs + 1 - neighbours;
    } else {
      mapped -= bytes;
      runs = runs + neighbours - 1;
    }
  }
  // Every maximal run [first, last) of mapped granules.
  void mapped_runs(std::vector<std::pair<uint64_t, uint64_t>>& out) const {
    for (uint64_t g = 0; g < granule_mapped.size();) {
      if (!is_mapped(g)) {
        ++g;
        continue;
      }
      const uint64_t first = g;
      while (is_mapped(g)) ++g;
      out.emplace_back(first, g);
    }
  }
  // Runs of mapped granules that lie wholly inside free ranges: what an
  // expandable arena can give back.
  void releasable_runs(std::vector<std::pair<uint64_t, uint64_t>>& out) const {
    if (mapped == 0) return;
    ranges.for_each_range([&](const RangeInfo& r) {
      if (r.used) return;
      const uint64_t first = (r.offset + granule - 1) / granule;
      const uint64_t last = (r.offset + r.size) / granule;
      for (uint64_t g = first; g < last;) {
        if (granule_mapped[g] == 0) {
          ++g;
          continue;
        }
        const uint64_t run = g;
        while (g < last && granule_mapped[g] != 0) ++g;
        out.emplace_back(run, g);
      }
    });
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

// Plain segments of one stream and kind by the size of their largest free
// range: bucket b holds those whose largest free range is in [2^b, 2^(b+1)).
struct FitIndex {
  static constexpr uint32_t kEmpty = ~uint32_t{0};
  uint32_t head[64];
  uint64_t mask = 0;  // bit b: bucket b is not empty
  FitIndex() {
    for (uint32_t& h : head) h = kEmpty;
  }
};

// Per stream and tag (blocks of two tags never share an arena): the plain
// arenas it owns (per kind), its expandable arenas, and its marker fence.
struct StreamState {
  StreamHandle stream = 0;
  DeviceTag tag = kDefaultDeviceTag;
  std::vector<uint32_t> arenas[2];  // plain arenas, by Kind, sorted by size
  FitIndex fit[2];                  // the same arenas by largest free range
  uint32_t hint[2] = {kNoArena, kNoArena};  // where the last block came from / went to
  uint32_t expandable[2] = {kNoArena, kNoArena};
  FenceId marker = kNoFence;  // recorded on `stream`, pending
  uint64_t marker_seq = 0;    // free sequence number the marker covers
  uint64_t settled_seq = 0;   // frees up to this are known to be past

  static constexpr uint32_t kNoArena = ~uint32_t{0};
};

}  // namespace unipool::device
