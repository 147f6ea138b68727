#include "backend/cuda/device_guard.hpp"

#include <cuda_runtime_api.h>

#include "backend/cuda/cuda_status.hpp"

namespace unipool::backend::cuda {

DeviceGuard::DeviceGuard(int device) noexcept {
  if (device < 0) {
    status_ = runtime_status(cudaErrorInvalidDevice);
    return;
  }
  status_ = runtime_status(cudaGetDevice(&previous_));
  if (!status_.is_ok() || previous_ == device) return;
  status_ = runtime_status(cudaSetDevice(device));
  switched_ = status_.is_ok();
}

DeviceGuard::~DeviceGuard() {
  // Nobody to report a failure to here; at least don't leave it pending.
  if (switched_) (void)runtime_status(cudaSetDevice(previous_));
}

}  // namespace unipool::backend::cuda
