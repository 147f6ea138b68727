// unipool: the device pool's trace events, what a trace observer
// (DevicePool::set_trace_observer) is told as blocks and segments come and go.
// They are the events PyTorch's memory history records, so a torch front end
// can keep its trace from them and a C++ runtime can watch the same stream.
#pragma once

#include <cstdint>
#include <functional>

#include "unipool/fence.hpp"

namespace unipool {

enum class DeviceTraceAction : uint8_t {
  alloc,           // a block was handed out
  free_requested,  // deallocate() was called on it
  free_completed,  // its range is free again: at once when only its owner
                   // stream used it, after the other streams' fences otherwise
  segment_alloc,   // a plain segment was taken from the backend
  segment_free,    // a plain segment is given back to the backend
  segment_map,     // granules of an expandable segment were mapped
  segment_unmap,   // granules of an expandable segment are unmapped
  oom,             // an allocation is about to throw OutOfMemoryError
};

// The name PyTorch's snapshot uses for the action ("alloc", "segment_map", ...).
const char* to_string(DeviceTraceAction action) noexcept;

struct DeviceTraceEvent {
  DeviceTraceAction action = DeviceTraceAction::alloc;
  int device = 0;
  // The block's or the mapped range's first byte. For oom: the bytes the
  // backend reports free on the device (PyTorch's convention).
  uint64_t address = 0;
  // The block's size (512-rounded, what it occupies in its segment), the
  // segment's or mapped range's bytes; for oom the rounded request.
  uint64_t size = 0;
  // The bytes the caller asked for (alloc, free_*, oom); 0 for segments.
  uint64_t requested = 0;
  // The stream the block was allocated on, or the one owning the segment.
  StreamHandle stream = 0;
};

// Called with the pool's lock held, on the thread whose call caused the
// event, so one pool's events arrive in the order they happened. It must be
// quick and must not call back into the same pool; what it throws is dropped.
using DeviceTraceObserver = std::function<void(const DeviceTraceEvent&)>;

}  // namespace unipool
