// bench/device: the allocators a trace is replayed against.
//   unipool             DevicePool, plain segments, on the sim backend
//   unipool:expandable  DevicePool, expandable segments, on the sim backend
//   cub                 cub::CachingDeviceAllocator (CCCL) on the null GPU
//   cudamalloc          one backend allocation per request (cudaMalloc on the
//                       null GPU; the sim backend's allocate without it)
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace device_bench {

class Peer {
 public:
  virtual ~Peer() = default;
  virtual void* allocate(uint64_t bytes) = 0;
  virtual void deallocate(void* ptr, uint64_t bytes) = 0;
  // Bytes held from the backend right now (cached + in use).
  virtual uint64_t reserved() const = 0;
  // Backend allocate/free/map/unmap calls so far.
  virtual uint64_t backend_calls() const = 0;
};

struct PeerInfo {
  std::string name;
  std::unique_ptr<Peer> (*make)();
};

// Every peer this build has, in report order.
std::vector<PeerInfo> all_peers();
// Where cub and cudamalloc run ("null GPU runtime" or "sim backend").
const char* baseline_substrate();

}  // namespace device_bench
