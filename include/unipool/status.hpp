// unipool: status codes shared by every layer, and their messages.
#pragma once

#include <cstdint>

namespace unipool {

enum class Status : uint8_t {
  ok = 0,
  zero_size,         // a request of 0 bytes
  too_large,         // larger than the pool could ever hold
  out_of_space,      // no free range fits now
  allocation_limit,  // the configured cap on live allocations is reached
  not_live,          // free of something that is not a live allocation
  bad_alignment,     // an alignment that is not a power of two
  bad_argument,      // any other invalid argument
  backend_error,     // the memory backend failed for a reason other than being full
  foreign,           // an allocation made by another allocator
  corrupted,         // the pool found its own metadata overwritten (a write after free)
  asleep,            // the memory's tag is asleep (DevicePool::sleep), or awake for a wake
};

// A short, stable, human-readable description ("double free or ...").
const char* to_string(Status s) noexcept;

}  // namespace unipool
