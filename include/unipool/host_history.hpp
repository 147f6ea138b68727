// unipool: the host pool's history, a bounded record of what happened to its
// blocks and pinned memory (HostPool::record_history), off by default.
#pragma once

#include <cstdint>

namespace unipool {

enum class HostHistoryAction : uint8_t {
  alloc,       // a block was handed out (size: the bytes asked for)
  free,        // a block was freed, now or after a fence (size: its usable bytes)
  pin,         // a range was page-locked (registered) for the device
  unpin,       // a registered range was unregistered (size 0: the backend call names only its start)
  pin_failed,  // page-locking a range failed; the memory stays pageable or goes back
};

// "alloc", "free", "pin", "unpin", "pin_failed".
const char* to_string(HostHistoryAction action) noexcept;

struct HostHistoryEntry {
  HostHistoryAction action = HostHistoryAction::alloc;
  uint64_t address = 0;
  uint64_t size = 0;
  int64_t time_ns = 0;  // CLOCK_REALTIME, nanoseconds since the epoch
};

}  // namespace unipool
