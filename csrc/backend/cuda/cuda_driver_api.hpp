// unipool backend/cuda: the driver API functions the VMM backend needs,
// found through the runtime (cudaGetDriverEntryPointByVersion) instead of
// linking libcuda, so libunipool loads on machines without a driver.
#pragma once

#include <cuda.h>

#include <string>

namespace unipool::backend::cuda {

struct DriverApi {
  // The ABI version asked for: these functions' prototypes as of CUDA 12.0
  // (unchanged since VMM appeared in 10.2), so any 12.x or later driver has them.
  static constexpr unsigned kVersion = 12000;

  decltype(&::cuGetErrorString) get_error_string = nullptr;
  decltype(&::cuDeviceGet) device_get = nullptr;
  decltype(&::cuDeviceGetAttribute) device_get_attribute = nullptr;
  decltype(&::cuMemGetAllocationGranularity) get_allocation_granularity = nullptr;
  decltype(&::cuMemAddressReserve) address_reserve = nullptr;
  decltype(&::cuMemAddressFree) address_free = nullptr;
  decltype(&::cuMemCreate) create = nullptr;
  decltype(&::cuMemRelease) release = nullptr;
  decltype(&::cuMemMap) map = nullptr;
  decltype(&::cuMemUnmap) unmap = nullptr;
  decltype(&::cuMemSetAccess) set_access = nullptr;
  decltype(&::cuMemExportToShareableHandle) export_to_shareable_handle = nullptr;
  decltype(&::cuMemImportFromShareableHandle) import_from_shareable_handle = nullptr;

  // Empty when every function was found; else why not, for error messages.
  std::string unavailable;
  bool available() const noexcept { return unavailable.empty(); }

  // Looks every function up once. Never throws; clears the runtime error a
  // failed lookup leaves (when it can be cleared).
  static DriverApi resolve();
};

}  // namespace unipool::backend::cuda
