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
//    bounded number of entries. Sizes are never rounded to bin values
//    (Mooncake's OffsetAllocator rounds them up to fix the 2/3 problem, which
//    caps utilization near 8/9 instead).
//
// Thread safety: none; see LockedRangeAllocator for a mutex-guarded wrapper.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "unipool/status.hpp"

namespace unipool {

struct RangeAllocatorOptions {
  // Power of two, at most 2^31. Every size is rounded up to a multiple of it,
  // so every offset is a multiple of it. 1 for byte ranges, 256 for CUDA-style blocks.
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

// What allocate() returns. `handle` identifies the allocation for deallocate(); it
// carries a generation so a stale handle (double free) is always detected.
// `owner` is the tag of the allocator that made it: handles are node indices
// plus a generation, so two allocators can hand out equal ones, and the tag is
// what lets deallocate(const RangeAllocation&) refuse another allocator's allocation
// instead of freeing a block of its own. It sits in what was padding after
// `status`: the struct stays 32 bytes.
struct RangeAllocation {
  static constexpr uint64_t kNoOffset = ~uint64_t{0};
  uint64_t offset = kNoOffset;
  uint64_t handle = 0;
  Status status = Status::out_of_space;
  uint32_t owner = 0;  // RangeAllocator::tag() of its allocator; 0 on failure
  // The range's size: the request rounded up to the pool alignment (what
  // allocation_size() answers while it is live), so a caller need not look
  // the allocation up again. 0 on failure.
  uint64_t extent = 0;

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
  // Bins: 3 mantissa bits (8 per power of two) over sizes below 2^63; the
  // bin math is in csrc/core/size_bins.hpp, which static_asserts these.
  static constexpr uint32_t kGroupCount = 62;
  static constexpr uint32_t kBinCount = kGroupCount * 8;

  explicit RangeAllocator(uint64_t capacity, RangeAllocatorOptions options = {});

  // A moved-from allocator is empty (capacity 0) and still usable.
  RangeAllocator(RangeAllocator&& other) noexcept;
  RangeAllocator& operator=(RangeAllocator&& other) noexcept;
  RangeAllocator(const RangeAllocator&) = delete;
  RangeAllocator& operator=(const RangeAllocator&) = delete;

  // Returns an offset aligned to max(alignment, options.alignment).
  // `alignment` must be 0 (the pool's) or a power of two.
  RangeAllocation allocate(uint64_t size, uint64_t alignment = 0);

  // Takes exactly [offset, offset + size rounded up to the pool alignment),
  // which must lie inside one free range: what restoring a checkpoint needs
  // (a block back at the address it had). Status::bad_alignment for an
  // offset that is not a multiple of the pool alignment, too_large for a size
  // above capacity(), bad_argument for a range that leaves [0, capacity()),
  // out_of_space when any byte of it is in use, allocation_limit at the cap;
  // nothing changes then. O(ranges) (it walks the address order from the
  // end): for rare calls, not for the hot path.
  RangeAllocation allocate_at(uint64_t offset, uint64_t size);

  // Status::not_live for a handle that is not a live allocation at that offset
  // (double free, never allocated, interior offset); nothing changes then.
  // The (offset, handle) form cannot tell another allocator's handle from its
  // own: generations start at a per-allocator seed, so such a handle is
  // refused as not_live except by rare coincidence. Callers that may mix
  // allocators pass the RangeAllocation, whose owner tag is checked exactly.
  Status deallocate(uint64_t offset, uint64_t handle);
  // Status::foreign (nothing changes) when `a` was made by another allocator.
  Status deallocate(const RangeAllocation& a) {
    return a.owner == tag_ ? deallocate(a.offset, a.handle) : Status::foreign;
  }

  // Gives a live allocation `size` bytes where it is: the offset and handle
  // stay. Growing takes the bytes from the free range right after it;
  // shrinking gives the tail back to the free ranges (merged with a free
  // neighbour). Status::not_live for a handle that is not live at `offset`,
  // zero_size for 0, out_of_space when the range after it is not free or too
  // short, allocation_limit when a shrink needs a node and none is left;
  // nothing changes then. O(1).
  Status resize(uint64_t offset, uint64_t handle, uint64_t size);

  // The extent (aligned size) of a live allocation, 0 if it is not live.
  uint64_t allocation_size(uint64_t offset, uint64_t handle) const;
  // The same for a RangeAllocation; 0 also when another allocator made it.
  uint64_t allocation_size(const RangeAllocation& a) const {
    return a.owner == tag_ ? allocation_size(a.offset, a.handle) : 0;
  }

  // This allocator's tag, the `owner` of every allocation it makes: unique
  // among the allocators of the process (until 2^32 - 1 have been made),
  // never 0. A move takes the tag along with the ranges; the moved-from
  // allocator gets a fresh one, so old allocations are foreign to it.
  uint32_t tag() const noexcept { return tag_; }

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

  // Calls f(const RangeInfo&) for every range in address order.
  template <class F>
  void for_each_range(F&& f) const {
    for (uint32_t i = first_range(); i != kNone; i = nodes_[i].next_addr) f(range_info(i));
  }

  // Checks every invariant: ranges tile [0, capacity) with neighbour links
  // consistent both ways, no two adjacent free ranges, every free range filed
  // in the bin of its size and only there, bitmaps match the bins, counters
  // match a recount. Returns true when all hold; otherwise *why says which.
  bool validate(std::string* why = nullptr) const;

 private:
  // A range of the address space: used, free (filed in a bin), or unused (a
  // spare node on the unused list). Links are node indices, so the node pool
  // can grow without invalidating them. 32 bytes, so a node never straddles
  // two cache lines: in big pools nearly every node visit is a cache miss.
  enum : uint64_t { kUnused = 0, kFree = 1, kUsed = 2 };
  struct BinLink {
    uint32_t prev, next;  // bin list; `next` also links the unused list
  };
  struct LiveInfo {
    uint32_t generation;  // of the handle given out for this allocation
    uint32_t padding;     // extent - requested (alignment waste)
  };
  struct Node {
    uint64_t offset = 0;
    uint64_t size : 62 = 0;
    uint64_t state : 2 = kUnused;
    uint32_t prev_addr = kNone, next_addr = kNone;  // address-order neighbours
    union {
      BinLink link;   // free and unused nodes
      LiveInfo live;  // used nodes
    };
    Node() : link{kNone, kNone} {}
  };
  static_assert(sizeof(Node) == 32, "a node must not straddle cache lines");
  static constexpr uint32_t kNone = ~uint32_t{0};

  uint32_t first_range() const noexcept;  // the lowest in address order, or kNone
  RangeInfo range_info(uint32_t index) const noexcept;
  uint32_t acquire_node();
  void release_node(uint32_t index);
  void file_free(uint32_t index);
  void unfile_free(uint32_t index);
  void resize_free(uint32_t index, uint64_t offset, uint64_t size);
  uint32_t best_fit_in_bin(uint32_t bin, uint64_t need) const;
  uint32_t find_range(uint64_t need) const;
  RangeAllocation allocate_aligned(uint64_t size, uint64_t alignment);
  RangeAllocation finish_allocation(uint32_t index, uint64_t size);
  uint32_t take_front(uint32_t index, uint64_t size);
  void split_off_head(uint32_t index, uint64_t head);
  void drop_range(uint32_t index);
  bool grow_used(uint32_t index, uint64_t more);
  bool shrink_used(uint32_t index, uint64_t less);
  uint32_t node_for(uint64_t offset, uint64_t handle) const;
  uint32_t range_holding(uint64_t offset) const;
  bool reserve_spare_nodes();

  RangeAllocatorOptions options_;
  uint32_t tag_ = 0;  // set by every constructor, see tag()
  uint64_t capacity_ = 0;
  uint64_t used_bytes_ = 0;
  uint64_t requested_bytes_ = 0;
  uint64_t live_allocations_ = 0;
  uint64_t live_limit_ = 0;  // max_allocations, or no limit
  uint64_t free_ranges_ = 0;
  std::vector<Node> nodes_;
  uint32_t unused_nodes_ = kNone;  // singly linked through Node::link.next
  uint32_t last_node_ = kNone;     // the range that ends at capacity_
  uint32_t next_generation_ = 1;   // handles never repeat within 2^32 allocations;
                                   // seeded from the tag, see deallocate()
  uint64_t top_mask_ = 0;        // bit g: some bin of group g is non-empty
  std::array<uint32_t, kGroupCount> leaf_mask_{};  // per group: bit i = bin (g, i) non-empty
  std::array<uint32_t, kBinCount> bin_head_;        // first free range of each bin
};

}  // namespace unipool
