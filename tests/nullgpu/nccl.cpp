// unipool null GPU: NCCL buffer allocation (ncclMemAlloc / ncclMemFree) and
// registration stubs that only keep count. Exported from test binaries (see
// CMakeLists.txt) so dlsym(RTLD_DEFAULT, "ncclMemAlloc") finds it.
#include <cstdlib>

#include "nullgpu/state.hpp"

using unipool::nullgpu::detail::Call;
using unipool::nullgpu::detail::DeviceAllocation;
using unipool::nullgpu::detail::Family;
using unipool::nullgpu::detail::Needs;
using unipool::nullgpu::detail::thread_state;

extern "C" {

ncclResult_t ncclGetVersion(int* version) {
  Call call("ncclGetVersion", Family::nccl, Needs::nothing);  // answered without a driver, like the real one
  if (call.refused()) return call.nccl_refusal();
  if (version == nullptr) return ncclInvalidArgument;
  *version = NCCL_VERSION_CODE;
  return ncclSuccess;
}

// Like NCCL's cuMem path: the size is rounded up to the granularity, and a
// failed cuMemCreate (out of memory included) is an ncclUnhandledCudaError.
ncclResult_t ncclMemAlloc(void** ptr, size_t size) {
  Call call("ncclMemAlloc", Family::nccl);
  if (call.refused()) return call.nccl_refusal();
  if (ptr == nullptr) return ncclInvalidArgument;
  if (size == 0) {
    *ptr = nullptr;
    return ncclSuccess;
  }
  const uint64_t granularity = call.s.config.granularity;
  const uint64_t bytes = (size + granularity - 1) / granularity * granularity;
  const int device = thread_state().device;
  if (!call.s.fits(device, bytes)) return ncclUnhandledCudaError;
  uint64_t mapped = 0;
  void* storage = unipool::nullgpu::detail::map_memory(bytes, granularity, &mapped);
  if (storage == nullptr) return ncclSystemError;
  call.s.allocations.emplace(reinterpret_cast<uintptr_t>(storage), DeviceAllocation{device, bytes, true, mapped});
  call.s.charge(device, bytes);
  *ptr = storage;
  return ncclSuccess;
}

ncclResult_t ncclMemFree(void* ptr) {
  Call call("ncclMemFree", Family::nccl);
  if (call.refused()) return call.nccl_refusal();
  if (ptr == nullptr) return ncclSuccess;
  const auto it = call.s.allocations.find(reinterpret_cast<uintptr_t>(ptr));
  if (it == call.s.allocations.end() || !it->second.nccl) return ncclUnhandledCudaError;
  call.s.uncharge(it->second.device, it->second.bytes);
  unipool::nullgpu::detail::unmap_memory(ptr, it->second.mapped_bytes);
  call.s.allocations.erase(it);
  return ncclSuccess;
}

ncclResult_t ncclCommRegister(const ncclComm_t comm, void* buff, size_t size, void** handle) {
  Call call("ncclCommRegister", Family::nccl);
  if (call.refused()) return call.nccl_refusal();
  if (comm == nullptr || buff == nullptr || size == 0 || handle == nullptr) return ncclInvalidArgument;
  const uintptr_t token = call.s.next_nccl_registration;
  call.s.next_nccl_registration += 16;
  call.s.nccl_registrations.insert(token);
  *handle = reinterpret_cast<void*>(token);
  return ncclSuccess;
}

ncclResult_t ncclCommDeregister(const ncclComm_t comm, void* handle) {
  Call call("ncclCommDeregister", Family::nccl);
  if (call.refused()) return call.nccl_refusal();
  if (comm == nullptr || call.s.nccl_registrations.erase(reinterpret_cast<uintptr_t>(handle)) == 0) {
    return ncclInvalidArgument;
  }
  return ncclSuccess;
}

const char* ncclGetErrorString(ncclResult_t result) {
  switch (result) {
    case ncclSuccess: return "no error";
    case ncclUnhandledCudaError: return "unhandled cuda error (run with NCCL_DEBUG=INFO for details)";
    case ncclSystemError: return "unhandled system error (run with NCCL_DEBUG=INFO for details)";
    case ncclInternalError: return "internal error - please report this issue to the NCCL developers";
    case ncclInvalidArgument: return "invalid argument (run with NCCL_DEBUG=WARN for details)";
    case ncclInvalidUsage: return "invalid usage (run with NCCL_DEBUG=WARN for details)";
    case ncclRemoteError: return "remote process exited or there was a network error";
    case ncclInProgress: return "NCCL operation in progress";
    default: return "unknown result code";
  }
}

}  // extern "C"
