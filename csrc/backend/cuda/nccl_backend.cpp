// unipool backend/cuda: "nccl", segments from ncclMemAlloc, the buffers NCCL
// can register for zero-copy (user buffer) collectives.
#include <cuda_runtime_api.h>

#include "backend/cuda/cuda_backend_base.hpp"
#include "backend/cuda/cuda_backends.hpp"
#include "backend/cuda/cuda_status.hpp"
#include "backend/cuda/device_guard.hpp"
#include "backend/cuda/nccl_library.hpp"

namespace unipool::backend {
namespace {

class NcclBackend final : public cuda::CudaBackendBase {
 public:
  NcclBackend() : nccl_(cuda::NcclLibrary::load()), unavailable_(cuda::intern(nccl_.unavailable)) {}

  const char* name() const noexcept override { return "nccl"; }

  BackendStatus allocate(int device, uint64_t bytes, void** out) override {
    if (out == nullptr || bytes == 0) return cuda::usage_error("unipool nccl: allocate needs an output and a size > 0");
    *out = nullptr;
    if (!nccl_.available()) return cuda::usage_error(unavailable_);
    cuda::DeviceGuard guard(device);  // ncclMemAlloc allocates on the current device
    if (!guard.ok()) return guard.status();
    void* ptr = nullptr;
    const ncclResult_t result = nccl_.mem_alloc(&ptr, static_cast<size_t>(bytes));
    if (result != ncclSuccess) return status(result, bytes);
    *out = ptr;
    return BackendStatus::success();
  }

  BackendStatus deallocate(int device, void* ptr, uint64_t /*bytes*/) override {
    if (ptr == nullptr) return cuda::usage_error("unipool nccl: deallocate of a null pointer");
    if (!nccl_.available()) return cuda::usage_error(unavailable_);
    cuda::DeviceGuard guard(device);
    if (!guard.ok()) return guard.status();
    const ncclResult_t result = nccl_.mem_free(ptr);
    return result == ncclSuccess ? BackendStatus::success() : status(result, 0);
  }

 private:
  // NCCL reports a failed cudaMalloc / cuMemCreate as an unhandled CUDA
  // error, out of memory included; it is out of memory when the device has
  // less free memory than was asked for. Runs under the device guard.
  BackendStatus status(ncclResult_t result, uint64_t bytes) {
    (void)cudaGetLastError();  // NCCL's cudaMalloc path leaves the error pending
    BackendStatus::Code code = BackendStatus::error;
    if (result == ncclSystemError && bytes != 0) code = BackendStatus::out_of_memory;
    if (result == ncclUnhandledCudaError && bytes != 0) {
      size_t free_bytes = 0;
      size_t total_bytes = 0;
      const cudaError_t err = cudaMemGetInfo(&free_bytes, &total_bytes);
      if (err != cudaSuccess) {
        (void)cudaGetLastError();
      } else if (free_bytes < bytes) {
        code = BackendStatus::out_of_memory;
      }
    }
    return BackendStatus{code, static_cast<int>(result), nccl_.get_error_string(result)};
  }

  cuda::NcclLibrary nccl_;
  const char* unavailable_;  // interned: statuses may outlive the backend
};

}  // namespace

std::unique_ptr<DeviceBackend> make_nccl_backend() { return std::make_unique<NcclBackend>(); }

}  // namespace unipool::backend
