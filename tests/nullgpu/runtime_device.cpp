// unipool null GPU: runtime device management, versions and the per-thread
// pending error.
#include "nullgpu/state.hpp"

using unipool::nullgpu::detail::Call;
using unipool::nullgpu::detail::Family;
using unipool::nullgpu::detail::Needs;
using unipool::nullgpu::detail::state;
using unipool::nullgpu::detail::thread_state;

extern "C" {

cudaError_t cudaGetDeviceCount(int* count) {
  Call call("cudaGetDeviceCount", Family::runtime);  // no device: cudaErrorNoDevice, as in CUDA
  if (call.refused()) return call.runtime_refusal();
  if (count == nullptr) return call.fail(cudaErrorInvalidValue);
  *count = call.s.config.device_count;
  return cudaSuccess;
}

cudaError_t cudaGetDevice(int* device) {
  Call call("cudaGetDevice", Family::runtime);
  if (call.refused()) return call.runtime_refusal();
  if (device == nullptr) return call.fail(cudaErrorInvalidValue);
  *device = thread_state().device;
  return cudaSuccess;
}

cudaError_t cudaSetDevice(int device) {
  Call call("cudaSetDevice", Family::runtime);
  if (call.refused()) return call.runtime_refusal();
  if (!call.s.valid_device(device)) return call.fail(cudaErrorInvalidDevice);
  thread_state().device = device;
  return cudaSuccess;
}

cudaError_t cudaMemGetInfo(size_t* free_bytes, size_t* total_bytes) {
  Call call("cudaMemGetInfo", Family::runtime);
  if (call.refused()) return call.runtime_refusal();
  if (free_bytes == nullptr || total_bytes == nullptr) return call.fail(cudaErrorInvalidValue);
  const uint64_t capacity = call.s.config.capacity;
  *total_bytes = static_cast<size_t>(capacity);
  *free_bytes = static_cast<size_t>(capacity - call.s.charged[static_cast<size_t>(thread_state().device)]);
  return cudaSuccess;
}

cudaError_t cudaDeviceSynchronize(void) {
  Call call("cudaDeviceSynchronize", Family::runtime);
  if (call.refused()) return call.runtime_refusal();
  call.s.complete_device_events(thread_state().device);
  return cudaSuccess;
}

cudaError_t cudaDeviceGetAttribute(int* value, enum cudaDeviceAttr attr, int device) {
  Call call("cudaDeviceGetAttribute", Family::runtime);
  if (call.refused()) return call.runtime_refusal();
  if (value == nullptr) return call.fail(cudaErrorInvalidValue);
  if (!call.s.valid_device(device)) return call.fail(cudaErrorInvalidDevice);
  switch (attr) {
    case cudaDevAttrComputeCapabilityMajor: *value = 9; break;
    case cudaDevAttrComputeCapabilityMinor: *value = 0; break;
    case cudaDevAttrUnifiedAddressing: *value = 1; break;
    case cudaDevAttrMultiProcessorCount: *value = 132; break;
    default: *value = 0; break;
  }
  return cudaSuccess;
}

cudaError_t cudaRuntimeGetVersion(int* version) {
  Call call("cudaRuntimeGetVersion", Family::runtime, Needs::nothing);
  if (call.refused()) return call.runtime_refusal();
  if (version == nullptr) return call.fail(cudaErrorInvalidValue);
  *version = call.s.config.runtime_version;
  return cudaSuccess;
}

cudaError_t cudaDriverGetVersion(int* version) {
  Call call("cudaDriverGetVersion", Family::runtime, Needs::nothing);  // 0 without a driver, as in CUDA
  if (call.refused()) return call.runtime_refusal();
  if (version == nullptr) return call.fail(cudaErrorInvalidValue);
  *version = call.s.config.driver_present ? call.s.config.driver_version : 0;
  return cudaSuccess;
}

// Not counted and never failed: they report errors, they don't make them.
cudaError_t cudaGetLastError(void) {
  std::lock_guard lock(state().mutex);
  if (!state().config.driver_present) return cudaErrorInsufficientDriver;  // cannot be cleared
  if (state().sticky != 0) return static_cast<cudaError_t>(state().sticky);
  auto& thread = thread_state();
  const cudaError_t pending = thread.pending;
  thread.pending = cudaSuccess;
  return pending;
}

cudaError_t cudaPeekAtLastError(void) {
  std::lock_guard lock(state().mutex);
  if (!state().config.driver_present) return cudaErrorInsufficientDriver;
  if (state().sticky != 0) return static_cast<cudaError_t>(state().sticky);
  return thread_state().pending;
}

}  // extern "C"
