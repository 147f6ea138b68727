// unipool backend/cuda: what every CUDA device backend shares: device
// count, memory info (under a device guard) and event fences.
#pragma once

#include "backend/cuda/cuda_event_fences.hpp"
#include "unipool/device_backend.hpp"

namespace unipool::backend::cuda {

class CudaBackendBase : public DeviceBackend {
 public:
  // 0 when there is no driver or no device (the error is cleared).
  int device_count() override;
  BackendStatus memory_info(int device, uint64_t* free_bytes, uint64_t* total_bytes) override;
  FenceSource& fences() override { return fences_; }

 private:
  CudaEventFenceSource fences_;
};

}  // namespace unipool::backend::cuda
