// unipool: the range allocator's operations. The placement policy is
// explained in include/unipool/range_allocator.hpp; the checks that keep it
// honest are in range_allocator_validate.cpp.
#include "unipool/range_allocator.hpp"

#include "core/align.hpp"

#include <atomic>
#include <bit>
#include <stdexcept>
#include <string>
#include <utility>

#include "core/compiler.hpp"
#include "core/size_bins.hpp"

namespace unipool {

using core::bin_of;
using core::group_of;
using core::kMantissaBits;
using core::slot_of;

static_assert(RangeAllocator::kBinCount == core::kBinCount &&
              RangeAllocator::kGroupCount == core::kGroupCount);

namespace {

// Sizes and capacities stay below 2^62 so that rounding and alignment slack
// can never overflow 64 bits, and a size fits Node::size's 62 bits.
constexpr uint64_t kMaxBytes = uint64_t{1} << 62;
constexpr uint64_t kMaxPoolAlignment = uint64_t{1} << 31;  // padding is 32-bit

// Node::size is a 62-bit field; every size is checked against kMaxBytes
// first, and the mask (written at each store) tells the compiler so.
constexpr uint64_t kSizeMask = kMaxBytes - 1;

constexpr uint64_t make_handle(uint32_t node, uint32_t generation) noexcept {
  return (uint64_t{generation} << 32) | node;
}

// Tags are handed out in construction order; 0 is skipped so that a failed
// allocation (owner 0) is foreign to every allocator. Relaxed: only
// uniqueness matters.
std::atomic<uint32_t> g_next_tag{1};

uint32_t new_tag() noexcept {
  uint32_t tag = g_next_tag.fetch_add(1, std::memory_order_relaxed);
  if (tag == 0) tag = g_next_tag.fetch_add(1, std::memory_order_relaxed);
  return tag;
}

// The first generation of an allocator: the tag spread over 32 bits (times an
// odd constant, a bijection), so that the first handles of two allocators
// differ and a foreign raw handle is refused as not_live, not taken as one's
// own. Never 0, which no live handle has.
uint32_t first_generation(uint32_t tag) noexcept {
  const uint32_t g = tag * 0x9E3779B1u;
  return g != 0 ? g : 1;
}

RangeAllocation failure(Status why) noexcept {
  RangeAllocation a;
  a.status = why;
  return a;
}

}  // namespace

RangeAllocator::RangeAllocator(uint64_t capacity, RangeAllocatorOptions options)
    : options_(options), tag_(new_tag()), next_generation_(first_generation(tag_)) {
  if (!std::has_single_bit(options_.alignment) || options_.alignment > kMaxPoolAlignment) {
    throw std::invalid_argument("unipool::RangeAllocator: alignment " +
                                std::to_string(options_.alignment) +
                                " is not a power of two up to 2^31");
  }
  bin_head_.fill(kNone);
  live_limit_ = options_.max_allocations != 0 ? options_.max_allocations : ~uint64_t{0};
  if (capacity >= kMaxBytes) {
    throw std::invalid_argument("unipool::RangeAllocator: capacity " + std::to_string(capacity) +
                                " is not below 2^62");
  }
  nodes_.reserve(options_.initial_nodes > 0 ? options_.initial_nodes : 1);
  extend(capacity);
}

RangeAllocator::RangeAllocator(RangeAllocator&& other) noexcept { *this = std::move(other); }

// The tag and the generation travel with the ranges (the allocations made so
// far stay valid here); the emptied source gets a fresh tag, so they are
// foreign to it.
RangeAllocator& RangeAllocator::operator=(RangeAllocator&& other) noexcept {
  if (this == &other) return *this;
  options_ = other.options_;
  live_limit_ = other.live_limit_;
  tag_ = std::exchange(other.tag_, new_tag());
  next_generation_ = std::exchange(other.next_generation_, first_generation(other.tag_));
  capacity_ = std::exchange(other.capacity_, 0);
  used_bytes_ = std::exchange(other.used_bytes_, 0);
  requested_bytes_ = std::exchange(other.requested_bytes_, 0);
  live_allocations_ = std::exchange(other.live_allocations_, 0);
  free_ranges_ = std::exchange(other.free_ranges_, 0);
  nodes_ = std::move(other.nodes_);
  other.nodes_.clear();
  unused_nodes_ = std::exchange(other.unused_nodes_, kNone);
  last_node_ = std::exchange(other.last_node_, kNone);
  top_mask_ = std::exchange(other.top_mask_, 0);
  leaf_mask_ = other.leaf_mask_;
  other.leaf_mask_.fill(0);
  bin_head_ = other.bin_head_;
  other.bin_head_.fill(kNone);
  return *this;
}

// ---- node pool -------------------------------------------------------------

UNIPOOL_ALWAYS_INLINE uint32_t RangeAllocator::acquire_node() {
  if (unused_nodes_ != kNone) {
    const uint32_t index = unused_nodes_;
    unused_nodes_ = nodes_[index].link.next;
    return index;
  }
  if (nodes_.size() >= kNone - 1) return kNone;  // indices are 32-bit
  nodes_.emplace_back();  // amortized growth: no cap on live allocations
  return static_cast<uint32_t>(nodes_.size() - 1);
}

void RangeAllocator::release_node(uint32_t index) {
  Node& n = nodes_[index];
  n.state = kUnused;
  n.prev_addr = n.next_addr = kNone;
  n.link.prev = kNone;
  n.link.next = unused_nodes_;
  unused_nodes_ = index;
}

// ---- bins ------------------------------------------------------------------

UNIPOOL_ALWAYS_INLINE void RangeAllocator::file_free(uint32_t index) {
  Node& n = nodes_[index];
  const uint32_t bin = bin_of(n.size);
  n.state = kFree;
  n.link.prev = kNone;
  n.link.next = bin_head_[bin];
  if (n.link.next != kNone) nodes_[n.link.next].link.prev = index;
  bin_head_[bin] = index;
  leaf_mask_[group_of(bin)] |= 1u << slot_of(bin);
  top_mask_ |= uint64_t{1} << group_of(bin);
  ++free_ranges_;
}

UNIPOOL_ALWAYS_INLINE void RangeAllocator::unfile_free(uint32_t index) {
  Node& n = nodes_[index];
  const uint32_t bin = bin_of(n.size);
  if (n.link.prev != kNone) {
    nodes_[n.link.prev].link.next = n.link.next;
  } else {
    bin_head_[bin] = n.link.next;
  }
  if (n.link.next != kNone) nodes_[n.link.next].link.prev = n.link.prev;
  if (bin_head_[bin] == kNone) {
    uint32_t& leaf = leaf_mask_[group_of(bin)];
    leaf &= ~(1u << slot_of(bin));
    if (leaf == 0) top_mask_ &= ~(uint64_t{1} << group_of(bin));
  }
  --free_ranges_;
}

// Gives filed free range `index` a new extent. It stays where it is when it
// heads its bin and the bin does not change: unfiling and filing it again
// would leave it at the head of the same bin, so the lists end up exactly as
// if it had been refiled. That is the common case for the large free range
// at the end, which blocks are carved from and freed back into.
UNIPOOL_ALWAYS_INLINE void RangeAllocator::resize_free(uint32_t index, uint64_t offset, uint64_t size) {
  Node& n = nodes_[index];
  const bool stays = n.link.prev == kNone && bin_of(size) == bin_of(n.size);
  if (!stays) unfile_free(index);
  n.offset = offset;
  n.size = size & kSizeMask;
  if (!stays) file_free(index);
}

// The smallest range >= need among the first fit_scan_limit ranges of a bin;
// an exact fit ends the search at once.
UNIPOOL_ALWAYS_INLINE uint32_t RangeAllocator::best_fit_in_bin(uint32_t bin, uint64_t need) const {
  uint32_t best = kNone;
  uint64_t best_size = ~uint64_t{0};
  uint32_t budget = options_.fit_scan_limit > 0 ? options_.fit_scan_limit : 1;
  for (uint32_t i = bin_head_[bin]; i != kNone && budget > 0; --budget) {
    const Node& n = nodes_[i];
    if (n.size >= need && n.size < best_size) {
      best = i;
      best_size = n.size;
      if (n.size == need) break;
    }
    i = n.link.next;
  }
  return best;
}

UNIPOOL_ALWAYS_INLINE uint32_t RangeAllocator::find_range(uint64_t need) const {
  // 0. Only the range at the end is free (a pool filled from the front with
  // nothing freed below its top, as between rounds of blocks that are all
  // freed together): the search below could find no other, so skip it.
  if (free_ranges_ == 1 && nodes_[last_node_].state == kFree) {
    return nodes_[last_node_].size >= need ? last_node_ : kNone;
  }
  // 1. The bin holding `need`: where a freed block of this very size sits.
  const uint32_t own = bin_of(need);
  if (bin_head_[own] != kNone) {
    const uint32_t fit = best_fit_in_bin(own, need);
    if (fit != kNone) return fit;
  }
  // 2. The first non-empty bin above it; every range there fits.
  uint32_t group = group_of(own);
  const uint32_t slot = slot_of(own);
  uint32_t leaf = slot + 1 < 32 ? leaf_mask_[group] & (~0u << (slot + 1)) : 0;
  if (leaf == 0) {
    const uint64_t groups = group + 1 < 64 ? top_mask_ & (~uint64_t{0} << (group + 1)) : 0;
    if (groups == 0) return kNone;
    group = static_cast<uint32_t>(std::countr_zero(groups));
    leaf = leaf_mask_[group];
  }
  const uint32_t bin = (group << kMantissaBits) | static_cast<uint32_t>(std::countr_zero(leaf));
  return best_fit_in_bin(bin, need);
}

// ---- allocate / free -------------------------------------------------------

RangeAllocation RangeAllocator::allocate(uint64_t size, uint64_t alignment) {
  // One branch rejects 0, anything larger than the whole pool and an
  // alignment that is not a power of two.
  if (size - 1 >= capacity_ || (alignment & (alignment - 1)) != 0) {
    return failure(size == 0 ? Status::zero_size
                   : (alignment & (alignment - 1)) != 0 ? Status::bad_alignment
                                                        : Status::too_large);
  }
  if (alignment > options_.alignment) return allocate_aligned(size, alignment);
  if (live_allocations_ >= live_limit_) return failure(Status::allocation_limit);

  const uint64_t extent = align_up(size, options_.alignment);
  // A full pool is the common failure (callers evict and retry): answer it
  // without a search.
  if (extent > capacity_ - used_bytes_) return failure(Status::out_of_space);
  const uint32_t index = find_range(extent);
  if (index == kNone) return failure(Status::out_of_space);
  const uint32_t used = take_front(index, extent);
  if (used == kNone) return failure(Status::allocation_limit);
  return finish_allocation(used, size);
}

// The rare path: an alignment stricter than the pool's. Searches for room
// for the worst-case head gap too, then files the gap as a free range.
RangeAllocation RangeAllocator::allocate_aligned(uint64_t size, uint64_t alignment) {
  if (alignment >= kMaxBytes) return failure(Status::too_large);
  if (live_allocations_ >= live_limit_) return failure(Status::allocation_limit);
  const uint64_t extent = align_up(size, options_.alignment);
  // The range a plain request would get may happen to be aligned already;
  // otherwise search again with room for the worst-case head gap.
  uint32_t index = find_range(extent);
  if (index != kNone && nodes_[index].offset % alignment != 0) {
    index = find_range(extent + alignment - options_.alignment);
  }
  if (index == kNone) return failure(Status::out_of_space);
  if (!reserve_spare_nodes()) return failure(Status::allocation_limit);

  const uint64_t head = align_up(nodes_[index].offset, alignment) - nodes_[index].offset;
  if (head > 0) split_off_head(index, head);
  return finish_allocation(take_front(index, extent), size);
}

// A head and a tail split both need a node: once the range is split both
// acquisitions must succeed, so two spare nodes are made sure of before
// anything is touched.
bool RangeAllocator::reserve_spare_nodes() {
  const uint32_t spare_a = acquire_node();
  const uint32_t spare_b = acquire_node();
  if (spare_a != kNone) release_node(spare_a);
  if (spare_b != kNone) release_node(spare_b);
  return spare_a != kNone && spare_b != kNone;
}

RangeAllocation RangeAllocator::allocate_at(uint64_t offset, uint64_t size) {
  if (size == 0) return failure(Status::zero_size);
  if (offset % options_.alignment != 0) return failure(Status::bad_alignment);
  if (size > capacity_) return failure(Status::too_large);
  // capacity_ is a multiple of the alignment, so extent <= capacity_ here.
  const uint64_t extent = align_up(size, options_.alignment);
  if (offset > capacity_ - extent) return failure(Status::bad_argument);
  if (live_allocations_ >= live_limit_) return failure(Status::allocation_limit);
  const uint32_t index = range_holding(offset);
  if (index == kNone || nodes_[index].state != kFree ||
      nodes_[index].offset + nodes_[index].size < offset + extent) {
    return failure(Status::out_of_space);
  }
  if (!reserve_spare_nodes()) return failure(Status::allocation_limit);
  const uint64_t head = offset - nodes_[index].offset;
  if (head > 0) split_off_head(index, head);
  return finish_allocation(take_front(index, extent), size);
}

// The range (used or free) that contains `offset`, walking back from the
// end; kNone past the end. There is no address index: nothing on the hot
// path needs one, and allocate_at is rare.
uint32_t RangeAllocator::range_holding(uint64_t offset) const {
  for (uint32_t i = last_node_; i != kNone; i = nodes_[i].prev_addr) {
    if (nodes_[i].offset <= offset) return offset < nodes_[i].offset + nodes_[i].size ? i : kNone;
  }
  return kNone;
}

UNIPOOL_ALWAYS_INLINE RangeAllocation RangeAllocator::finish_allocation(uint32_t index, uint64_t size) {
  Node& n = nodes_[index];
  n.live.padding = static_cast<uint32_t>(n.size - size);
  n.live.generation = next_generation_;
  if (++next_generation_ == 0) next_generation_ = 1;  // 0 is never a live handle's
  used_bytes_ += n.size;
  requested_bytes_ += size;
  ++live_allocations_;
  return RangeAllocation{n.offset, make_handle(index, n.live.generation), Status::ok, tag_, n.size};
}

// Turns the first `size` bytes of free range `index` into a used range and
// returns its node (kNone when no node is left for it). The used front gets a
// node of its own and the rest keeps the free range's node, in its bin unless
// the bin changes: carving blocks one after another from the large free range
// at the end touches no bin list. The rest borders a used range (free ranges
// never touch), so it needs no merging. An exact fit turns the free range's
// own node into the used one.
UNIPOOL_ALWAYS_INLINE uint32_t RangeAllocator::take_front(uint32_t index, uint64_t size) {
  const uint64_t rest = nodes_[index].size - size;
  if (rest == 0) {
    unfile_free(index);
    nodes_[index].state = kUsed;
    return index;
  }
  const uint32_t used = acquire_node();  // first: it may grow nodes_ and move it
  if (used == kNone) return kNone;
  Node& f = nodes_[index];
  Node& u = nodes_[used];
  u.offset = f.offset;
  u.size = size & kSizeMask;
  u.state = kUsed;
  u.prev_addr = f.prev_addr;
  u.next_addr = index;
  if (f.prev_addr != kNone) nodes_[f.prev_addr].next_addr = used;
  f.prev_addr = used;
  resize_free(index, f.offset + size, rest);
  return used;
}

// Splits the first `head` bytes of free range `index` off into a free range
// of their own; `index` keeps the rest and stays filed. The caller made sure
// a spare node exists.
void RangeAllocator::split_off_head(uint32_t index, uint64_t head) {
  const uint32_t head_node = acquire_node();
  unfile_free(index);
  Node& n = nodes_[index];
  Node& h = nodes_[head_node];
  h.offset = n.offset;
  h.size = head & kSizeMask;
  h.prev_addr = n.prev_addr;
  h.next_addr = index;
  if (n.prev_addr != kNone) nodes_[n.prev_addr].next_addr = head_node;
  n.prev_addr = head_node;
  n.offset += head;
  n.size = (n.size - head) & kSizeMask;
  file_free(head_node);
  file_free(index);
}

UNIPOOL_ALWAYS_INLINE uint32_t RangeAllocator::node_for(uint64_t offset, uint64_t handle) const {
  const auto index = static_cast<uint32_t>(handle);
  const auto generation = static_cast<uint32_t>(handle >> 32);
  if (index >= nodes_.size()) return kNone;
  const Node& n = nodes_[index];
  if (n.state != kUsed || n.live.generation != generation || n.offset != offset) return kNone;
  return index;
}

Status RangeAllocator::deallocate(uint64_t offset, uint64_t handle) {
  const uint32_t index = node_for(offset, handle);
  if (index == kNone) return Status::not_live;
  const Node& n = nodes_[index];
  used_bytes_ -= n.size;
  requested_bytes_ -= n.size - n.live.padding;
  --live_allocations_;

  // The freed range merges with its free neighbours into the node of one of
  // them, the right one when it is free, which stays in its bin unless the bin
  // changes: a block freed next to the free range at the end just grows it.
  const uint32_t left = n.prev_addr;
  const uint32_t right = n.next_addr;
  const bool left_free = left != kNone && nodes_[left].state == kFree;
  if (right != kNone && nodes_[right].state == kFree) {
    uint64_t start = n.offset;
    uint64_t size = n.size + nodes_[right].size;
    if (left_free) {
      unfile_free(left);
      start = nodes_[left].offset;
      size += nodes_[left].size;
      drop_range(left);
    }
    drop_range(index);
    resize_free(right, start, size);
  } else if (left_free) {
    const uint64_t size = nodes_[left].size + n.size;
    drop_range(index);
    resize_free(left, nodes_[left].offset, size);
  } else {
    file_free(index);
  }
  return Status::ok;
}

// Takes a range whose bytes a neighbour has taken over out of the address
// order and recycles its node (which must not be filed in a bin).
UNIPOOL_ALWAYS_INLINE void RangeAllocator::drop_range(uint32_t index) {
  const Node& n = nodes_[index];
  if (n.prev_addr != kNone) nodes_[n.prev_addr].next_addr = n.next_addr;
  if (n.next_addr != kNone) nodes_[n.next_addr].prev_addr = n.prev_addr;
  if (last_node_ == index) last_node_ = n.prev_addr;
  release_node(index);
}

Status RangeAllocator::resize(uint64_t offset, uint64_t handle, uint64_t size) {
  if (size == 0) return Status::zero_size;
  const uint32_t index = node_for(offset, handle);
  if (index == kNone) return Status::not_live;
  if (size > capacity_) return Status::out_of_space;
  const uint64_t extent = align_up(size, options_.alignment);
  const uint64_t old_extent = nodes_[index].size;
  if (extent > old_extent && !grow_used(index, extent - old_extent)) return Status::out_of_space;
  if (extent < old_extent && !shrink_used(index, old_extent - extent)) return Status::allocation_limit;
  Node& n = nodes_[index];
  requested_bytes_ = requested_bytes_ - (old_extent - n.live.padding) + size;
  n.live.padding = static_cast<uint32_t>(n.size - size);
  return Status::ok;
}

// Used range `index` takes the first `more` bytes of the free range after it.
bool RangeAllocator::grow_used(uint32_t index, uint64_t more) {
  const uint32_t right = nodes_[index].next_addr;
  if (right == kNone || nodes_[right].state != kFree || nodes_[right].size < more) return false;
  if (nodes_[right].size == more) {
    unfile_free(right);
    drop_range(right);
  } else {
    resize_free(right, nodes_[right].offset + more, nodes_[right].size - more);
  }
  nodes_[index].size = (nodes_[index].size + more) & kSizeMask;
  used_bytes_ += more;
  return true;
}

// Used range `index` gives its last `less` bytes back: to the free range
// after it when there is one (free ranges never touch), else as a new one.
bool RangeAllocator::shrink_used(uint32_t index, uint64_t less) {
  const uint32_t right = nodes_[index].next_addr;
  if (right != kNone && nodes_[right].state == kFree) {
    resize_free(right, nodes_[right].offset - less, nodes_[right].size + less);
  } else {
    const uint32_t tail = acquire_node();  // first: it may grow nodes_
    if (tail == kNone) return false;
    Node& n = nodes_[index];
    Node& t = nodes_[tail];
    t.offset = n.offset + n.size - less;
    t.size = less & kSizeMask;
    t.prev_addr = index;
    t.next_addr = n.next_addr;
    if (n.next_addr != kNone) nodes_[n.next_addr].prev_addr = tail;
    n.next_addr = tail;
    if (last_node_ == index) last_node_ = tail;
    file_free(tail);
  }
  nodes_[index].size = (nodes_[index].size - less) & kSizeMask;
  used_bytes_ -= less;
  return true;
}

uint64_t RangeAllocator::allocation_size(uint64_t offset, uint64_t handle) const {
  const uint32_t index = node_for(offset, handle);
  return index == kNone ? 0 : nodes_[index].size;
}

Status RangeAllocator::extend(uint64_t bytes) {
  bytes &= ~(options_.alignment - 1);
  if (bytes == 0) return Status::ok;
  if (bytes >= kMaxBytes || capacity_ + bytes >= kMaxBytes) return Status::too_large;
  if (last_node_ != kNone && nodes_[last_node_].state == kFree) {
    resize_free(last_node_, nodes_[last_node_].offset, nodes_[last_node_].size + bytes);
  } else {
    const uint32_t index = acquire_node();
    if (index == kNone) return Status::allocation_limit;
    Node& n = nodes_[index];
    n.offset = capacity_;
    n.size = bytes & kSizeMask;
    n.prev_addr = last_node_;
    n.next_addr = kNone;
    if (last_node_ != kNone) nodes_[last_node_].next_addr = index;
    last_node_ = index;
    file_free(index);
  }
  capacity_ += bytes;
  return Status::ok;
}

// ---- queries ---------------------------------------------------------------

uint64_t RangeAllocator::largest_free() const noexcept {
  if (top_mask_ == 0) return 0;
  const uint32_t group = 63u - static_cast<uint32_t>(std::countl_zero(top_mask_));
  const uint32_t slot = 31u - static_cast<uint32_t>(std::countl_zero(leaf_mask_[group]));
  uint64_t largest = 0;
  for (uint32_t i = bin_head_[(group << kMantissaBits) | slot]; i != kNone; i = nodes_[i].link.next) {
    if (nodes_[i].size > largest) largest = nodes_[i].size;
  }
  return largest;
}

double RangeAllocator::fragmentation() const noexcept {
  const uint64_t free = free_bytes();
  return free == 0 ? 0.0 : 1.0 - static_cast<double>(largest_free()) / static_cast<double>(free);
}

uint64_t RangeAllocator::trailing_free() const noexcept {
  if (last_node_ == kNone || nodes_[last_node_].state != kFree) return 0;
  return nodes_[last_node_].size;
}

uint32_t RangeAllocator::first_range() const noexcept {
  uint32_t first = last_node_;
  while (first != kNone && nodes_[first].prev_addr != kNone) first = nodes_[first].prev_addr;
  return first;
}

RangeInfo RangeAllocator::range_info(uint32_t index) const noexcept {
  const Node& n = nodes_[index];
  const bool used = n.state == kUsed;
  return RangeInfo{n.offset, n.size, used ? n.size - n.live.padding : 0, used};
}

}  // namespace unipool
