// unipool null GPU: the driver's contexts, device identity and pointer
// queries. Each device has one primary context, always active: the null
// GPU has nothing to initialise, and code that asks whether a context
// exists (torch's hasPrimaryContext) gets the answer a running GPU gives.
#include <cstdio>
#include <cstring>

#include "nullgpu/state.hpp"

using unipool::nullgpu::detail::Call;
using unipool::nullgpu::detail::containing;
using unipool::nullgpu::detail::Family;
using unipool::nullgpu::detail::Needs;
using unipool::nullgpu::detail::State;
using unipool::nullgpu::detail::thread_state;

struct CUctx_st {
  int device;
};

namespace {

constexpr int kMaxDevices = 64;  // parse_config's limit on devices
CUctx_st g_primary[kMaxDevices] = {};

CUcontext primary(int device) {
  g_primary[device].device = device;
  return &g_primary[device];
}

bool is_primary(CUcontext ctx) { return ctx >= &g_primary[0] && ctx < &g_primary[kMaxDevices]; }

}  // namespace

extern "C" {

CUresult cuDeviceGetCount(int* count) {
  Call call("cuDeviceGetCount", Family::driver, Needs::driver);
  if (call.refused()) return call.driver_refusal();
  if (count == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *count = call.s.config.device_count;
  return CUDA_SUCCESS;
}

CUresult cuDeviceGetName(char* name, int len, CUdevice dev) {
  Call call("cuDeviceGetName", Family::driver);
  if (call.refused()) return call.driver_refusal();
  if (name == nullptr || len <= 0) return CUDA_ERROR_INVALID_VALUE;
  if (!call.s.valid_device(dev)) return CUDA_ERROR_INVALID_DEVICE;
  cudaDeviceProp prop;
  unipool::nullgpu::detail::fill_properties(call.s.config, dev, &prop);
  std::snprintf(name, static_cast<size_t>(len), "%s", prop.name);
  return CUDA_SUCCESS;
}

CUresult cuDeviceGetUuid_v2(CUuuid* uuid, CUdevice dev) {
  Call call("cuDeviceGetUuid_v2", Family::driver);
  if (call.refused()) return call.driver_refusal();
  if (uuid == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (!call.s.valid_device(dev)) return CUDA_ERROR_INVALID_DEVICE;
  cudaDeviceProp prop;
  unipool::nullgpu::detail::fill_properties(call.s.config, dev, &prop);
  std::memcpy(uuid->bytes, prop.uuid.bytes, sizeof(uuid->bytes));
  return CUDA_SUCCESS;
}

CUresult cuDeviceTotalMem_v2(size_t* bytes, CUdevice dev) {
  Call call("cuDeviceTotalMem_v2", Family::driver);
  if (call.refused()) return call.driver_refusal();
  if (bytes == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (!call.s.valid_device(dev)) return CUDA_ERROR_INVALID_DEVICE;
  *bytes = static_cast<size_t>(call.s.config.capacity);
  return CUDA_SUCCESS;
}

CUresult cuMemGetInfo_v2(size_t* free_bytes, size_t* total_bytes) {
  Call call("cuMemGetInfo_v2", Family::driver);
  if (call.refused()) return call.driver_refusal();
  if (free_bytes == nullptr || total_bytes == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const uint64_t capacity = call.s.config.capacity;
  *total_bytes = static_cast<size_t>(capacity);
  *free_bytes = static_cast<size_t>(capacity - call.s.charged[static_cast<size_t>(thread_state().device)]);
  return CUDA_SUCCESS;
}

CUresult cuDevicePrimaryCtxRetain(CUcontext* pctx, CUdevice dev) {
  Call call("cuDevicePrimaryCtxRetain", Family::driver);
  if (call.refused()) return call.driver_refusal();
  if (pctx == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (!call.s.valid_device(dev)) return CUDA_ERROR_INVALID_DEVICE;
  *pctx = primary(dev);
  return CUDA_SUCCESS;
}

CUresult cuDevicePrimaryCtxRelease_v2(CUdevice dev) {
  Call call("cuDevicePrimaryCtxRelease_v2", Family::driver);
  if (call.refused()) return call.driver_refusal();
  return call.s.valid_device(dev) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_DEVICE;
}

CUresult cuCtxGetCurrent(CUcontext* pctx) {
  Call call("cuCtxGetCurrent", Family::driver);
  if (call.refused()) return call.driver_refusal();
  if (pctx == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *pctx = primary(thread_state().device);
  return CUDA_SUCCESS;
}

// Only primary contexts exist: making one current selects its device.
CUresult cuCtxSetCurrent(CUcontext ctx) {
  Call call("cuCtxSetCurrent", Family::driver);
  if (call.refused()) return call.driver_refusal();
  if (ctx == nullptr) return CUDA_SUCCESS;
  if (!is_primary(ctx) || !call.s.valid_device(ctx->device)) return CUDA_ERROR_INVALID_CONTEXT;
  thread_state().device = ctx->device;
  return CUDA_SUCCESS;
}

CUresult cuCtxPushCurrent_v2(CUcontext ctx) {
  Call call("cuCtxPushCurrent_v2", Family::driver);
  if (call.refused()) return call.driver_refusal();
  if (ctx == nullptr || !is_primary(ctx) || !call.s.valid_device(ctx->device)) return CUDA_ERROR_INVALID_CONTEXT;
  thread_state().device = ctx->device;
  return CUDA_SUCCESS;
}

CUresult cuCtxPopCurrent_v2(CUcontext* pctx) {
  Call call("cuCtxPopCurrent_v2", Family::driver);
  if (call.refused()) return call.driver_refusal();
  if (pctx != nullptr) *pctx = primary(thread_state().device);
  return CUDA_SUCCESS;
}

CUresult cuCtxSynchronize(void) {
  Call call("cuCtxSynchronize", Family::driver);
  if (call.refused()) return call.driver_refusal();
  call.s.complete_device_events(thread_state().device);
  return CUDA_SUCCESS;
}

// The base and size of the device allocation holding `dptr`.
CUresult cuMemGetAddressRange_v2(CUdeviceptr* pbase, size_t* psize, CUdeviceptr dptr) {
  Call call("cuMemGetAddressRange_v2", Family::driver);
  if (call.refused()) return call.driver_refusal();
  const auto bytes_of = [](const auto& entry) { return entry.bytes; };
  const auto address = static_cast<uintptr_t>(dptr);
  uintptr_t base = 0;
  uint64_t size = 0;
  if (auto it = containing(call.s.allocations, address, bytes_of); it != call.s.allocations.end()) {
    base = it->first, size = it->second.bytes;
  } else if (auto m = containing(call.s.mappings, address, bytes_of); m != call.s.mappings.end()) {
    base = m->first, size = m->second.bytes;
  } else {
    return CUDA_ERROR_NOT_FOUND;
  }
  if (pbase != nullptr) *pbase = static_cast<CUdeviceptr>(base);
  if (psize != nullptr) *psize = static_cast<size_t>(size);
  return CUDA_SUCCESS;
}

CUresult cuMemRetainAllocationHandle(CUmemGenericAllocationHandle* handle, void* addr) {
  Call call("cuMemRetainAllocationHandle", Family::driver);
  if (call.refused()) return call.driver_refusal();
  const auto it = call.s.mappings.find(reinterpret_cast<uintptr_t>(addr));
  if (handle == nullptr || it == call.s.mappings.end()) return CUDA_ERROR_INVALID_VALUE;
  // The fake keeps no reference counts on handles: a retained handle must
  // not be released twice, which the caller's cuMemRelease would do.
  return CUDA_ERROR_NOT_SUPPORTED;
}

CUresult cuMemGetAllocationPropertiesFromHandle(CUmemAllocationProp* prop, CUmemGenericAllocationHandle handle) {
  Call call("cuMemGetAllocationPropertiesFromHandle", Family::driver);
  if (call.refused()) return call.driver_refusal();
  const auto it = call.s.physical.find(handle);
  if (prop == nullptr || it == call.s.physical.end()) return CUDA_ERROR_INVALID_VALUE;
  *prop = CUmemAllocationProp{};
  prop->type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop->location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop->location.id = it->second.device;
  return CUDA_SUCCESS;
}

// The driver's log callbacks: accepted, and never called, since the null
// GPU has nothing to log.
CUresult cuLogsRegisterCallback(CUlogsCallback callback, void*, CUlogsCallbackHandle* handle) {
  Call call("cuLogsRegisterCallback", Family::driver);
  if (call.refused()) return call.driver_refusal();
  if (callback == nullptr || handle == nullptr) return CUDA_ERROR_INVALID_VALUE;
  static int token;
  *handle = reinterpret_cast<CUlogsCallbackHandle>(&token);
  return CUDA_SUCCESS;
}

CUresult cuLogsUnregisterCallback(CUlogsCallbackHandle handle) {
  Call call("cuLogsUnregisterCallback", Family::driver);
  if (call.refused()) return call.driver_refusal();
  return handle != nullptr ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

}  // extern "C"
