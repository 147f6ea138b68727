// unipool backend/cuda: "cuda_malloc", one cudaMalloc per segment. The
// simplest backend, and the one every CUDA machine supports.
#include <cuda_runtime_api.h>

#include "backend/cuda/cuda_backend_base.hpp"
#include "backend/cuda/cuda_backends.hpp"
#include "backend/cuda/cuda_status.hpp"
#include "backend/cuda/device_guard.hpp"

namespace unipool::backend {
namespace {

class CudaMallocBackend final : public cuda::CudaBackendBase {
 public:
  const char* name() const noexcept override { return "cuda_malloc"; }

  BackendStatus allocate(int device, uint64_t bytes, void** out) override {
    if (out == nullptr || bytes == 0) return cuda::usage_error("unipool cuda_malloc: allocate needs an output and a size > 0");
    *out = nullptr;
    cuda::DeviceGuard guard(device);
    if (!guard.ok()) return guard.status();
    void* ptr = nullptr;
    const BackendStatus status = cuda::runtime_status(cudaMalloc(&ptr, static_cast<size_t>(bytes)));
    if (status.is_ok()) *out = ptr;
    return status;
  }

  BackendStatus deallocate(int device, void* ptr, uint64_t /*bytes*/) override {
    if (ptr == nullptr) return cuda::usage_error("unipool cuda_malloc: deallocate of a null pointer");
    cuda::DeviceGuard guard(device);
    if (!guard.ok()) return guard.status();
    return cuda::runtime_status(cudaFree(ptr));
  }
};

}  // namespace

std::unique_ptr<DeviceBackend> make_cuda_malloc_backend() { return std::make_unique<CudaMallocBackend>(); }

}  // namespace unipool::backend
