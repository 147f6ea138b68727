#include "backend/cuda/cuda_runtime_info.hpp"

#include <cuda_runtime_api.h>

namespace unipool::backend {

int cuda_runtime_version() noexcept {
  int version = 0;
  return cudaRuntimeGetVersion(&version) == cudaSuccess ? version : 0;
}

}  // namespace unipool::backend
