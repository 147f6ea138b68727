// unipool null GPU: the one process-wide state behind every null GPU entry
// point, and the prologue each entry point runs (lock, count, inject).
#pragma once

#include <cuda.h>
#include <cuda_runtime_api.h>
#include <nccl.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <unordered_set>
#include <vector>

#include "nullgpu/nullgpu.hpp"

// The runtime's opaque handle types are incomplete in the CUDA headers; the
// null GPU gives them a body. Handles are validated against the live sets
// before they are dereferenced, so a stale handle is an error, not UB.
struct CUstream_st {
  int device;
  unsigned flags;
};
struct CUevent_st {
  int device;
  unsigned flags;
  uintptr_t stream;  // where it was last recorded (0 = a default stream)
  bool recorded;
  bool complete;
};

namespace unipool::nullgpu::detail {

enum class Family { runtime, driver, nccl };
// What a call needs to succeed besides an armed fault not hitting it.
enum class Needs { nothing, driver, device };

struct DeviceAllocation {  // cudaMalloc or ncclMemAlloc
  int device;
  uint64_t bytes;  // charged to the device
  bool nccl;
};
struct Physical {  // cuMemCreate
  int device;
  uint64_t bytes;
  bool mapped;
  bool released;  // cuMemRelease called; freed when unmapped
};
struct Mapping {  // cuMemMap, keyed by address
  uint64_t bytes;
  CUmemGenericAllocationHandle handle;
};
struct Registration {  // cudaHostRegister, keyed by address
  uint64_t bytes;
  int device;
};
struct ArmedFault {
  Fault fault;
  uint64_t remaining;
};

struct State {
  std::mutex mutex;
  Config config;
  std::atomic<uint64_t> generation{1};  // bumped by reset(): threads start afresh

  std::map<std::string, uint64_t, std::less<>> calls;
  uint64_t total_calls = 0;
  std::vector<ArmedFault> faults;
  uint64_t faults_fired = 0;
  std::string last_fault;
  uint64_t byte_limit = kUnlimited;
  int sticky = 0;

  std::vector<uint64_t> charged;  // per device
  std::map<uintptr_t, DeviceAllocation> allocations;
  std::map<uintptr_t, uint64_t> reservations;  // base -> bytes
  std::map<CUmemGenericAllocationHandle, Physical> physical;
  CUmemGenericAllocationHandle next_handle = 1;
  std::map<uintptr_t, Mapping> mappings;
  std::map<uintptr_t, Registration> registrations;
  uint64_t pinned = 0;
  std::unordered_set<CUstream_st*> streams;
  std::unordered_set<CUevent_st*> events;
  std::unordered_set<uintptr_t> nccl_registrations;
  uintptr_t next_nccl_registration = 0x1000;

  bool valid_device(int device) const { return device >= 0 && device < config.device_count; }
  // Whether `bytes` more fit on `device` (byte limit and capacity).
  bool fits(int device, uint64_t bytes) const;
  void charge(int device, uint64_t bytes) { charged[static_cast<size_t>(device)] += bytes; }
  void uncharge(int device, uint64_t bytes) { charged[static_cast<size_t>(device)] -= bytes; }
  // Events recorded on `stream` (any device when device < 0) complete.
  void complete_events(uintptr_t stream, int device);
  void complete_device_events(int device);
  void release_everything();  // for reset(): frees what tests leaked
};

State& state();

// The calling thread's CUDA view: current device and pending error.
struct ThreadState {
  uint64_t generation = 0;
  int device = 0;
  cudaError_t pending = cudaSuccess;
};
ThreadState& thread_state();

// Every counted entry point starts with a Call: it takes the lock, counts
// the call and decides whether it is refused: an injected fault, a sticky
// error, no driver (unless it needs nothing), no device (if it needs one).
// Runtime failures are left pending for the thread.
class Call {
 public:
  Call(const char* function, Family family, Needs needs = Needs::device);

  bool refused() const noexcept { return refusal_ != 0; }
  int refusal() const noexcept { return refusal_; }
  cudaError_t runtime_refusal() { return fail(static_cast<cudaError_t>(refusal_)); }
  CUresult driver_refusal() const noexcept { return static_cast<CUresult>(refusal_); }
  ncclResult_t nccl_refusal() const noexcept { return static_cast<ncclResult_t>(refusal_); }

  // Records a runtime failure as the thread's pending error; returns it.
  cudaError_t fail(cudaError_t err);

  State& s;

 private:
  std::unique_lock<std::mutex> lock_;
  int refusal_ = 0;
};

// The device a stream belongs to (the current device for a default stream),
// or -1 for a handle that is not a live stream.
int stream_device(const State& s, cudaStream_t stream);
// A stream's value as events and tests see it: cudaStreamLegacy is stream 0.
uintptr_t stream_key(cudaStream_t stream);

// The null GPU driver function registered under `name`, or null.
void* driver_symbol(const char* name);

}  // namespace unipool::nullgpu::detail
