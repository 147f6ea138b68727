// unipool null GPU, cuBLAS: handles and what they remember (stream,
// workspace, math, pointer and atomics modes), versions and status names.
// torch creates one handle per device and stream, sets its stream and a
// workspace from its own allocator, and reads the modes back.
#include <cublas_v2.h>

#include "registry.hpp"

namespace blas = unipool::nullgpu::blas;

namespace {

// Applies `set` to the handle's state: CUBLAS_STATUS_NOT_INITIALIZED for a
// handle that is not live, as cuBLAS answers.
template <class F>
cublasStatus_t with_handle(cublasHandle_t handle, F set) {
  auto trampoline = [](blas::HandleState& s, void* arg) { (*static_cast<F*>(arg))(s); };
  return blas::unipool_nullgpu_blas_with_handle(handle, trampoline, &set) ? CUBLAS_STATUS_SUCCESS
                                                                          : CUBLAS_STATUS_NOT_INITIALIZED;
}

}  // namespace

extern "C" {

cublasStatus_t cublasCreate_v2(cublasHandle_t* handle) {
  return static_cast<cublasStatus_t>(blas::unipool_nullgpu_blas_create_status(reinterpret_cast<void**>(handle)));
}

cublasStatus_t cublasDestroy_v2(cublasHandle_t handle) {
  return static_cast<cublasStatus_t>(blas::unipool_nullgpu_blas_destroy_status(handle));
}

cublasStatus_t cublasSetStream_v2(cublasHandle_t handle, cudaStream_t stream) {
  return with_handle(handle, [&](blas::HandleState& s) { s.stream = stream; });
}

cublasStatus_t cublasGetStream_v2(cublasHandle_t handle, cudaStream_t* stream) {
  if (stream == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  return with_handle(handle, [&](blas::HandleState& s) { *stream = static_cast<cudaStream_t>(s.stream); });
}

cublasStatus_t cublasSetWorkspace_v2(cublasHandle_t handle, void* workspace, size_t bytes) {
  // cuBLAS wants a 256-byte aligned workspace (or none).
  if (bytes != 0 && (workspace == nullptr || reinterpret_cast<uintptr_t>(workspace) % 256 != 0)) {
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  return with_handle(handle, [&](blas::HandleState& s) {
    s.workspace = workspace;
    s.workspace_bytes = bytes;
  });
}

cublasStatus_t cublasSetMathMode(cublasHandle_t handle, cublasMath_t mode) {
  return with_handle(handle, [&](blas::HandleState& s) { s.math_mode = mode; });
}

cublasStatus_t cublasGetMathMode(cublasHandle_t handle, cublasMath_t* mode) {
  if (mode == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  return with_handle(handle, [&](blas::HandleState& s) { *mode = static_cast<cublasMath_t>(s.math_mode); });
}

cublasStatus_t cublasSetPointerMode_v2(cublasHandle_t handle, cublasPointerMode_t mode) {
  if (mode != CUBLAS_POINTER_MODE_HOST && mode != CUBLAS_POINTER_MODE_DEVICE) return CUBLAS_STATUS_INVALID_VALUE;
  return with_handle(handle, [&](blas::HandleState& s) { s.pointer_mode = mode; });
}

cublasStatus_t cublasGetPointerMode_v2(cublasHandle_t handle, cublasPointerMode_t* mode) {
  if (mode == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  return with_handle(handle,
                     [&](blas::HandleState& s) { *mode = static_cast<cublasPointerMode_t>(s.pointer_mode); });
}

cublasStatus_t cublasSetAtomicsMode(cublasHandle_t handle, cublasAtomicsMode_t mode) {
  return with_handle(handle, [&](blas::HandleState& s) { s.atomics_mode = mode; });
}

cublasStatus_t cublasGetAtomicsMode(cublasHandle_t handle, cublasAtomicsMode_t* mode) {
  if (mode == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  return with_handle(handle,
                     [&](blas::HandleState& s) { *mode = static_cast<cublasAtomicsMode_t>(s.atomics_mode); });
}

cublasStatus_t cublasSetSmCountTarget(cublasHandle_t handle, int count) {
  if (count < 0) return CUBLAS_STATUS_INVALID_VALUE;
  return with_handle(handle, [&](blas::HandleState& s) { s.sm_count_target = count; });
}

cublasStatus_t cublasGetSmCountTarget(cublasHandle_t handle, int* count) {
  if (count == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  return with_handle(handle, [&](blas::HandleState& s) { *count = s.sm_count_target; });
}

cublasStatus_t cublasGetVersion_v2(cublasHandle_t handle, int* version) {
  if (version == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  if (!blas::unipool_nullgpu_blas_handle_live(handle)) return CUBLAS_STATUS_NOT_INITIALIZED;
  *version = CUBLAS_VERSION;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasGetProperty(libraryPropertyType type, int* value) {
  if (value == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  switch (type) {
    case MAJOR_VERSION: *value = CUBLAS_VER_MAJOR; return CUBLAS_STATUS_SUCCESS;
    case MINOR_VERSION: *value = CUBLAS_VER_MINOR; return CUBLAS_STATUS_SUCCESS;
    case PATCH_LEVEL: *value = CUBLAS_VER_PATCH; return CUBLAS_STATUS_SUCCESS;
  }
  return CUBLAS_STATUS_INVALID_VALUE;
}

size_t cublasGetCudartVersion() { return CUDART_VERSION; }

const char* cublasGetStatusName(cublasStatus_t status) {
  switch (status) {
    case CUBLAS_STATUS_SUCCESS: return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED: return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_ARCH_MISMATCH: return "CUBLAS_STATUS_ARCH_MISMATCH";
    case CUBLAS_STATUS_MAPPING_ERROR: return "CUBLAS_STATUS_MAPPING_ERROR";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "CUBLAS_STATUS_EXECUTION_FAILED";
    case CUBLAS_STATUS_INTERNAL_ERROR: return "CUBLAS_STATUS_INTERNAL_ERROR";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
    case CUBLAS_STATUS_LICENSE_ERROR: return "CUBLAS_STATUS_LICENSE_ERROR";
  }
  return "<unknown>";
}

const char* cublasGetStatusString(cublasStatus_t status) {
  if (status == CUBLAS_STATUS_NOT_SUPPORTED) return "the operation is not implemented by the unipool null GPU";
  return cublasGetStatusName(status);
}

}  // extern "C"
