// unipool backend/cuda: page-locks host ranges with cudaHostRegister so
// copies from and to them run asynchronously at full PCIe/NVLink speed.
#include "backend/cuda/cuda_host_pinner.hpp"

#include <cuda_runtime_api.h>

#include "backend/cuda/cuda_status.hpp"

namespace unipool::backend {
namespace {

class CudaHostPinner final : public HostPinner {
 public:
  const char* name() const noexcept override { return "cuda"; }

  bool available() override {
    int count = 0;
    const cudaError_t err = cudaGetDeviceCount(&count);
    // No driver or no device leaves an error pending; don't let it leak out.
    if (err != cudaSuccess) {
      (void)cuda::runtime_status(err);
      return false;
    }
    return count >= 1;
  }

  BackendStatus pin(void* ptr, uint64_t bytes) override {
    if (ptr == nullptr || bytes == 0) return cuda::usage_error("unipool: cannot pin a null or empty host range");
    return cuda::runtime_status(cudaHostRegister(ptr, static_cast<size_t>(bytes), cudaHostRegisterDefault));
  }

  BackendStatus unpin(void* ptr) override {
    if (ptr == nullptr) return cuda::usage_error("unipool: cannot unpin a null pointer");
    return cuda::runtime_status(cudaHostUnregister(ptr));
  }
};

}  // namespace

std::unique_ptr<HostPinner> make_cuda_host_pinner() { return std::make_unique<CudaHostPinner>(); }

}  // namespace unipool::backend
