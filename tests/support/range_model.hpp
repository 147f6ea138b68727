// unipool tests: a reference model of RangeAllocator and a harness that runs
// both side by side.
//
// RangeModel is deliberately naive: live ranges in a std::map by offset, the
// free gaps between them in another, gaps grouped by size bin. It knows
// nothing of nodes, bitmaps or links, only what the allocator promises:
//  * an allocation lies in one free gap, at that gap's start rounded up to the
//    alignment, and the gap is at least size + (alignment - pool alignment);
//  * the request of `need` bytes looks in bin_of(need) first and takes the
//    best fit among the first fit_scan_limit ranges there; otherwise it takes
//    the first non-empty bin above, best fit among its first fit_scan_limit;
//  * free ranges merge with free neighbours, so the allocator's free ranges
//    are exactly the model's gaps;
//  * every misuse returns its Status and changes nothing.
// The model cannot know the order of a bin's list, so where the bounded scan
// may or may not see a fit it accepts both outcomes; everywhere else it
// demands one answer.
//
// Differential runs an allocator and a model together. Each operation returns
// "" when both agree and a description of the disagreement otherwise; gtest
// tests turn that into a failure, the fuzz target into an abort.
#pragma once

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <iterator>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/size_bins.hpp"
#include "unipool/range_allocator.hpp"
#include "unipool/status.hpp"

namespace unipool::test {

inline constexpr uint64_t kMaxBytes = uint64_t{1} << 62;

inline uint64_t align_up(uint64_t value, uint64_t alignment) {
  return (value + alignment - 1) & ~(alignment - 1);
}

class RangeModel {
 public:
  struct Live {
    uint64_t extent;
    uint64_t requested;
    uint64_t handle;
    size_t slot;  // index in live_offsets_
  };
  using GapMap = std::map<uint64_t, uint64_t>;  // offset -> size

  explicit RangeModel(uint64_t capacity) : capacity_(capacity) {
    if (capacity > 0) add_gap(0, capacity);
  }

  uint64_t capacity() const { return capacity_; }
  uint64_t used() const { return used_; }
  uint64_t requested() const { return requested_; }
  uint64_t live_count() const { return live_.size(); }
  uint64_t gap_count() const { return gaps_.size(); }
  uint64_t free_bytes() const { return capacity_ - used_; }
  const GapMap& gaps() const { return gaps_; }
  const std::map<uint64_t, Live>& live() const { return live_; }

  uint64_t largest_gap() const { return bins_.empty() ? 0 : *bins_.rbegin()->second.rbegin(); }
  uint64_t trailing_gap() const {
    if (gaps_.empty()) return 0;
    const auto last = std::prev(gaps_.end());
    return last->first + last->second == capacity_ ? last->second : 0;
  }

  // The i-th live allocation (any fixed order), i < live_count().
  uint64_t live_offset(size_t i) const { return live_offsets_[i]; }
  const Live* live_at(uint64_t offset) const {
    const auto it = live_.find(offset);
    return it == live_.end() ? nullptr : &it->second;
  }
  bool handle_is_live(uint64_t handle) const { return handles_.count(handle) != 0; }

  // The gap that holds all of [offset, offset + length), or gaps().end().
  GapMap::const_iterator gap_holding(uint64_t offset, uint64_t length) const {
    auto it = gaps_.upper_bound(offset);
    if (it == gaps_.begin()) return gaps_.end();
    --it;
    if (offset + length > it->first + it->second) return gaps_.end();
    return it;
  }

  // The sizes of the gaps filed in bin b (nullptr when none).
  const std::multiset<uint64_t>* bin(uint32_t b) const {
    const auto it = bins_.find(b);
    return it == bins_.end() ? nullptr : &it->second;
  }
  // The first non-empty bin strictly above b.
  std::optional<uint32_t> first_bin_above(uint32_t b) const {
    const auto it = bins_.upper_bound(b);
    if (it == bins_.end()) return std::nullopt;
    return it->first;
  }

  // Marks [offset, offset + extent) used; it must lie inside one gap.
  bool place(uint64_t offset, uint64_t extent, uint64_t requested, uint64_t handle) {
    const auto g = gap_holding(offset, extent);
    if (g == gaps_.end()) return false;
    const uint64_t gap_start = g->first, gap_end = g->first + g->second;
    remove_gap(g);
    if (offset > gap_start) add_gap(gap_start, offset - gap_start);
    if (offset + extent < gap_end) add_gap(offset + extent, gap_end - offset - extent);
    live_.emplace(offset, Live{extent, requested, handle, live_offsets_.size()});
    live_offsets_.push_back(offset);
    handles_.emplace(handle, offset);
    used_ += extent;
    requested_ += requested;
    return true;
  }

  // Frees the live range at offset, merging the gap with its neighbours.
  void release(uint64_t offset) {
    const auto it = live_.find(offset);
    const Live l = it->second;
    live_.erase(it);
    // Swap-remove from the random-access list.
    const uint64_t moved = live_offsets_.back();
    live_offsets_[l.slot] = moved;
    live_offsets_.pop_back();
    if (moved != offset) live_.at(moved).slot = l.slot;
    handles_.erase(l.handle);
    used_ -= l.extent;
    requested_ -= l.requested;

    uint64_t start = offset, end = offset + l.extent;
    auto right = gaps_.find(end);
    if (right != gaps_.end()) {
      end += right->second;
      remove_gap(right);
    }
    auto left = gaps_.lower_bound(offset);
    if (left != gaps_.begin()) {
      --left;
      if (left->first + left->second == offset) {
        start = left->first;
        remove_gap(left);
      }
    }
    add_gap(start, end - start);
  }

  // Appends bytes (already rounded) at the end, merging with a trailing gap.
  void extend(uint64_t bytes) {
    uint64_t start = capacity_;
    if (!gaps_.empty()) {
      const auto last = std::prev(gaps_.end());
      if (last->first + last->second == capacity_) {
        start = last->first;
        remove_gap(last);
      }
    }
    capacity_ += bytes;
    add_gap(start, capacity_ - start);
  }

 private:
  void add_gap(uint64_t offset, uint64_t size) {
    gaps_.emplace(offset, size);
    bins_[core::bin_of(size)].insert(size);
  }
  void remove_gap(GapMap::const_iterator g) {
    const uint32_t b = core::bin_of(g->second);
    auto& sizes = bins_.at(b);
    sizes.erase(sizes.find(g->second));
    if (sizes.empty()) bins_.erase(b);
    gaps_.erase(g);
  }

  uint64_t capacity_;
  uint64_t used_ = 0;
  uint64_t requested_ = 0;
  std::map<uint64_t, Live> live_;
  std::vector<uint64_t> live_offsets_;
  std::unordered_map<uint64_t, uint64_t> handles_;  // handle -> offset
  GapMap gaps_;
  std::map<uint32_t, std::multiset<uint64_t>> bins_;
};

class Differential {
 public:
  Differential(uint64_t capacity, RangeAllocatorOptions options)
      : alloc_(capacity, options),
        model_(capacity & ~(options.alignment - 1)),
        base_(options.alignment),
        scan_limit_(options.fit_scan_limit > 0 ? options.fit_scan_limit : 1),
        max_allocations_(options.max_allocations) {}

  RangeAllocator& allocator() { return alloc_; }
  const RangeAllocator& allocator() const { return alloc_; }
  const RangeModel& model() const { return model_; }
  uint64_t base_alignment() const { return base_; }

  // The last allocate() call's result.
  const RangeAllocation& last_allocation() const { return last_; }
  // How often a block freed by the previous call had to be reused at once.
  uint64_t exact_reuse_checks() const { return exact_reuse_checks_; }

  std::string allocate(uint64_t size, uint64_t alignment = 0) {
    const std::optional<std::pair<uint64_t, uint64_t>> hole = std::exchange(fresh_hole_, std::nullopt);
    const RangeAllocation a = alloc_.allocate(size, alignment);
    last_ = a;
    std::ostringstream err;
    err << "allocate(size=" << size << ", alignment=" << alignment << ") -> " << to_string(a.status)
        << " at " << a.offset << ": ";

    Status expected = Status::ok;
    if (size == 0) {
      expected = Status::zero_size;
    } else if (alignment != 0 && !std::has_single_bit(alignment)) {
      expected = Status::bad_alignment;
    } else if (size > model_.capacity() || alignment >= kMaxBytes) {
      expected = Status::too_large;
    } else if (max_allocations_ != 0 && model_.live_count() >= max_allocations_) {
      expected = Status::allocation_limit;
    }
    if (expected != Status::ok) {
      if (a.status != expected) return err.str() + "expected " + to_string(expected);
      if (a.offset != RangeAllocation::kNoOffset || static_cast<bool>(a)) {
        return err.str() + "a failed allocation carries an offset";
      }
      return check_counters();
    }

    const uint64_t align = std::max(alignment, base_);
    const uint64_t extent = align_up(size, base_);
    const uint64_t need = extent + (align - base_);
    const uint32_t own = core::bin_of(need);
    const std::multiset<uint64_t>* own_bin = model_.bin(own);
    const bool own_fully_scanned = own_bin == nullptr || own_bin->size() <= scan_limit_;
    std::optional<uint64_t> own_best;  // smallest gap >= need in the own bin
    if (own_bin != nullptr) {
      const auto it = own_bin->lower_bound(need);
      if (it != own_bin->end()) own_best = *it;
    }
    const std::optional<uint32_t> above = model_.first_bin_above(own);
    // A block freed by the previous call (and not merged) is at the head of
    // its bin: a request of exactly its extent must get it back.
    const bool must_reuse = hole && align == base_ && extent == hole->second;
    if (must_reuse) {
      ++exact_reuse_checks_;
      if (a.status != Status::ok || a.offset != hole->first) {
        err << "the block of " << hole->second << " at " << hole->first
            << " freed by the previous call was not reused for the same size";
        return err.str();
      }
    }

    if (a.status == Status::out_of_space) {
      if (a.offset != RangeAllocation::kNoOffset) return err.str() + "a failed allocation carries an offset";
      if (above) {
        err << "a free range of " << *model_.bin(*above)->begin() << " >= " << need
            << " exists in bin " << *above << " above the request's bin " << own;
        return err.str();
      }
      if (own_best && own_fully_scanned) {
        err << "the request's own bin " << own << " holds only " << own_bin->size()
            << " ranges (all scanned) and one of " << *own_best << " >= " << need << " fits";
        return err.str();
      }
      return check_counters();
    }
    if (a.status != Status::ok) return err.str() + "unexpected status";

    // Success: where did it go?
    if (a.offset % align != 0) return err.str() + "offset not aligned to " + std::to_string(align);
    const auto g = model_.gap_holding(a.offset, extent);
    if (g == model_.gaps().end()) {
      return err.str() + "[offset, offset+" + std::to_string(extent) +
             ") overlaps a live range or leaves [0, capacity)";
    }
    const uint64_t gap_offset = g->first, gap_size = g->second;
    err << "(free range [" << gap_offset << ", +" << gap_size << ") of bin " << core::bin_of(gap_size)
        << ", need " << need << " in bin " << own << ") ";
    if (a.offset != align_up(gap_offset, align)) return err.str() + "not placed at the free range's aligned start";
    // A stricter alignment first takes what a plain request of `extent` would
    // get, when that range happens to start aligned; otherwise it searches
    // with room for the worst-case head gap (`need`).
    if (align > base_ && gap_offset % align == 0 && placement_error(extent, gap_size).empty()) {
      // the plain choice, already aligned
    } else if (const std::string why = placement_error(need, gap_size); !why.empty()) {
      return err.str() + why;
    }
    if (a.handle == 0 || model_.handle_is_live(a.handle)) return err.str() + "handle 0 or already live";
    model_.place(a.offset, extent, size, a.handle);
    const uint64_t reported = alloc_.allocation_size(a.offset, a.handle);
    if (reported != extent) {
      return err.str() + "allocation_size() " + std::to_string(reported) + " != extent " + std::to_string(extent);
    }
    return check_counters();
  }

  // allocate_at(offset, size): ok exactly when the model has [offset, offset
  // + extent) inside one gap (and no misuse or cap applies); then the range is
  // placed there, at that very offset.
  std::string allocate_at(uint64_t offset, uint64_t size) {
    fresh_hole_.reset();
    const RangeAllocation a = alloc_.allocate_at(offset, size);
    last_ = a;
    std::ostringstream err;
    err << "allocate_at(offset=" << offset << ", size=" << size << ") -> " << to_string(a.status) << ": ";
    const uint64_t extent = align_up(size, base_);
    Status expected = Status::ok;
    if (size == 0) {
      expected = Status::zero_size;
    } else if (offset % base_ != 0) {
      expected = Status::bad_alignment;
    } else if (size > model_.capacity()) {
      expected = Status::too_large;
    } else if (offset > model_.capacity() - extent) {
      expected = Status::bad_argument;
    } else if (max_allocations_ != 0 && model_.live_count() >= max_allocations_) {
      expected = Status::allocation_limit;
    } else if (model_.gap_holding(offset, extent) == model_.gaps().end()) {
      expected = Status::out_of_space;
    }
    if (a.status != expected) return err.str() + "expected " + to_string(expected);
    if (expected != Status::ok) {
      if (a.offset != RangeAllocation::kNoOffset) return err.str() + "a failed allocation carries an offset";
      return check_counters();
    }
    if (a.offset != offset) return err.str() + "placed at " + std::to_string(a.offset);
    if (a.handle == 0 || model_.handle_is_live(a.handle)) return err.str() + "handle 0 or already live";
    model_.place(offset, extent, size, a.handle);
    if (alloc_.allocation_size(offset, a.handle) != extent) return err.str() + "allocation_size() != extent";
    return check_counters();
  }

  // Why a free range of `gap_size` is not where the allocator's policy puts
  // a request needing `need` bytes ("" when it is).
  std::string placement_error(uint64_t need, uint64_t gap_size) const {
    if (gap_size < need) return "the chosen free range is smaller than size + alignment slack";
    const uint32_t own = core::bin_of(need);
    const std::multiset<uint64_t>* own_bin = model_.bin(own);
    const bool own_fully_scanned = own_bin == nullptr || own_bin->size() <= scan_limit_;
    std::optional<uint64_t> own_best;
    if (own_bin != nullptr) {
      const auto it = own_bin->lower_bound(need);
      if (it != own_bin->end()) own_best = *it;
    }
    const std::optional<uint32_t> above = model_.first_bin_above(own);
    const uint32_t chosen = core::bin_of(gap_size);
    if (chosen == own) {
      if (own_fully_scanned && gap_size != *own_best) {
        return "not the best fit of its fully scanned bin: " + std::to_string(*own_best) + " fits better";
      }
      return "";
    }
    if (!above || chosen != *above) return "took a bin other than the first non-empty one above the request's";
    if (own_best && own_fully_scanned) {
      return "skipped a fit of " + std::to_string(*own_best) + " in its own, fully scanned, bin";
    }
    const std::multiset<uint64_t>& above_bin = *model_.bin(*above);
    if (above_bin.size() <= scan_limit_ && gap_size != *above_bin.begin()) {
      return "not the best fit of the fully scanned bin above: " + std::to_string(*above_bin.begin());
    }
    return "";
  }

  // Frees the i-th live allocation (i < model().live_count()).
  std::string free_live(size_t i) {
    fresh_hole_.reset();
    const uint64_t offset = model_.live_offset(i);
    const uint64_t handle = model_.live_at(offset)->handle;
    const Status s = alloc_.deallocate(offset, handle);
    if (s != Status::ok) {
      return "free(" + std::to_string(offset) + ", live handle) -> " + to_string(s);
    }
    note_freed(offset, handle);
    if (alloc_.allocation_size(offset, handle) != 0) return "allocation_size() of a freed allocation is not 0";
    return check_counters();
  }

  // free(offset, handle) of anything: ok exactly when the model has that
  // allocation live, not_live otherwise (with nothing changed).
  std::string free_any(uint64_t offset, uint64_t handle) {
    fresh_hole_.reset();
    const RangeModel::Live* l = model_.live_at(offset);
    const bool live = l != nullptr && l->handle == handle;
    const Status s = alloc_.deallocate(offset, handle);
    const Status expected = live ? Status::ok : Status::not_live;
    if (s != expected) {
      return "free(" + std::to_string(offset) + ", " + std::to_string(handle) + ") -> " + to_string(s) +
             ", expected " + to_string(expected);
    }
    if (live) note_freed(offset, handle);
    return check_counters();
  }

  // Frees again one of the recently freed allocations: always not_live,
  // whether or not its node has since been reused (the generation differs).
  std::string free_stale(size_t pick) {
    if (freed_.empty()) return {};
    const auto [offset, handle] = freed_[pick % freed_.size()];
    if (model_.handle_is_live(handle)) return "a freed handle was given out again: " + std::to_string(handle);
    return free_any(offset, handle);
  }

  // free(offset + delta, handle) of the i-th live allocation, 0 < delta < extent.
  std::string free_interior(size_t i, uint64_t delta) {
    const uint64_t offset = model_.live_offset(i);
    const RangeModel::Live& l = *model_.live_at(offset);
    if (l.extent < 2) return {};
    const uint64_t inside = offset + 1 + delta % (l.extent - 1);
    if (alloc_.allocation_size(inside, l.handle) != 0) return "allocation_size() of an interior offset is not 0";
    return free_any(inside, l.handle);
  }

  std::string extend(uint64_t bytes) {
    fresh_hole_.reset();
    const Status s = alloc_.extend(bytes);
    const uint64_t rounded = bytes & ~(base_ - 1);
    Status expected = Status::ok;
    if (rounded != 0 && (rounded >= kMaxBytes || model_.capacity() + rounded >= kMaxBytes)) {
      expected = Status::too_large;
    }
    if (s != expected) {
      return "extend(" + std::to_string(bytes) + ") -> " + to_string(s) + ", expected " + to_string(expected);
    }
    if (s == Status::ok && rounded != 0) model_.extend(rounded);
    return check_counters();
  }

  // The O(1) queries against the model.
  std::string check_counters() const {
    std::ostringstream err;
    auto mismatch = [&](const char* what, uint64_t got, uint64_t want) {
      err << what << "() = " << got << ", model says " << want << "; ";
    };
    if (alloc_.capacity() != model_.capacity()) mismatch("capacity", alloc_.capacity(), model_.capacity());
    if (alloc_.used_bytes() != model_.used()) mismatch("used_bytes", alloc_.used_bytes(), model_.used());
    if (alloc_.requested_bytes() != model_.requested()) {
      mismatch("requested_bytes", alloc_.requested_bytes(), model_.requested());
    }
    if (alloc_.free_bytes() != model_.free_bytes()) mismatch("free_bytes", alloc_.free_bytes(), model_.free_bytes());
    if (alloc_.live_allocations() != model_.live_count()) {
      mismatch("live_allocations", alloc_.live_allocations(), model_.live_count());
    }
    if (alloc_.free_ranges() != model_.gap_count()) mismatch("free_ranges", alloc_.free_ranges(), model_.gap_count());
    if (alloc_.largest_free() != model_.largest_gap()) {
      mismatch("largest_free", alloc_.largest_free(), model_.largest_gap());
    }
    if (alloc_.trailing_free() != model_.trailing_gap()) {
      mismatch("trailing_free", alloc_.trailing_free(), model_.trailing_gap());
    }
    const double want_frag =
        model_.free_bytes() == 0
            ? 0.0
            : 1.0 - static_cast<double>(model_.largest_gap()) / static_cast<double>(model_.free_bytes());
    if (std::abs(alloc_.fragmentation() - want_frag) > 1e-12) {
      err << "fragmentation() = " << alloc_.fragmentation() << ", model says " << want_frag << "; ";
    }
    return err.str();
  }

  // validate(), then every range of for_each_range() against the model.
  std::string check_full() const {
    std::string why;
    if (!alloc_.validate(&why)) return "validate(): " + why;
    std::string err = check_counters();
    if (!err.empty()) return err;
    auto gap = model_.gaps().begin();
    auto live = model_.live().begin();
    uint64_t count = 0;
    alloc_.for_each_range([&](const RangeInfo& r) {
      if (!err.empty()) return;
      ++count;
      const std::string at = "range at " + std::to_string(r.offset) + ": ";
      if (r.used) {
        if (live == model_.live().end() || live->first != r.offset) {
          err = at + "used, but the model has no allocation there";
        } else if (live->second.extent != r.size || live->second.requested != r.requested) {
          err = at + "size/requested " + std::to_string(r.size) + "/" + std::to_string(r.requested) +
                " != model " + std::to_string(live->second.extent) + "/" + std::to_string(live->second.requested);
        } else {
          ++live;
        }
      } else {
        if (gap == model_.gaps().end() || gap->first != r.offset || gap->second != r.size) {
          err = at + "free range of " + std::to_string(r.size) + " is not a gap of the model";
        } else if (r.requested != 0) {
          err = at + "a free range reports requested bytes";
        } else {
          ++gap;
        }
      }
    });
    if (!err.empty()) return "for_each_range(): " + err;
    if (count != model_.live_count() + model_.gap_count()) return "for_each_range(): ranges missing";
    return {};
  }

 private:
  // Updates the model after a successful free and remembers the allocation
  // for stale frees and, when it did not merge, for the exact-reuse check.
  void note_freed(uint64_t offset, uint64_t handle) {
    const uint64_t extent = model_.live_at(offset)->extent;
    model_.release(offset);
    const auto g = model_.gaps().find(offset);
    if (g != model_.gaps().end() && g->second == extent) fresh_hole_.emplace(offset, extent);
    if (freed_.size() < 64) {
      freed_.emplace_back(offset, handle);
    } else {
      freed_[freed_next_++ % freed_.size()] = {offset, handle};
    }
  }

  RangeAllocator alloc_;
  RangeModel model_;
  uint64_t base_;
  uint64_t scan_limit_;
  uint64_t max_allocations_;
  RangeAllocation last_;
  std::optional<std::pair<uint64_t, uint64_t>> fresh_hole_;  // (offset, size)
  uint64_t exact_reuse_checks_ = 0;
  std::vector<std::pair<uint64_t, uint64_t>> freed_;
  size_t freed_next_ = 0;
};

}  // namespace unipool::test
