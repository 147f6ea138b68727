// unipool torch extension: a bounded ring of torch TraceEntry records, the
// last `capacity` entries of one device's memory history. Not thread-safe:
// MemoryHistory guards it.
#pragma once

#include <c10/core/CachingDeviceAllocator.h>

#include <cstddef>
#include <vector>

namespace unipool::torch_ext {

using c10::CachingDeviceAllocator::TraceEntry;

class TraceRing {
 public:
  // At least one entry. Growing keeps every entry; shrinking keeps the newest.
  void set_capacity(size_t capacity);
  size_t capacity() const noexcept { return capacity_; }
  size_t size() const noexcept { return entries_.size(); }
  // Full: the oldest entry makes room. Memory grows with the entries, so a
  // capacity of sys.maxsize (torch's default) costs nothing up front.
  void push(const TraceEntry& entry);
  void clear() noexcept;
  // Oldest first.
  std::vector<TraceEntry> entries() const;

 private:
  void linearize();  // oldest entry to the front, so next_ is 0

  std::vector<TraceEntry> entries_;
  size_t next_ = 0;  // once full: the oldest entry, overwritten next
  size_t capacity_ = 1;
};

}  // namespace unipool::torch_ext
