// unipool backend/cuda: fences as CUDA events. Events are created once per
// device with cudaEventDisableTiming (the cheapest kind), recorded on the
// stream, polled with cudaEventQuery, and go back to a per-device pool on
// release, so steady-state fencing creates no events.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <mutex>
#include <vector>

#include "unipool/device_backend.hpp"
#include "unipool/fence.hpp"

namespace unipool::backend::cuda {

class CudaEventFenceSource final : public FenceSource {
 public:
  CudaEventFenceSource() = default;
  ~CudaEventFenceSource() override;  // destroys every event, pooled or not
  CudaEventFenceSource(const CudaEventFenceSource&) = delete;
  CudaEventFenceSource& operator=(const CudaEventFenceSource&) = delete;

  // kNoFence when the device cannot be made current or the event cannot be
  // created or recorded; the CUDA error is then in last_error().
  FenceId record(int device, StreamHandle stream) override;
  // An error other than "not ready" counts as not completed (memory behind
  // the fence stays out of reuse) and is kept in last_error().
  bool completed(FenceId fence) override;
  // Throws std::runtime_error if cudaEventSynchronize fails.
  void wait(FenceId fence) override;
  void release(FenceId fence) override;

  uint64_t outstanding() const;    // recorded, not yet released
  uint64_t pooled() const;         // idle events kept for reuse
  uint64_t events_created() const;
  BackendStatus last_error() const;

 private:
  struct Slot {
    cudaEvent_t event = nullptr;
    int device = -1;
    uint32_t generation = 1;
    bool live = false;
    bool done = false;
  };
  Slot& slot(FenceId fence);  // throws std::invalid_argument for a stale or foreign id
  cudaEvent_t take_event(int device);
  void give_back(int device, cudaEvent_t event);
  FenceId remember(cudaEvent_t event, int device);
  void note(const BackendStatus& status);

  mutable std::mutex mutex_;
  std::vector<Slot> slots_;
  std::vector<uint32_t> free_slots_;
  std::vector<std::vector<cudaEvent_t>> idle_;  // per device
  uint64_t outstanding_ = 0;
  uint64_t created_ = 0;
  BackendStatus last_error_;
};

}  // namespace unipool::backend::cuda
