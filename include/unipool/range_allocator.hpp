// unipool: an O(1) allocator of ranges inside [0, capacity).
//
// It manages numbers, never memory: it hands out offsets and the caller maps
// them onto whatever it owns (a pinned host arena, a GPU segment, a file).
//
// Structure (after sebbbi/OffsetAllocator): free ranges are filed in bins of
// float-like sizes (a few mantissa bits per power of two), found through a
// two-level bitmap, and merged with their address neighbours on free.
//
// Placement policy (what differs from the classic allocator):
//  * A request of size n first looks in the bin that *holds* n, the bin a free
//    range of exactly n is filed in, and takes the best fitting range among a
//    bounded number of entries (an exact fit ends the search). This is what
//    makes uniform-size workloads reach the physical limit floor(P/s)*s/P: a
//    freed block of size s is found again by the next request of size s.
//    The classic policy only searches bins whose every range fits, so a freed
//    block of a non-bin size is never reused for its own size (~2/3 util).
//  * Otherwise the first non-empty bin above is taken, again best fit among a
//    bounded number of entries. Sizes are never rounded to bin values (the
//    seed's fix for the 2/3 problem, which caps near 8/9 instead).
//
// Thread safety: none; see LockedRangeAllocator for a mutex-guarded wrapper.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "unipool/status.hpp"

namespace unipool {

struct RangeAllocatorOptions {
  // Power of two. Every size is rounded up to a multiple of it, so every
  // offset is a multiple of it. 1 for byte ranges, 256 for CUDA-style blocks.
  // The rounding is counted: used_bytes() - requested_bytes() is the waste.
  uint64_t alignment = 1;
  // 0: no cap. When set and reached, allocate() fails with
  // Status::allocation_limit; the node pool otherwise grows as needed.
  uint64_t max_allocations = 0;
  // Nodes reserved up front, so the first allocations never touch the heap.
  uint32_t initial_nodes = 1024;
  // How many ranges of one bin a request inspects for the best fit.
  uint32_t fit_scan_limit = 8;
};

// What allocate() returns. `handle` identifies the allocation for free(); it
// carries a generation so a stale handle (double free) is always detected.
struct RangeAllocation {
  static constexpr uint64_t kNoOffset = ~uint64_t{0};
  uint64_t offset = kNoOffset;
  uint64_t handle = 0;
  Status status = Status::out_of_space;

  explicit operator bool() const noexcept { return status == Status::ok; }
};

// One range as seen by for_each_range(): address order, used or free.
struct RangeInfo {
  uint64_t offset;
  uint64_t size;       // extent, a multiple of the alignment
  uint64_t requested;  // what the caller asked for (0 for a free range)
  bool used;
};

class RangeAllocator {
 public:
  explicit RangeAllocator(uint64_t capacity, RangeAllocatorOptions options = {});

  RangeAllocator(RangeAllocator&&) noexcept = default;
  RangeAllocator& operator=(RangeAllocator&&) noexcept = default;
  RangeAllocator(const RangeAllocator&) = delete;
  RangeAllocator& operator=(const RangeAllocator&) = delete;

  // Returns an offset aligned to max(alignment, options.alignment).
  // `alignment` must be 0 (the pool's) or a power of two.
  RangeAllocation allocate(uint64_t size, uint64_t alignment = 0);

  // Status::not_live for a handle that is not a live allocation at that offset
  // (double free, never allocated, interior offset); nothing changes then.
  Status free(uint64_t offset, uint64_t handle);
  Status free(const RangeAllocation& a) { return free(a.offset, a.handle); }

  // The extent (aligned size) of a live allocation, 0 if it is not live.
  uint64_t allocation_size(uint64_t offset, uint64_t handle) const;

  // Appends `bytes` of address space at the end (an expandable segment that
  // grew). Rounded down to the alignment.
  Status extend(uint64_t bytes);

  uint64_t capacity() const noexcept { return capacity_; }
  uint64_t alignment() const noexcept { return options_.alignment; }
  uint64_t used_bytes() const noexcept { return used_bytes_; }
  uint64_t requested_bytes() const noexcept { return requested_bytes_; }
  uint64_t free_bytes() const noexcept { return capacity_ - used_bytes_; }
  uint64_t live_allocations() const noexcept { return live_allocations_; }
  uint64_t free_ranges() const noexcept { return free_ranges_; }
  // Size of the largest free range; scans one bin, O(entries in that bin).
  uint64_t largest_free() const noexcept;
  // 1 - largest_free / free_bytes; 0 when nothing is free.
  double fragmentation() const noexcept;
  // Size of the free range ending at capacity(), 0 if the last range is used.
  uint64_t trailing_free() const noexcept;

  // Calls f for every range in address order.
  void for_each_range(const std::function<void(const RangeInfo&)>& f) const;

  // Checks every invariant: ranges tile [0, capacity) with neighbour links
  // consistent both ways, no two adjacent free ranges, every free range filed
  // in the bin of its size and only there, bitmaps match the bins, counters
  // match a recount. Returns true when all hold; otherwise *why says which.
  bool validate(std::string* why = nullptr) const;

 private:
  // A range of the address space: used, free (filed in a bin), or unused (a
  // spare node on the unused list). Links are node indices, so the node pool
  // can grow without invalidating them.
  struct Node {
    uint64_t offset = 0;
    uint64_t size = 0;
    uint64_t requested = 0;
    uint32_t prev_addr = kNone, next_addr = kNone;  // address-order neighbours
    uint32_t prev_free = kNone, next_free = kNone;  // bin list / unused list
    uint32_t generation = 0;  // bumped on every allocation of this node
    enum State : uint32_t { unused, free, used } state = unused;
  };
  static constexpr uint32_t kNone = ~uint32_t{0};

  uint32_t acquire_node();
  void release_node(uint32_t index);
  void file_free(uint32_t index);
  void unfile_free(uint32_t index);
  uint32_t best_fit_in_bin(uint32_t bin, uint64_t need) const;
  uint32_t find_range(uint64_t need) const;
  bool carve(uint32_t index, uint64_t head, uint64_t size);
  void absorb_next(uint32_t index);
  uint32_t node_for(uint64_t offset, uint64_t handle) const;

  RangeAllocatorOptions options_;
  uint64_t capacity_ = 0;
  uint64_t used_bytes_ = 0;
  uint64_t requested_bytes_ = 0;
  uint64_t live_allocations_ = 0;
  uint64_t free_ranges_ = 0;
  std::vector<Node> nodes_;
  uint32_t unused_nodes_ = kNone;  // singly linked through Node::next_free
  uint32_t last_node_ = kNone;     // the range that ends at capacity_
  uint64_t top_mask_ = 0;  // bit g: some bin of group g is non-empty
  std::vector<uint32_t> leaf_mask_;  // per group: bit i = bin (g, i) non-empty
  std::vector<uint32_t> bin_head_;   // first free range of each bin
};

}  // namespace unipool
