// unipool: a RangeAllocator behind a mutex, for callers that share one.
//
// RangeAllocator is single-threaded on purpose: its pools hold their own lock
// around more than one call. This wrapper is for the simple case, one lock
// per call, the way RMM's thread_safe_resource_adaptor wraps a resource.
#pragma once

#include <mutex>
#include <string>

#include "unipool/range_allocator.hpp"

namespace unipool {

class LockedRangeAllocator {
 public:
  explicit LockedRangeAllocator(uint64_t capacity, RangeAllocatorOptions options = {})
      : inner_(capacity, options) {}

  RangeAllocation allocate(uint64_t size, uint64_t alignment = 0) {
    std::lock_guard lock(mutex_);
    return inner_.allocate(size, alignment);
  }
  Status deallocate(uint64_t offset, uint64_t handle) {
    std::lock_guard lock(mutex_);
    return inner_.deallocate(offset, handle);
  }
  // Checks the owner tag like RangeAllocator::deallocate (Status::foreign).
  Status deallocate(const RangeAllocation& a) {
    std::lock_guard lock(mutex_);
    return inner_.deallocate(a);
  }
  Status resize(uint64_t offset, uint64_t handle, uint64_t size) {
    std::lock_guard lock(mutex_);
    return inner_.resize(offset, handle, size);
  }
  Status extend(uint64_t bytes) {
    std::lock_guard lock(mutex_);
    return inner_.extend(bytes);
  }

  uint64_t capacity() const { return read(&RangeAllocator::capacity); }
  uint64_t used_bytes() const { return read(&RangeAllocator::used_bytes); }
  uint64_t requested_bytes() const { return read(&RangeAllocator::requested_bytes); }
  uint64_t free_bytes() const { return read(&RangeAllocator::free_bytes); }
  uint64_t live_allocations() const { return read(&RangeAllocator::live_allocations); }
  uint64_t free_ranges() const { return read(&RangeAllocator::free_ranges); }
  uint64_t largest_free() const { return read(&RangeAllocator::largest_free); }
  double fragmentation() const { return read(&RangeAllocator::fragmentation); }

  bool validate(std::string* why = nullptr) const {
    std::lock_guard lock(mutex_);
    return inner_.validate(why);
  }

  // Runs f(RangeAllocator&) under the lock: several calls as one step.
  template <class F>
  decltype(auto) with_lock(F&& f) {
    std::lock_guard lock(mutex_);
    return f(inner_);
  }

 private:
  template <class R>
  R read(R (RangeAllocator::*getter)() const noexcept) const {
    std::lock_guard lock(mutex_);
    return (inner_.*getter)();
  }

  mutable std::mutex mutex_;
  RangeAllocator inner_;
};

}  // namespace unipool
