// unipool: sleep and wake. A tagged part of a device pool gives its device
// memory back and takes it again later at the very same addresses, so
// tensors, data pointers and captured CUDA graphs stay valid across the cycle.
//
//   pools->sleep({.offload = {"weights"}, .discard = {"kv_cache", "cuda_graph"}});
//   ... the GPU serves another job ...
//   pools->wake();          // every tag asleep; or wake({"weights"})
//
// Sleep waits for the device's queued work, copies the live blocks of the
// offloaded tags into host pool blocks (one batch on the backend's copy
// stream), then unmaps every mapped granule of the tags' segments, free ones
// included, keeping the virtual reservations; discarded blocks lose their
// contents. Wake maps memory again where it was, copies the offloaded
// contents back and frees their host blocks. Segment hooks fire on unmap
// and on map, so NCCL or RDMA registrations follow.
//
// It needs a backend that can unmap and map at the same address (cuda_vmm,
// sim); on cuda_malloc sleep is refused (Status::bad_argument). While a tag
// is not awake, allocating from it throws Status::asleep; freeing its blocks
// is fine. Sleep and wake must not run concurrently with allocations from
// the tags they act on.
//
// Failures: a backend or host failure before any memory was unmapped leaves
// the tag awake and unchanged. One after that leaves it `partial`: sleep()
// again finishes the sleep, wake() undoes it; both may be retried. Nothing
// leaks either way and validate() holds.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace unipool {

struct DeviceSleepRequest {
  std::vector<std::string> offload;  // contents kept in host memory
  std::vector<std::string> discard;  // contents dropped (undefined after wake)
};

// What one sleep() or wake() did.
struct DeviceSleepResult {
  uint64_t offloaded_bytes = 0;  // copied to host (sleep) or back (wake)
  uint64_t discarded_bytes = 0;  // live blocks whose contents were dropped
  uint64_t released_bytes = 0;   // device memory unmapped (sleep) or mapped again (wake)
  double seconds = 0;
};

// One tag's part of a pool (DevicePool::tag_stats()).
struct DeviceTagStats {
  std::string tag;
  std::string state;             // "awake", "asleep" or "partial"
  uint64_t allocated_bytes = 0;  // live blocks, asleep or not
  uint64_t blocks = 0;
  uint64_t reserved_bytes = 0;   // device memory mapped for the tag now
  uint64_t offloaded_bytes = 0;  // by the last sleep
  uint64_t discarded_bytes = 0;  // by the last sleep
  uint64_t released_bytes = 0;   // by the last sleep
  uint64_t host_bytes = 0;       // host memory holding offloaded contents now
  uint64_t sleeps = 0;
  uint64_t wakes = 0;
  double last_sleep_seconds = 0;  // how long the last sleep took
  double last_wake_seconds = 0;
};

}  // namespace unipool
