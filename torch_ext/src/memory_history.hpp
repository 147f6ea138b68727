// unipool torch extension: torch's memory history over unipool's device
// pools. The pools report their events to a DevicePool trace observer
// (unipool/device_trace.hpp); MemoryHistory turns them into torch
// TraceEntry records, keeps the last max_entries per device in a TraceRing,
// calls the attached AllocatorTraceTrackers, and remembers the allocation
// context of live blocks for the snapshot's segments.
//
// Stack contexts are gathered by the allocator's entry points before they
// call into a pool (ContextScope): torch's context recorder may take the GIL,
// which must never happen under a pool's lock. The observer, called under
// that lock, only reads the calling thread's scope.
#pragma once

#include <c10/cuda/CUDACachingAllocator.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "trace_ring.hpp"
#include "unipool/device_trace.hpp"

namespace unipool::torch_ext {

using c10::GatheredContext;
using c10::MempoolId_t;
using c10::CachingDeviceAllocator::AllocatorTraceTracker;
using c10::CachingDeviceAllocator::CreateContextFn;
using c10::CachingDeviceAllocator::RecordContext;

// What kind of allocator call a context was gathered for: a free's context
// belongs on its free entries, an allocation's on its alloc and segment ones.
enum class TraceCall : uint8_t { allocate, free, release };

// While alive, trace entries caused by the calling thread carry `context`.
class ContextScope {
 public:
  ContextScope(std::shared_ptr<GatheredContext> context, TraceCall call);
  ~ContextScope();
  ContextScope(const ContextScope&) = delete;
  ContextScope& operator=(const ContextScope&) = delete;

  static const ContextScope* current() noexcept;
  const std::shared_ptr<GatheredContext>& context() const noexcept { return context_; }
  TraceCall call() const noexcept { return call_; }

 private:
  std::shared_ptr<GatheredContext> context_;
  TraceCall call_;
  const ContextScope* outer_;
};

class MemoryHistory {
 public:
  explicit MemoryHistory(int device_count);

  // torch's recordHistory(): throws c10::Error for an unknown skip action,
  // max_entries 0 or a context level without a recorder.
  void configure(bool enabled, CreateContextFn recorder, size_t max_entries, RecordContext when, bool clear_history,
                 const std::vector<std::string>& skip_actions);
  void add_tracker(AllocatorTraceTracker tracker);

  bool enabled() const noexcept { return enabled_.load(std::memory_order_relaxed); }
  // Whether the pools need an observer: history on or a tracker attached.
  bool observing() const noexcept { return observing_.load(std::memory_order_relaxed); }
  // Whether entry points must gather a context: the hot path's one test.
  bool gathers_context() const noexcept { return gathers_.load(std::memory_order_relaxed); }
  // The calling thread's context if history records contexts at `level`.
  std::shared_ptr<GatheredContext> gather(RecordContext level) const;

  // The observer a pool of `mempool` reports to.
  DeviceTraceObserver observer(MempoolId_t mempool);
  // A "snapshot" entry on `device` (size: its active bytes), as torch marks
  // the point in the history a snapshot shows.
  void record_snapshot(int device, uint64_t active_bytes);
  // Every device's entries, oldest first, times in microseconds since the epoch.
  std::vector<std::vector<TraceEntry>> traces() const;
  // Allocation contexts of live blocks by address (recorded at level state+).
  std::unordered_map<uint64_t, std::shared_ptr<GatheredContext>> block_contexts() const;
  std::shared_ptr<GatheredContext> block_context(uint64_t address) const;

 private:
  void record(const DeviceTraceEvent& event, MempoolId_t mempool);              // lock taken
  std::shared_ptr<GatheredContext> context_for(const DeviceTraceEvent& event);  // lock held
  void append(TraceEntry&& entry);                                              // lock held

  mutable std::mutex mutex_;
  std::vector<TraceRing> rings_;  // by device
  std::vector<AllocatorTraceTracker> trackers_;
  std::unordered_map<uint64_t, std::shared_ptr<GatheredContext>> block_contexts_;
  CreateContextFn recorder_ = nullptr;
  RecordContext when_ = RecordContext::NEVER;
  uint32_t skip_ = 0;  // bit per TraceEntry::Action not kept in the rings
  std::atomic<bool> enabled_{false};
  std::atomic<bool> observing_{false};
  std::atomic<bool> gathers_{false};
  mutable c10::ApproximateClockToUnixTimeConverter clock_;
};

}  // namespace unipool::torch_ext
