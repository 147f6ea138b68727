#include "backend/cuda/cuda_driver_api.hpp"

#include <cuda_runtime_api.h>

#include "backend/cuda/cuda_status.hpp"

namespace unipool::backend::cuda {

namespace {

// Finds `symbol`; on failure says why in `why` (once: the first failure).
template <class F>
void find(const char* symbol, F* out, std::string& why) {
  if (!why.empty()) return;
  void* function = nullptr;
  cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
  const cudaError_t err =
      cudaGetDriverEntryPointByVersion(symbol, &function, DriverApi::kVersion, cudaEnableDefault, &found);
  if (err != cudaSuccess) {
    const BackendStatus status = runtime_status(err);
    why = std::string("CUDA driver API unavailable (") + status.message + ")";
  } else if (found != cudaDriverEntryPointSuccess || function == nullptr) {
    why = std::string("CUDA driver API unavailable: the driver does not provide ") + symbol +
          (found == cudaDriverEntryPointVersionNotSufficent ? " (driver too old)" : "");
  } else {
    *out = reinterpret_cast<F>(function);
  }
}

}  // namespace

DriverApi DriverApi::resolve() {
  DriverApi api;
  std::string& why = api.unavailable;
  find("cuGetErrorString", &api.get_error_string, why);
  find("cuDeviceGet", &api.device_get, why);
  find("cuDeviceGetAttribute", &api.device_get_attribute, why);
  find("cuMemGetAllocationGranularity", &api.get_allocation_granularity, why);
  find("cuMemAddressReserve", &api.address_reserve, why);
  find("cuMemAddressFree", &api.address_free, why);
  find("cuMemCreate", &api.create, why);
  find("cuMemRelease", &api.release, why);
  find("cuMemMap", &api.map, why);
  find("cuMemUnmap", &api.unmap, why);
  find("cuMemSetAccess", &api.set_access, why);
  find("cuMemExportToShareableHandle", &api.export_to_shareable_handle, why);
  find("cuMemImportFromShareableHandle", &api.import_from_shareable_handle, why);
  if (api.available()) return api;
  // All or nothing: a half-resolved table must not be used by mistake.
  DriverApi none;
  none.unavailable = why;
  return none;
}

}  // namespace unipool::backend::cuda
