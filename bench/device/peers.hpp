// bench/device: the allocators a trace is replayed against.
//   unipool             DevicePool, plain segments (cuda_malloc backend on
//                       the null GPU; the sim backend without it)
//   unipool:expandable  DevicePool, expandable segments (cuda_vmm backend on
//                       the null GPU; the sim backend without it)
//   cub                 cub::CachingDeviceAllocator (CCCL) on the null GPU
//   cudamalloc          one backend allocation per request (cudaMalloc on the
//                       null GPU; the sim backend's allocate without it)
//   torch               PyTorch's CUDACachingAllocator (libc10_cuda as
//                       shipped) on the shared null GPU, when torch was found
//   torch:expandable    the same with expandable_segments:True
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
  // Backend allocate/free/map/unmap calls since this peer was made (on the
  // null GPU: its cudaMalloc, cudaFree, cuMemCreate, cuMemMap, cuMemUnmap and
  // cuMemRelease, alike for every peer).
  virtual uint64_t backend_calls() const = 0;
  // Calls the allocator itself makes into its backend: unipool's pool into
  // its DeviceBackend (one map may be many driver calls); the other peers
  // call CUDA directly, so for them it is backend_calls().
  virtual uint64_t pool_calls() const { return backend_calls(); }
};

struct PeerInfo {
  std::string name;
  std::unique_ptr<Peer> (*make)();
  std::string runs_on;  // the substrate, for the header line and the JSON
};

// Every peer this build has, in report order.
std::vector<PeerInfo> all_peers();
// Where the peers run, in a few words ("null GPU (shared stand-ins)",
// "null GPU (in process)" or "sim backend").
const char* baseline_substrate();
// Peers this build lacks and why (printed once), or "".
std::string missing_peers();

}  // namespace device_bench
