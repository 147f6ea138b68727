// unipool backend/cuda: CUDA runtime and driver error codes as BackendStatus.
//
// Every failing call in backend/cuda goes through these helpers. They also
// clear the calling thread's pending runtime error (cudaGetLastError), so a
// failure we already reported cannot resurface from an unrelated later CUDA
// call in the application. A sticky error (a corrupted context) cannot be
// cleared; CUDA keeps returning it, which is what the caller should see.
#pragma once

#include <cuda.h>
#include <cuda_runtime_api.h>

#include <string>

#include "unipool/device_backend.hpp"

namespace unipool::backend::cuda {

// cudaErrorMemoryAllocation -> out_of_memory, anything else -> error;
// cudaSuccess -> ok. Clears the pending runtime error when `err` failed.
BackendStatus runtime_status(cudaError_t err) noexcept;

// The same for a runtime opened with dlopen (the host pinner): how to clear
// and describe the error are passed in. Inline, so that code using only this
// form links no CUDA runtime symbol.
struct RuntimeErrorCalls {
  cudaError_t (*clear)();                // cudaGetLastError
  const char* (*describe)(cudaError_t);  // cudaGetErrorString
};
inline BackendStatus runtime_status(cudaError_t err, RuntimeErrorCalls calls) noexcept {
  if (err == cudaSuccess) return BackendStatus::success();
  // The failed call left `err` pending on this thread; we report it here.
  (void)calls.clear();
  const auto code = err == cudaErrorMemoryAllocation ? BackendStatus::out_of_memory : BackendStatus::error;
  return BackendStatus{code, static_cast<int>(err), calls.describe(err)};
}

// A driver result, described with `describe` (cuGetErrorString when the
// driver API was resolved, else null for a generic text).
// CUDA_ERROR_OUT_OF_MEMORY -> out_of_memory, anything else -> error.
using DriverErrorString = CUresult (*)(CUresult, const char**);
BackendStatus driver_status(CUresult res, DriverErrorString describe) noexcept;

// A failure detected by unipool itself (bad argument, missing library).
// `message` must outlive every copy of the status: a literal, or interned.
inline BackendStatus usage_error(const char* message) noexcept {
  return BackendStatus{BackendStatus::error, 0, message};
}

// A process-lifetime copy of `text` (equal texts share one copy), for the
// few messages composed at run time ("the driver does not provide X"): a
// BackendStatus may outlive the backend that made it.
const char* intern(const std::string& text);

}  // namespace unipool::backend::cuda
