// unipool null GPU: runtime device management, versions and the per-thread
// pending error.
#include <cstdio>

#include "nullgpu/state.hpp"

using unipool::nullgpu::detail::Call;
using unipool::nullgpu::detail::capture_forbids_sync;
using unipool::nullgpu::detail::device_attribute;
using unipool::nullgpu::detail::fill_properties;
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
  if (capture_forbids_sync(call.s, nullptr)) return call.fail(cudaErrorStreamCaptureUnsupported);
  call.s.complete_device_events(thread_state().device);
  return cudaSuccess;
}

// The driver's and the runtime's attribute numbers are the same.
cudaError_t cudaDeviceGetAttribute(int* value, enum cudaDeviceAttr attr, int device) {
  Call call("cudaDeviceGetAttribute", Family::runtime);
  if (call.refused()) return call.runtime_refusal();
  if (value == nullptr) return call.fail(cudaErrorInvalidValue);
  if (!call.s.valid_device(device)) return call.fail(cudaErrorInvalidDevice);
  *value = device_attribute(call.s.config, static_cast<int>(attr));
  return cudaSuccess;
}

cudaError_t cudaGetDeviceProperties(struct cudaDeviceProp* prop, int device) {
  Call call("cudaGetDeviceProperties", Family::runtime);
  if (call.refused()) return call.runtime_refusal();
  if (prop == nullptr) return call.fail(cudaErrorInvalidValue);
  if (!call.s.valid_device(device)) return call.fail(cudaErrorInvalidDevice);
  fill_properties(call.s.config, device, prop);
  return cudaSuccess;
}

cudaError_t cudaDeviceGetPCIBusId(char* pciBusId, int len, int device) {
  Call call("cudaDeviceGetPCIBusId", Family::runtime);
  if (call.refused()) return call.runtime_refusal();
  if (pciBusId == nullptr || len <= 0) return call.fail(cudaErrorInvalidValue);
  if (!call.s.valid_device(device)) return call.fail(cudaErrorInvalidDevice);
  std::snprintf(pciBusId, static_cast<size_t>(len), "00000000:%02X:00.0", device + 1);
  return cudaSuccess;
}

cudaError_t cudaDeviceCanAccessPeer(int* canAccessPeer, int device, int peerDevice) {
  Call call("cudaDeviceCanAccessPeer", Family::runtime);
  if (call.refused()) return call.runtime_refusal();
  if (canAccessPeer == nullptr) return call.fail(cudaErrorInvalidValue);
  if (!call.s.valid_device(device) || !call.s.valid_device(peerDevice)) return call.fail(cudaErrorInvalidDevice);
  *canAccessPeer = device != peerDevice;
  return cudaSuccess;
}

cudaError_t cudaDeviceEnablePeerAccess(int peerDevice, unsigned int flags) {
  Call call("cudaDeviceEnablePeerAccess", Family::runtime);
  if (call.refused()) return call.runtime_refusal();
  const int device = thread_state().device;
  if (flags != 0) return call.fail(cudaErrorInvalidValue);
  if (!call.s.valid_device(peerDevice) || peerDevice == device) return call.fail(cudaErrorInvalidDevice);
  if (!call.s.peer_access.emplace(device, peerDevice).second) return call.fail(cudaErrorPeerAccessAlreadyEnabled);
  return cudaSuccess;
}

cudaError_t cudaDeviceDisablePeerAccess(int peerDevice) {
  Call call("cudaDeviceDisablePeerAccess", Family::runtime);
  if (call.refused()) return call.runtime_refusal();
  if (call.s.peer_access.erase({thread_state().device, peerDevice}) == 0) {
    return call.fail(cudaErrorPeerAccessNotEnabled);
  }
  return cudaSuccess;
}

cudaError_t cudaSetDeviceFlags(unsigned int flags) {
  Call call("cudaSetDeviceFlags", Family::runtime);
  if (call.refused()) return call.runtime_refusal();
  return flags <= (cudaDeviceMask | cudaDeviceMapHost) ? cudaSuccess : call.fail(cudaErrorInvalidValue);
}

cudaError_t cudaGetDeviceFlags(unsigned int* flags) {
  Call call("cudaGetDeviceFlags", Family::runtime);
  if (call.refused()) return call.runtime_refusal();
  if (flags == nullptr) return call.fail(cudaErrorInvalidValue);
  *flags = cudaDeviceMapHost;
  return cudaSuccess;
}

cudaError_t cudaInitDevice(int device, unsigned int, unsigned int) {
  Call call("cudaInitDevice", Family::runtime);
  if (call.refused()) return call.runtime_refusal();
  return call.s.valid_device(device) ? cudaSuccess : call.fail(cudaErrorInvalidDevice);
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
