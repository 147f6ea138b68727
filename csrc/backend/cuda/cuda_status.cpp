#include "backend/cuda/cuda_status.hpp"

#include <mutex>
#include <set>

namespace unipool::backend::cuda {

BackendStatus runtime_status(cudaError_t err) noexcept {
  return runtime_status(err, RuntimeErrorCalls{&cudaGetLastError, &cudaGetErrorString});
}

BackendStatus driver_status(CUresult res, DriverErrorString describe) noexcept {
  if (res == CUDA_SUCCESS) return BackendStatus::success();
  const char* text = nullptr;
  if (describe == nullptr || describe(res, &text) != CUDA_SUCCESS || text == nullptr) {
    text = "CUDA driver API error (see the native code)";
  }
  const auto code = res == CUDA_ERROR_OUT_OF_MEMORY ? BackendStatus::out_of_memory : BackendStatus::error;
  return BackendStatus{code, static_cast<int>(res), text};
}

const char* intern(const std::string& text) {
  // Never freed; bounded by the number of distinct failure reasons.
  static std::mutex mutex;
  static auto* texts = new std::set<std::string, std::less<>>;
  std::lock_guard lock(mutex);
  return texts->insert(text).first->c_str();
}

}  // namespace unipool::backend::cuda
