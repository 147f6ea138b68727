#include "backend/cuda/cuda_backends.hpp"

namespace unipool::backend {

std::unique_ptr<DeviceBackend> make_cuda_backend(std::string_view name) {
  if (name == "cuda_malloc") return make_cuda_malloc_backend();
  if (name == "cuda_vmm") return make_cuda_vmm_backend();
  if (name == "nccl") return make_nccl_backend();
  return nullptr;
}

}  // namespace unipool::backend
