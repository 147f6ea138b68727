// unipool null GPU: the driver's device and context queries, and the
// runtime's door to the driver (cudaGetDriverEntryPoint*).
#include <algorithm>
#include <cstring>

#include "nullgpu/state.hpp"

using unipool::nullgpu::detail::Call;
using unipool::nullgpu::detail::Family;
using unipool::nullgpu::detail::Needs;
using unipool::nullgpu::detail::State;
using unipool::nullgpu::detail::thread_state;

extern "C" {

CUresult cuInit(unsigned int flags) {
  Call call("cuInit", Family::driver, Needs::driver);
  if (call.refused()) return call.driver_refusal();
  return flags == 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

CUresult cuDriverGetVersion(int* version) {
  Call call("cuDriverGetVersion", Family::driver, Needs::driver);
  if (call.refused()) return call.driver_refusal();
  if (version == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *version = call.s.config.driver_version;
  return CUDA_SUCCESS;
}

CUresult cuDeviceGet(CUdevice* device, int ordinal) {
  Call call("cuDeviceGet", Family::driver);
  if (call.refused()) return call.driver_refusal();
  if (device == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (!call.s.valid_device(ordinal)) return CUDA_ERROR_INVALID_DEVICE;
  *device = ordinal;
  return CUDA_SUCCESS;
}

CUresult cuDeviceGetAttribute(int* value, CUdevice_attribute attribute, CUdevice device) {
  Call call("cuDeviceGetAttribute", Family::driver);
  if (call.refused()) return call.driver_refusal();
  if (value == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (!call.s.valid_device(device)) return CUDA_ERROR_INVALID_DEVICE;
  *value = unipool::nullgpu::detail::device_attribute(call.s.config, attribute);
  return CUDA_SUCCESS;
}

CUresult cuDevicePrimaryCtxGetState(CUdevice device, unsigned int* flags, int* active) {
  Call call("cuDevicePrimaryCtxGetState", Family::driver);
  if (call.refused()) return call.driver_refusal();
  if (flags == nullptr || active == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (!call.s.valid_device(device)) return CUDA_ERROR_INVALID_DEVICE;
  *flags = 0;
  *active = 1;
  return CUDA_SUCCESS;
}

CUresult cuCtxGetDevice(CUdevice* device) {
  Call call("cuCtxGetDevice", Family::driver);
  if (call.refused()) return call.driver_refusal();
  if (device == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *device = thread_state().device;
  return CUDA_SUCCESS;
}

}  // extern "C"

namespace {

cudaError_t lookup(Call& call, const char* symbol, void** funcPtr, unsigned int cudaVersion,
                   unsigned long long flags, cudaDriverEntryPointQueryResult* driverStatus) {
  if (call.refused()) return call.runtime_refusal();
  if (symbol == nullptr || funcPtr == nullptr || flags > cudaEnablePerThreadDefaultStream) {
    return call.fail(cudaErrorInvalidValue);
  }
  const State& s = call.s;
  const auto& hidden = s.config.hidden_driver_symbols;
  void* found = std::find(hidden.begin(), hidden.end(), symbol) == hidden.end()
                    ? unipool::nullgpu::detail::driver_symbol(symbol)
                    : nullptr;
  cudaDriverEntryPointQueryResult status = cudaDriverEntryPointSuccess;
  if (found == nullptr) {
    status = cudaDriverEntryPointSymbolNotFound;
  } else if (cudaVersion > static_cast<unsigned>(s.config.driver_version)) {
    status = cudaDriverEntryPointVersionNotSufficent;
    found = nullptr;
  }
  *funcPtr = found;
  if (driverStatus != nullptr) *driverStatus = status;
  return cudaSuccess;
}

}  // namespace

extern "C" {

cudaError_t cudaGetDriverEntryPoint(const char* symbol, void** funcPtr, unsigned long long flags,
                                    cudaDriverEntryPointQueryResult* driverStatus) {
  Call call("cudaGetDriverEntryPoint", Family::runtime, Needs::driver);
  return lookup(call, symbol, funcPtr, 0, flags, driverStatus);
}

cudaError_t cudaGetDriverEntryPointByVersion(const char* symbol, void** funcPtr, unsigned int cudaVersion,
                                             unsigned long long flags,
                                             cudaDriverEntryPointQueryResult* driverStatus) {
  Call call("cudaGetDriverEntryPointByVersion", Family::runtime, Needs::driver);
  return lookup(call, symbol, funcPtr, cudaVersion, flags, driverStatus);
}

}  // extern "C"
