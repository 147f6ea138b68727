// unipool torch extension: MemoryHistory (see memory_history.hpp).
#include "memory_history.hpp"

#include <c10/util/Exception.h>

namespace unipool::torch_ext {
namespace {

thread_local const ContextScope* t_scope = nullptr;

TraceEntry::Action torch_action(DeviceTraceAction action) {
  switch (action) {
    case DeviceTraceAction::alloc: return TraceEntry::ALLOC;
    case DeviceTraceAction::free_requested: return TraceEntry::FREE_REQUESTED;
    case DeviceTraceAction::free_completed: return TraceEntry::FREE_COMPLETED;
    case DeviceTraceAction::segment_alloc: return TraceEntry::SEGMENT_ALLOC;
    case DeviceTraceAction::segment_free: return TraceEntry::SEGMENT_FREE;
    case DeviceTraceAction::segment_map: return TraceEntry::SEGMENT_MAP;
    case DeviceTraceAction::segment_unmap: return TraceEntry::SEGMENT_UNMAP;
    case DeviceTraceAction::oom: return TraceEntry::OOM;
  }
  TORCH_INTERNAL_ASSERT(false, "unipool: unknown device trace action");
}

uint32_t action_bit(TraceEntry::Action action) { return uint32_t{1} << static_cast<unsigned>(action); }

}  // namespace

ContextScope::ContextScope(std::shared_ptr<GatheredContext> context, TraceCall call)
    : context_(std::move(context)), call_(call), outer_(t_scope) {
  t_scope = this;
}

ContextScope::~ContextScope() { t_scope = outer_; }

const ContextScope* ContextScope::current() noexcept { return t_scope; }

MemoryHistory::MemoryHistory(int device_count) : rings_(static_cast<size_t>(device_count)) {}

void MemoryHistory::configure(bool enabled, CreateContextFn recorder, size_t max_entries, RecordContext when,
                              bool clear_history, const std::vector<std::string>& skip_actions) {
  TORCH_CHECK_VALUE(!enabled || max_entries > 0,
                    "unipool CUDA allocator: memory history needs max_entries >= 1, got 0");
  TORCH_CHECK_VALUE(!enabled || when == RecordContext::NEVER || recorder != nullptr,
                    "unipool CUDA allocator: recording contexts needs a context recorder");
  uint32_t skip = 0;
  for (const std::string& name : skip_actions) {
    skip |= action_bit(c10::CachingDeviceAllocator::parseTraceEntryAction(name));  // throws for unknown names
  }
  std::lock_guard lock(mutex_);
  skip_ = skip;
  for (TraceRing& ring : rings_) {
    if (enabled) ring.set_capacity(max_entries);
    // As torch does: stopping drops the history, so a later start is fresh.
    if (!enabled || clear_history) ring.clear();
  }
  if (!enabled) block_contexts_.clear();
  recorder_ = enabled ? recorder : nullptr;
  when_ = enabled ? when : RecordContext::NEVER;
  enabled_.store(enabled, std::memory_order_relaxed);
  gathers_.store(enabled && when != RecordContext::NEVER, std::memory_order_relaxed);
  observing_.store(enabled || !trackers_.empty(), std::memory_order_relaxed);
}

void MemoryHistory::add_tracker(AllocatorTraceTracker tracker) {
  TORCH_CHECK_VALUE(tracker != nullptr,
                    "unipool CUDA allocator: attachAllocatorTraceTracker needs a tracker, got an "
                    "empty function");
  std::lock_guard lock(mutex_);
  trackers_.push_back(std::move(tracker));
  observing_.store(true, std::memory_order_relaxed);
}

std::shared_ptr<GatheredContext> MemoryHistory::gather(RecordContext level) const {
  CreateContextFn recorder = nullptr;
  {
    std::lock_guard lock(mutex_);
    if (when_ < level) return nullptr;
    recorder = recorder_;
  }
  // Outside every lock: the recorder may take the GIL.
  return recorder != nullptr ? recorder() : nullptr;
}

DeviceTraceObserver MemoryHistory::observer(MempoolId_t mempool) {
  return [this, mempool](const DeviceTraceEvent& event) { record(event, mempool); };
}

void MemoryHistory::record(const DeviceTraceEvent& event, MempoolId_t mempool) {
  std::lock_guard lock(mutex_);
  std::shared_ptr<GatheredContext> context = context_for(event);
  // torch keeps stacks on trace entries from level alloc up; below that only
  // the blocks of the snapshot carry them.
  if (when_ < RecordContext::ALLOC) context = nullptr;
  append(TraceEntry(torch_action(event.action), static_cast<c10::DeviceIndex>(event.device), event.address, event.size,
                    reinterpret_cast<void*>(event.stream), mempool, c10::getApproximateTime(), std::move(context)));
}

// The stack an event's entry carries: the call that caused it, except that a
// completed free without a free call's own stack (one that waited for other
// streams and completed during a later call) keeps its allocation's stack.
std::shared_ptr<GatheredContext> MemoryHistory::context_for(const DeviceTraceEvent& event) {
  const ContextScope* scope = ContextScope::current();
  std::shared_ptr<GatheredContext> context = scope != nullptr ? scope->context() : nullptr;
  const bool from_free = scope != nullptr && scope->call() == TraceCall::free && context != nullptr;
  switch (event.action) {
    case DeviceTraceAction::alloc:
      if (context != nullptr) block_contexts_[event.address] = context;
      return context;
    case DeviceTraceAction::free_requested: return from_free ? context : nullptr;
    case DeviceTraceAction::free_completed: {
      std::shared_ptr<GatheredContext> allocated;
      if (auto it = block_contexts_.find(event.address); it != block_contexts_.end()) {
        allocated = std::move(it->second);
        block_contexts_.erase(it);
      }
      return from_free ? context : allocated;
    }
    default: return context;
  }
}

void MemoryHistory::append(TraceEntry&& entry) {
  for (const AllocatorTraceTracker& tracker : trackers_) {
    try {
      tracker(entry);
    } catch (...) {
      // One tracker's failure must not cost the others or the history an entry.
    }
  }
  const auto device = static_cast<size_t>(entry.device_);
  if (enabled() && (skip_ & action_bit(entry.action_)) == 0 && device < rings_.size()) {
    rings_[device].push(entry);
  }
}

void MemoryHistory::record_snapshot(int device, uint64_t active_bytes) {
  if (!observing()) return;
  std::lock_guard lock(mutex_);
  append(TraceEntry(TraceEntry::SNAPSHOT, static_cast<c10::DeviceIndex>(device), 0, active_bytes, nullptr, {0, 0},
                    c10::getApproximateTime()));
}

std::vector<std::vector<TraceEntry>> MemoryHistory::traces() const {
  const auto to_ns = clock_.makeConverter();
  std::vector<std::vector<TraceEntry>> out;
  {
    std::lock_guard lock(mutex_);
    out.reserve(rings_.size());
    for (const TraceRing& ring : rings_) out.push_back(ring.entries());
  }
  for (auto& device : out) {
    for (TraceEntry& e : device) e.time_.t_ = to_ns(e.time_.approx_t_) / 1000;
  }
  return out;
}

std::unordered_map<uint64_t, std::shared_ptr<GatheredContext>> MemoryHistory::block_contexts() const {
  std::lock_guard lock(mutex_);
  return block_contexts_;
}

std::shared_ptr<GatheredContext> MemoryHistory::block_context(uint64_t address) const {
  std::lock_guard lock(mutex_);
  auto it = block_contexts_.find(address);
  return it == block_contexts_.end() ? nullptr : it->second;
}

}  // namespace unipool::torch_ext
