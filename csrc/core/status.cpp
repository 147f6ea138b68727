// unipool: status messages.
#include "unipool/status.hpp"

namespace unipool {

const char* to_string(Status s) noexcept {
  switch (s) {
    case Status::ok: return "ok";
    case Status::zero_size: return "requested size is zero";
    case Status::too_large: return "requested size is larger than the pool";
    case Status::out_of_space: return "no free range large enough (out of memory)";
    case Status::allocation_limit: return "the configured limit on live allocations is reached";
    case Status::not_live:
      return "not a live allocation (double free, foreign or interior pointer)";
    case Status::bad_alignment: return "alignment is not a power of two";
    case Status::bad_argument: return "invalid argument";
    case Status::backend_error: return "the memory backend failed (see the message)";
    case Status::foreign: return "the allocation belongs to another allocator";
    case Status::corrupted: return "heap corruption: a free block was written after it was freed";
    case Status::asleep: return "the memory's tag is asleep (or awake, for a wake)";
  }
  return "unknown status";
}

}  // namespace unipool
