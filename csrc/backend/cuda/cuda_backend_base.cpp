#include "backend/cuda/cuda_backend_base.hpp"

#include <cuda_runtime_api.h>

#include "backend/cuda/cuda_status.hpp"
#include "backend/cuda/device_guard.hpp"

namespace unipool::backend::cuda {

int CudaBackendBase::device_count() {
  int count = 0;
  return runtime_status(cudaGetDeviceCount(&count)).is_ok() ? count : 0;
}

BackendStatus CudaBackendBase::memory_info(int device, uint64_t* free_bytes, uint64_t* total_bytes) {
  if (free_bytes == nullptr || total_bytes == nullptr) return usage_error("unipool: memory_info needs two outputs");
  DeviceGuard guard(device);
  if (!guard.ok()) return guard.status();
  size_t free_now = 0;
  size_t total = 0;
  const BackendStatus status = runtime_status(cudaMemGetInfo(&free_now, &total));
  if (status.is_ok()) {
    *free_bytes = free_now;
    *total_bytes = total;
  }
  return status;
}

}  // namespace unipool::backend::cuda
