// unipool null GPU: the driver's symbol table, behind cuGetProcAddress and
// cudaGetDriverEntryPoint*: every driver function by its base name. A name
// the null GPU implements resolves to it; one it does not resolves to its
// loud stub (unimplemented.hpp); a name the real driver lacks is "not
// found", as there.
#include <algorithm>
#include <cstring>
#include <iterator>
#include <string>

#include "nullgpu/state.hpp"

namespace unipool::nullgpu::detail {

namespace {
struct Symbol {
  const char* name;
  void* function;
};

template <class F>
void* address(F* function) {
  return reinterpret_cast<void*>(function);
}

// Implemented entry points, under the name the header's macros give them
// (cuMemGetInfo is cuMemGetInfo_v2).
const Symbol kImplemented[] = {
    {"cuGetErrorString", address(&cuGetErrorString)},
    {"cuGetErrorName", address(&cuGetErrorName)},
    {"cuInit", address(&cuInit)},
    {"cuDriverGetVersion", address(&cuDriverGetVersion)},
    {"cuDeviceGet", address(&cuDeviceGet)},
    {"cuDeviceGetCount", address(&cuDeviceGetCount)},
    {"cuDeviceGetName", address(&cuDeviceGetName)},
    {"cuDeviceGetUuid_v2", address(&cuDeviceGetUuid_v2)},
    {"cuDeviceTotalMem_v2", address(&cuDeviceTotalMem_v2)},
    {"cuDeviceGetAttribute", address(&cuDeviceGetAttribute)},
    {"cuDevicePrimaryCtxGetState", address(&cuDevicePrimaryCtxGetState)},
    {"cuDevicePrimaryCtxRetain", address(&cuDevicePrimaryCtxRetain)},
    {"cuDevicePrimaryCtxRelease_v2", address(&cuDevicePrimaryCtxRelease_v2)},
    {"cuCtxGetDevice", address(&cuCtxGetDevice)},
    {"cuCtxGetCurrent", address(&cuCtxGetCurrent)},
    {"cuCtxSetCurrent", address(&cuCtxSetCurrent)},
    {"cuCtxPushCurrent_v2", address(&cuCtxPushCurrent_v2)},
    {"cuCtxPopCurrent_v2", address(&cuCtxPopCurrent_v2)},
    {"cuCtxSynchronize", address(&cuCtxSynchronize)},
    {"cuMemGetInfo_v2", address(&cuMemGetInfo_v2)},
    {"cuMemGetAddressRange_v2", address(&cuMemGetAddressRange_v2)},
    {"cuMemRetainAllocationHandle", address(&cuMemRetainAllocationHandle)},
    {"cuMemGetAllocationPropertiesFromHandle", address(&cuMemGetAllocationPropertiesFromHandle)},
    {"cuMemGetAllocationGranularity", address(&cuMemGetAllocationGranularity)},
    {"cuMemAddressReserve", address(&cuMemAddressReserve)},
    {"cuMemAddressFree", address(&cuMemAddressFree)},
    {"cuMemCreate", address(&cuMemCreate)},
    {"cuMemRelease", address(&cuMemRelease)},
    {"cuMemMap", address(&cuMemMap)},
    {"cuMemUnmap", address(&cuMemUnmap)},
    {"cuMemSetAccess", address(&cuMemSetAccess)},
    {"cuMemExportToShareableHandle", address(&cuMemExportToShareableHandle)},
    {"cuMemImportFromShareableHandle", address(&cuMemImportFromShareableHandle)},
    {"cuGetProcAddress_v2", address(&cuGetProcAddress_v2)},
    {"cuLogsRegisterCallback", address(&cuLogsRegisterCallback)},
    {"cuLogsUnregisterCallback", address(&cuLogsUnregisterCallback)},
};

void* find(const char* name) {
  for (const Symbol& symbol : kImplemented) {
    if (std::strcmp(symbol.name, name) == 0) return symbol.function;
  }
  return unimplemented_driver_symbol(name);
}

}  // namespace

// The driver maps a base name to its newest version for a caller of this
// CUDA version: try NAME_v4 down to NAME.
void* driver_symbol(const char* name) {
  static const char* const kSuffixes[] = {"_v4", "_v3", "_v2", ""};
  for (const char* suffix : kSuffixes) {
    if (void* found = find((std::string(name) + suffix).c_str()); found != nullptr) return found;
  }
  return nullptr;
}

}  // namespace unipool::nullgpu::detail

extern "C" {

CUresult cuGetProcAddress_v2(const char* symbol, void** pfn, int cudaVersion, cuuint64_t flags,
                             CUdriverProcAddressQueryResult* symbolStatus) {
  using namespace unipool::nullgpu::detail;
  Call call("cuGetProcAddress_v2", Family::driver, Needs::driver);
  if (call.refused()) return call.driver_refusal();
  if (symbol == nullptr || pfn == nullptr || flags > CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  const auto& hidden = call.s.config.hidden_driver_symbols;
  void* found = std::find(hidden.begin(), hidden.end(), symbol) == hidden.end() ? driver_symbol(symbol) : nullptr;
  CUdriverProcAddressQueryResult status = CU_GET_PROC_ADDRESS_SUCCESS;
  if (found == nullptr) {
    status = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
  } else if (cudaVersion > call.s.config.driver_version) {
    status = CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT;
    found = nullptr;
  }
  *pfn = found;
  if (symbolStatus != nullptr) *symbolStatus = status;
  return found != nullptr ? CUDA_SUCCESS : CUDA_ERROR_NOT_FOUND;
}

// The first version of cuGetProcAddress, without the query result; cuda.h
// maps the name to _v2, but callers built against older headers ask for it.
#undef cuGetProcAddress
CUresult cuGetProcAddress(const char* symbol, void** pfn, int cudaVersion, cuuint64_t flags) {
  return cuGetProcAddress_v2(symbol, pfn, cudaVersion, flags, nullptr);
}

}  // extern "C"
