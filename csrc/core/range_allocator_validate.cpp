// unipool: RangeAllocator::validate(), the debug check of every invariant.
// Slow on purpose (it walks every node); tests call it after every step.
#include <bit>
#include <string>

#include "core/size_bins.hpp"
#include "unipool/range_allocator.hpp"

namespace unipool {

namespace {

bool fail(std::string* why, std::string message) {
  if (why != nullptr) *why = std::move(message);
  return false;
}

std::string at(uint64_t index) { return " (node " + std::to_string(index) + ")"; }

}  // namespace

bool RangeAllocator::validate(std::string* why) const {
  const uint64_t node_count = nodes_.size();
  const uint64_t alignment = options_.alignment;

  // 1. The address-order list tiles [0, capacity) exactly.
  uint64_t ranges = 0, used = 0, requested = 0, live = 0, free_count = 0, expect_offset = 0;
  uint32_t first = last_node_;
  for (uint64_t steps = 0; first != kNone && nodes_[first].prev_addr != kNone; ++steps) {
    if (steps > node_count) return fail(why, "address list has a cycle (backwards)");
    const uint32_t prev = nodes_[first].prev_addr;
    if (prev >= node_count || nodes_[prev].next_addr != first) {
      return fail(why, "prev/next address links disagree" + at(first));
    }
    first = prev;
  }
  bool previous_free = false;
  for (uint32_t i = first; i != kNone; i = nodes_[i].next_addr) {
    if (++ranges > node_count) return fail(why, "address list has a cycle");
    const Node& n = nodes_[i];
    if (n.state == kUnused) return fail(why, "an unused node is in the address list" + at(i));
    if (n.offset != expect_offset) return fail(why, "gap or overlap at offset " + std::to_string(n.offset) + at(i));
    if (n.size == 0) return fail(why, "empty range" + at(i));
    if (n.offset % alignment != 0 || n.size % alignment != 0) {
      return fail(why, "range not a multiple of the alignment" + at(i));
    }
    if (n.next_addr != kNone && (n.next_addr >= node_count || nodes_[n.next_addr].prev_addr != i)) {
      return fail(why, "next/prev address links disagree" + at(i));
    }
    if (n.next_addr == kNone && i != last_node_) return fail(why, "last_node_ is not the last range");
    expect_offset = n.offset + n.size;
    if (n.state == kUsed) {
      if (n.live.padding >= n.size || n.live.padding >= alignment) {
        return fail(why, "alignment padding out of range" + at(i));
      }
      used += n.size;
      requested += n.size - n.live.padding;
      ++live;
      previous_free = false;
    } else if (n.state == kFree) {
      if (previous_free) return fail(why, "two adjacent free ranges" + at(i));
      if (core::bin_of(n.size) >= core::kBinCount) return fail(why, "free range beyond the bins" + at(i));
      ++free_count;
      previous_free = true;
    } else {
      return fail(why, "a node in an unknown state" + at(i));
    }
  }
  if (expect_offset != capacity_) return fail(why, "ranges end at " + std::to_string(expect_offset) + ", not at capacity");
  if (used != used_bytes_ || requested != requested_bytes_ || live != live_allocations_) {
    return fail(why, "used/requested/live counters disagree with a recount");
  }
  if (free_count != free_ranges_) {
    return fail(why, "free range counter disagrees with a recount");
  }

  // 2. Every free range is filed in the bin of its size, once; masks match.
  uint64_t filed = 0, free_bytes_in_bins = 0;
  for (uint32_t bin = 0; bin < core::kBinCount; ++bin) {
    const bool leaf_bit = (leaf_mask_[core::group_of(bin)] >> core::slot_of(bin)) & 1u;
    if (leaf_bit != (bin_head_[bin] != kNone)) return fail(why, "leaf bit disagrees with bin " + std::to_string(bin));
    uint32_t prev = kNone;
    for (uint32_t i = bin_head_[bin]; i != kNone; i = nodes_[i].link.next) {
      if (i >= node_count || ++filed > free_count) return fail(why, "bin lists hold more nodes than there are free ranges");
      const Node& n = nodes_[i];
      if (n.state != kFree) return fail(why, "a non-free node is filed in bin " + std::to_string(bin) + at(i));
      if (core::bin_of(n.size) != bin) return fail(why, "free range filed in the wrong bin" + at(i));
      if (n.link.prev != prev) return fail(why, "bin list back link is wrong" + at(i));
      free_bytes_in_bins += n.size;
      prev = i;
    }
  }
  for (uint32_t group = 0; group < core::kGroupCount; ++group) {
    const bool top_bit = (top_mask_ >> group) & 1u;
    if (top_bit != (leaf_mask_[group] != 0)) return fail(why, "top bit disagrees with group " + std::to_string(group));
  }
  if (filed != free_count) return fail(why, "a free range is missing from the bins");
  if (used + free_bytes_in_bins != capacity_) return fail(why, "used + free != capacity");

  // 3. Every other node is on the unused list.
  uint64_t unused = 0;
  for (uint32_t i = unused_nodes_; i != kNone; i = nodes_[i].link.next) {
    if (i >= node_count || ++unused > node_count) return fail(why, "unused list is broken");
    if (nodes_[i].state != kUnused) return fail(why, "a live node is on the unused list" + at(i));
  }
  if (unused + ranges != node_count) return fail(why, "nodes lost: neither in a range nor unused");
  return true;
}

}  // namespace unipool
