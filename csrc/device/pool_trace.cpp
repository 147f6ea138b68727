// unipool device pool: trace events for an observer (device_trace.hpp). The
// pool calls trace() where blocks and segments change hands, always with its
// lock held, so one pool's events reach the observer in the order they
// happened; the observer is a plain std::function, so none set costs a
// single branch and no allocation or lock.
#include "device/pool_impl.hpp"

namespace unipool {

const char* to_string(DeviceTraceAction action) noexcept {
  switch (action) {
    case DeviceTraceAction::alloc: return "alloc";
    case DeviceTraceAction::free_requested: return "free_requested";
    case DeviceTraceAction::free_completed: return "free_completed";
    case DeviceTraceAction::segment_alloc: return "segment_alloc";
    case DeviceTraceAction::segment_free: return "segment_free";
    case DeviceTraceAction::segment_map: return "segment_map";
    case DeviceTraceAction::segment_unmap: return "segment_unmap";
    case DeviceTraceAction::oom: return "oom";
  }
  return "unknown";
}

// Out of line and cold: only reached with an observer set.
[[gnu::noinline, gnu::cold]] void DevicePool::Impl::emit_trace(DeviceTraceAction action, uint64_t address,
                                                               uint64_t size, uint64_t requested,
                                                               StreamHandle stream) const {
  const DeviceTraceEvent event{action, device, address, size, requested, stream};
  try {
    trace_observer(event);
  } catch (...) {
    // An observer cannot change what the pool does; see DeviceTraceObserver.
  }
}

void DevicePool::set_trace_observer(DeviceTraceObserver observer) {
  {
    std::lock_guard lock(impl_->mutex);
    std::swap(impl_->trace_observer, observer);
  }
  // `observer` now holds the one replaced: destroyed here, outside the lock,
  // since what it captured may take locks of its own as it goes.
}

}  // namespace unipool
