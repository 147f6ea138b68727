// offset_util: the classic offset allocator's operations (see the header for
// the policy). Kept out of line, like unipool's allocator in its library, so
// both policies are called the same way from the benchmark driver.
#include "classic_offset_allocator.hpp"

#include <algorithm>
#include <stdexcept>

namespace offset_util {

using classic_bins::kMantissaBits;
using classic_bins::kMantissaMask;

ClassicOffsetAllocator::ClassicOffsetAllocator(uint64_t capacity, size_t reserve_nodes)
    : capacity_(capacity) {
  if (capacity == 0 || capacity >= classic_bins::kMaxSize) {
    throw std::invalid_argument("ClassicOffsetAllocator: capacity must be in (0, 2^62)");
  }
  bin_heads_.fill(kNoNode);
  nodes_.reserve(std::max<size_t>(reserve_nodes, 1));
  file_free(0, capacity);
}

uint32_t ClassicOffsetAllocator::take_node() {
  if (!spare_.empty()) {
    const uint32_t index = spare_.back();
    spare_.pop_back();
    return index;
  }
  nodes_.emplace_back();
  return static_cast<uint32_t>(nodes_.size() - 1);
}

void ClassicOffsetAllocator::give_back(uint32_t index) {
  nodes_[index].state = State::spare;
  spare_.push_back(index);
}

uint32_t ClassicOffsetAllocator::file_free(uint64_t offset, uint64_t size) {
  const uint32_t index = take_node();
  const uint32_t bin = classic_bins::round_down(size);
  Node& n = nodes_[index];
  n.offset = offset;
  n.size = size;
  n.state = State::free;
  n.bin_prev = kNoNode;
  n.bin_next = bin_heads_[bin];
  if (n.bin_next != kNoNode) nodes_[n.bin_next].bin_prev = index;
  bin_heads_[bin] = index;
  const uint32_t group = bin >> kMantissaBits;
  leaf_masks_[group] = static_cast<uint8_t>(leaf_masks_[group] | (1u << (bin & kMantissaMask)));
  top_mask_ |= uint64_t{1} << group;
  free_bytes_ += size;
  ++free_ranges_;
  return index;
}

void ClassicOffsetAllocator::clear_bin_bit(uint32_t bin) noexcept {
  const uint32_t group = bin >> kMantissaBits;
  leaf_masks_[group] = static_cast<uint8_t>(leaf_masks_[group] & ~(1u << (bin & kMantissaMask)));
  if (leaf_masks_[group] == 0) top_mask_ &= ~(uint64_t{1} << group);
}

void ClassicOffsetAllocator::unfile(uint32_t index) {
  Node& n = nodes_[index];
  const uint32_t bin = classic_bins::round_down(n.size);
  if (n.bin_prev != kNoNode) {
    nodes_[n.bin_prev].bin_next = n.bin_next;
  } else {
    bin_heads_[bin] = n.bin_next;
    if (n.bin_next == kNoNode) clear_bin_bit(bin);
  }
  if (n.bin_next != kNoNode) nodes_[n.bin_next].bin_prev = n.bin_prev;
  free_bytes_ -= n.size;
  --free_ranges_;
  give_back(index);
}

ClassicOffsetAllocator::Allocation ClassicOffsetAllocator::allocate(uint64_t size) {
  if (size == 0 || size > free_bytes_) return {};
  // First non-empty bin at or above the round-up bin of `size`.
  const uint32_t start = classic_bins::round_up(size);
  uint32_t group = start >> kMantissaBits;
  uint32_t leaf = (top_mask_ >> group) & 1u ? leaf_masks_[group] & (0xFFu << (start & kMantissaMask))
                                            : 0u;
  if (leaf == 0) {
    const uint64_t above = group + 1 < 64 ? top_mask_ & (~uint64_t{0} << (group + 1)) : 0;
    if (above == 0) return {};
    group = static_cast<uint32_t>(std::countr_zero(above));
    leaf = leaf_masks_[group];
  }
  const uint32_t bin = (group << kMantissaBits) | static_cast<uint32_t>(std::countr_zero(leaf));

  // Take the head of that bin.
  const uint32_t index = bin_heads_[bin];
  Node& n = nodes_[index];
  bin_heads_[bin] = n.bin_next;
  if (n.bin_next != kNoNode) {
    nodes_[n.bin_next].bin_prev = kNoNode;
  } else {
    clear_bin_bit(bin);
  }
  const uint64_t total = n.size;
  n.size = size;
  n.state = State::used;
  n.bin_prev = n.bin_next = kNoNode;
  free_bytes_ -= total;
  --free_ranges_;

  // The rest of the range becomes a free range right after it.
  if (total > size) {
    const uint32_t tail = file_free(n.offset + size, total - size);  // may move nodes_
    Node& used = nodes_[index];
    Node& t = nodes_[tail];
    t.addr_prev = index;
    t.addr_next = used.addr_next;
    if (used.addr_next != kNoNode) nodes_[used.addr_next].addr_prev = tail;
    used.addr_next = tail;
  }
  return Allocation{nodes_[index].offset, index};
}

void ClassicOffsetAllocator::free(const Allocation& a) {
  const uint32_t index = a.node;
  const Node& n = nodes_[index];
  uint64_t offset = n.offset;
  uint64_t size = n.size;
  uint32_t prev = n.addr_prev;
  uint32_t next = n.addr_next;
  if (prev != kNoNode && nodes_[prev].state == State::free) {
    offset = nodes_[prev].offset;
    size += nodes_[prev].size;
    const uint32_t before = nodes_[prev].addr_prev;
    unfile(prev);
    prev = before;
  }
  if (next != kNoNode && nodes_[next].state == State::free) {
    size += nodes_[next].size;
    const uint32_t after = nodes_[next].addr_next;
    unfile(next);
    next = after;
  }
  give_back(index);
  // The spare stack is non-empty now, so this reuses a node: no growth.
  const uint32_t merged = file_free(offset, size);
  Node& m = nodes_[merged];
  m.addr_prev = prev;
  m.addr_next = next;
  if (prev != kNoNode) nodes_[prev].addr_next = merged;
  if (next != kNoNode) nodes_[next].addr_prev = merged;
}

bool ClassicOffsetAllocator::validate(std::string* why) const {
  auto fail = [why](const std::string& what) {
    if (why != nullptr) *why = what;
    return false;
  };
  std::vector<uint32_t> live;
  for (uint32_t i = 0; i < nodes_.size(); ++i) {
    if (nodes_[i].state != State::spare) live.push_back(i);
  }
  if (live.size() + spare_.size() != nodes_.size()) return fail("spare stack size mismatch");
  std::sort(live.begin(), live.end(),
            [this](uint32_t a, uint32_t b) { return nodes_[a].offset < nodes_[b].offset; });
  uint64_t expect = 0, free_sum = 0, free_count = 0;
  for (size_t k = 0; k < live.size(); ++k) {
    const Node& n = nodes_[live[k]];
    if (n.offset != expect) return fail("ranges do not tile at " + std::to_string(expect));
    if (n.size == 0) return fail("empty range");
    const uint32_t want_prev = k == 0 ? kNoNode : live[k - 1];
    const uint32_t want_next = k + 1 == live.size() ? kNoNode : live[k + 1];
    if (n.addr_prev != want_prev || n.addr_next != want_next) return fail("neighbour links");
    if (n.state == State::free) {
      if (k > 0 && nodes_[live[k - 1]].state == State::free) return fail("adjacent free ranges");
      free_sum += n.size;
      ++free_count;
    }
    expect += n.size;
  }
  if (expect != capacity_) return fail("ranges do not cover the capacity");
  if (free_sum != free_bytes_ || free_count != free_ranges_) return fail("free counters");
  uint64_t filed = 0;
  for (uint32_t bin = 0; bin < classic_bins::kBins; ++bin) {
    const bool bit = (leaf_masks_[bin >> kMantissaBits] >> (bin & kMantissaMask)) & 1u;
    if (bit != (bin_heads_[bin] != kNoNode)) return fail("leaf bit of bin " + std::to_string(bin));
    uint32_t prev = kNoNode;
    for (uint32_t i = bin_heads_[bin]; i != kNoNode; i = nodes_[i].bin_next) {
      const Node& n = nodes_[i];
      if (n.state != State::free || classic_bins::round_down(n.size) != bin || n.bin_prev != prev) {
        return fail("bin list " + std::to_string(bin));
      }
      if (++filed > free_ranges_) return fail("bin lists longer than the free ranges");
      prev = i;
    }
  }
  if (filed != free_ranges_) return fail("free range missing from the bins");
  for (uint32_t g = 0; g < classic_bins::kGroups; ++g) {
    if (((top_mask_ >> g) & 1u) != (leaf_masks_[g] != 0 ? 1u : 0u)) return fail("top mask");
  }
  return true;
}

}  // namespace offset_util
