// unipool: the range allocator's operations. The placement policy is
// explained in include/unipool/range_allocator.hpp; the checks that keep it
// honest are in range_allocator_validate.cpp.
#include "unipool/range_allocator.hpp"

#include <bit>
#include <stdexcept>
#include <string>

#include "core/size_bins.hpp"

namespace unipool {

using core::bin_of;
using core::group_of;
using core::kBinCount;
using core::kGroupCount;
using core::kMantissaBits;
using core::slot_of;

namespace {

// Sizes and capacities stay below 2^62 so that rounding and alignment slack
// can never overflow 64 bits.
constexpr uint64_t kMaxBytes = uint64_t{1} << 62;

constexpr uint64_t align_up(uint64_t value, uint64_t alignment) noexcept {
  return (value + alignment - 1) & ~(alignment - 1);
}

constexpr uint64_t make_handle(uint32_t node, uint32_t generation) noexcept {
  return (uint64_t{generation} << 32) | node;
}

RangeAllocation failure(Status why) noexcept {
  RangeAllocation a;
  a.status = why;
  return a;
}

}  // namespace

RangeAllocator::RangeAllocator(uint64_t capacity, RangeAllocatorOptions options)
    : options_(options), leaf_mask_(kGroupCount, 0), bin_head_(kBinCount, kNone) {
  if (!std::has_single_bit(options_.alignment)) {
    throw std::invalid_argument("unipool::RangeAllocator: alignment " +
                                std::to_string(options_.alignment) +
                                " is not a power of two");
  }
  if (capacity >= kMaxBytes) {
    throw std::invalid_argument("unipool::RangeAllocator: capacity " + std::to_string(capacity) +
                                " is not below 2^62");
  }
  nodes_.reserve(options_.initial_nodes > 0 ? options_.initial_nodes : 1);
  extend(capacity);
}

// ---- node pool -------------------------------------------------------------

uint32_t RangeAllocator::acquire_node() {
  if (unused_nodes_ != kNone) {
    const uint32_t index = unused_nodes_;
    unused_nodes_ = nodes_[index].next_free;
    return index;
  }
  if (nodes_.size() >= kNone - 1) return kNone;  // indices are 32-bit
  nodes_.emplace_back();  // amortized growth: no cap on live allocations
  return static_cast<uint32_t>(nodes_.size() - 1);
}

void RangeAllocator::release_node(uint32_t index) {
  Node& n = nodes_[index];
  n.state = Node::unused;
  n.prev_addr = n.next_addr = n.prev_free = kNone;
  n.next_free = unused_nodes_;
  unused_nodes_ = index;
}

// ---- bins ------------------------------------------------------------------

void RangeAllocator::file_free(uint32_t index) {
  Node& n = nodes_[index];
  const uint32_t bin = bin_of(n.size);
  n.state = Node::free;
  n.requested = 0;
  n.prev_free = kNone;
  n.next_free = bin_head_[bin];
  if (n.next_free != kNone) nodes_[n.next_free].prev_free = index;
  bin_head_[bin] = index;
  leaf_mask_[group_of(bin)] |= 1u << slot_of(bin);
  top_mask_ |= uint64_t{1} << group_of(bin);
  ++free_ranges_;
}

void RangeAllocator::unfile_free(uint32_t index) {
  Node& n = nodes_[index];
  const uint32_t bin = bin_of(n.size);
  if (n.prev_free != kNone) {
    nodes_[n.prev_free].next_free = n.next_free;
  } else {
    bin_head_[bin] = n.next_free;
  }
  if (n.next_free != kNone) nodes_[n.next_free].prev_free = n.prev_free;
  n.prev_free = n.next_free = kNone;
  if (bin_head_[bin] == kNone) {
    uint32_t& leaf = leaf_mask_[group_of(bin)];
    leaf &= ~(1u << slot_of(bin));
    if (leaf == 0) top_mask_ &= ~(uint64_t{1} << group_of(bin));
  }
  --free_ranges_;
}

// The smallest range >= need among the first fit_scan_limit ranges of a bin;
// an exact fit ends the search at once.
uint32_t RangeAllocator::best_fit_in_bin(uint32_t bin, uint64_t need) const {
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
    i = n.next_free;
  }
  return best;
}

uint32_t RangeAllocator::find_range(uint64_t need) const {
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
  if (size == 0) return failure(Status::zero_size);
  if (alignment != 0 && !std::has_single_bit(alignment)) return failure(Status::bad_alignment);
  if (size > capacity_ || alignment >= kMaxBytes) return failure(Status::too_large);
  if (options_.max_allocations != 0 && live_allocations_ >= options_.max_allocations) {
    return failure(Status::allocation_limit);
  }
  const uint64_t base = options_.alignment;
  const uint64_t align = alignment > base ? alignment : base;
  const uint64_t extent = align_up(size, base);
  // A stricter alignment than the pool's may need a head gap of up to this.
  const uint64_t slack = align - base;
  const uint32_t index = find_range(extent + slack);
  if (index == kNone) return failure(Status::out_of_space);

  const uint64_t head = align_up(nodes_[index].offset, align) - nodes_[index].offset;
  if (!carve(index, head, extent)) return failure(Status::allocation_limit);
  Node& n = nodes_[index];
  n.requested = size;
  used_bytes_ += extent;
  requested_bytes_ += size;
  ++live_allocations_;
  return RangeAllocation{n.offset, make_handle(index, n.generation), Status::ok};
}

// Turns free range `index` into the used range [offset + head, + size),
// filing what is left before and after it as free ranges of their own. Both
// leftovers border used ranges (free ranges never touch), so no merging.
bool RangeAllocator::carve(uint32_t index, uint64_t head, uint64_t size) {
  const uint64_t tail = nodes_[index].size - head - size;
  // Take the nodes first: acquiring may grow nodes_ and move it.
  const uint32_t head_node = head > 0 ? acquire_node() : kNone;
  const uint32_t tail_node = tail > 0 ? acquire_node() : kNone;
  if ((head > 0 && head_node == kNone) || (tail > 0 && tail_node == kNone)) {
    if (head_node != kNone) release_node(head_node);
    if (tail_node != kNone) release_node(tail_node);
    return false;
  }
  unfile_free(index);
  Node& n = nodes_[index];
  if (head_node != kNone) {
    Node& h = nodes_[head_node];
    h.offset = n.offset;
    h.size = head;
    h.prev_addr = n.prev_addr;
    h.next_addr = index;
    if (n.prev_addr != kNone) nodes_[n.prev_addr].next_addr = head_node;
    n.prev_addr = head_node;
    n.offset += head;
    file_free(head_node);
  }
  if (tail_node != kNone) {
    Node& t = nodes_[tail_node];
    t.offset = n.offset + size;
    t.size = tail;
    t.prev_addr = index;
    t.next_addr = n.next_addr;
    if (n.next_addr != kNone) nodes_[n.next_addr].prev_addr = tail_node;
    n.next_addr = tail_node;
    if (last_node_ == index) last_node_ = tail_node;
    file_free(tail_node);
  }
  n.size = size;
  n.state = Node::used;
  if (++n.generation == 0) n.generation = 1;  // a live handle is never 0
  return true;
}

uint32_t RangeAllocator::node_for(uint64_t offset, uint64_t handle) const {
  const auto index = static_cast<uint32_t>(handle);
  const auto generation = static_cast<uint32_t>(handle >> 32);
  if (index >= nodes_.size()) return kNone;
  const Node& n = nodes_[index];
  if (n.state != Node::used || n.generation != generation || n.offset != offset) return kNone;
  return index;
}

Status RangeAllocator::free(uint64_t offset, uint64_t handle) {
  uint32_t index = node_for(offset, handle);
  if (index == kNone) return Status::not_live;
  used_bytes_ -= nodes_[index].size;
  requested_bytes_ -= nodes_[index].requested;
  --live_allocations_;

  const uint32_t left = nodes_[index].prev_addr;
  if (left != kNone && nodes_[left].state == Node::free) {
    unfile_free(left);
    absorb_next(left);  // left swallows index
    index = left;
  }
  const uint32_t right = nodes_[index].next_addr;
  if (right != kNone && nodes_[right].state == Node::free) {
    unfile_free(right);
    absorb_next(index);
  }
  file_free(index);
  return Status::ok;
}

// Merges the range after `index` into it and recycles that node.
void RangeAllocator::absorb_next(uint32_t index) {
  Node& n = nodes_[index];
  const uint32_t next = n.next_addr;
  Node& gone = nodes_[next];
  n.size += gone.size;
  n.next_addr = gone.next_addr;
  if (gone.next_addr != kNone) nodes_[gone.next_addr].prev_addr = index;
  if (last_node_ == next) last_node_ = index;
  release_node(next);
}

uint64_t RangeAllocator::allocation_size(uint64_t offset, uint64_t handle) const {
  const uint32_t index = node_for(offset, handle);
  return index == kNone ? 0 : nodes_[index].size;
}

Status RangeAllocator::extend(uint64_t bytes) {
  bytes &= ~(options_.alignment - 1);
  if (bytes == 0) return Status::ok;
  if (bytes >= kMaxBytes || capacity_ + bytes >= kMaxBytes) return Status::too_large;
  if (last_node_ != kNone && nodes_[last_node_].state == Node::free) {
    unfile_free(last_node_);
    nodes_[last_node_].size += bytes;
    file_free(last_node_);
  } else {
    const uint32_t index = acquire_node();
    if (index == kNone) return Status::allocation_limit;
    Node& n = nodes_[index];
    n.offset = capacity_;
    n.size = bytes;
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
  for (uint32_t i = bin_head_[(group << kMantissaBits) | slot]; i != kNone; i = nodes_[i].next_free) {
    if (nodes_[i].size > largest) largest = nodes_[i].size;
  }
  return largest;
}

double RangeAllocator::fragmentation() const noexcept {
  const uint64_t free = free_bytes();
  return free == 0 ? 0.0 : 1.0 - static_cast<double>(largest_free()) / static_cast<double>(free);
}

uint64_t RangeAllocator::trailing_free() const noexcept {
  if (last_node_ == kNone || nodes_[last_node_].state != Node::free) return 0;
  return nodes_[last_node_].size;
}

void RangeAllocator::for_each_range(const std::function<void(const RangeInfo&)>& f) const {
  uint32_t first = last_node_;
  while (first != kNone && nodes_[first].prev_addr != kNone) first = nodes_[first].prev_addr;
  for (uint32_t i = first; i != kNone; i = nodes_[i].next_addr) {
    const Node& n = nodes_[i];
    f(RangeInfo{n.offset, n.size, n.requested, n.state == Node::used});
  }
}

}  // namespace unipool
