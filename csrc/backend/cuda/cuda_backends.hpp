// unipool backend/cuda: the CUDA device backends by name. A plain C++
// header (no CUDA include), for the device pool to use under
// #if UNIPOOL_HAS_CUDA.
//
//   "cuda_malloc"  cudaMalloc / cudaFree per segment
//   "cuda_vmm"     expandable segments: cuMemAddressReserve + cuMemCreate /
//                  cuMemMap per granule; the driver API is resolved through
//                  cudaGetDriverEntryPointByVersion, never linked, so the
//                  library loads without a driver; supports_expandable() is
//                  false when the driver or the device lacks VMM. Plain
//                  segments (allocate) are a reservation mapped whole, or
//                  cudaMalloc blocks when VMM is unavailable.
//   "nccl"         ncclMemAlloc / ncclMemFree (buffers NCCL can register
//                  for zero-copy collectives). NCCL is found at run time:
//                  $UNIPOOL_NCCL_LIBRARY if set, else an NCCL already in the
//                  process (dlsym(RTLD_DEFAULT)), else dlopen("libnccl.so.2").
//
// A backend whose library is missing is still created; its calls return an
// error whose message says what is missing.
#pragma once

#include <memory>
#include <string_view>

#include "unipool/device_backend.hpp"

namespace unipool::backend {

// Null for a name that is not one of the above.
std::unique_ptr<DeviceBackend> make_cuda_backend(std::string_view name);

std::unique_ptr<DeviceBackend> make_cuda_malloc_backend();
std::unique_ptr<DeviceBackend> make_cuda_vmm_backend();
std::unique_ptr<DeviceBackend> make_nccl_backend();

}  // namespace unipool::backend
