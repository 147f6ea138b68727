// unipool null GPU: the table behind cudaGetDriverEntryPoint*: every null GPU
// driver function by its (unversioned) name.
#include <cstring>
#include <iterator>

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

const Symbol kSymbols[] = {
    {"cuGetErrorString", address(&cuGetErrorString)},
    {"cuGetErrorName", address(&cuGetErrorName)},
    {"cuInit", address(&cuInit)},
    {"cuDriverGetVersion", address(&cuDriverGetVersion)},
    {"cuDeviceGet", address(&cuDeviceGet)},
    {"cuDeviceGetAttribute", address(&cuDeviceGetAttribute)},
    {"cuDevicePrimaryCtxGetState", address(&cuDevicePrimaryCtxGetState)},
    {"cuCtxGetDevice", address(&cuCtxGetDevice)},
    {"cuMemGetAllocationGranularity", address(&cuMemGetAllocationGranularity)},
    {"cuMemAddressReserve", address(&cuMemAddressReserve)},
    {"cuMemAddressFree", address(&cuMemAddressFree)},
    {"cuMemCreate", address(&cuMemCreate)},
    {"cuMemRelease", address(&cuMemRelease)},
    {"cuMemMap", address(&cuMemMap)},
    {"cuMemUnmap", address(&cuMemUnmap)},
    {"cuMemSetAccess", address(&cuMemSetAccess)},
};
}  // namespace

void* driver_symbol(const char* name) {
  for (const Symbol& symbol : kSymbols) {
    if (std::strcmp(symbol.name, name) == 0) return symbol.function;
  }
  return nullptr;
}

}  // namespace unipool::nullgpu::detail
