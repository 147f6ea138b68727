// unipool null GPU: sharing VMM memory between processes through POSIX
// descriptors, as the driver does on Linux. Memory created for that handle
// type under Config::ipc is a memfd (driver_vmm.cpp): export hands out a
// copy of it, and import takes one, after checking from its name that it
// is such a memfd. Moving the descriptor between processes is the
// program's business (a Unix socket, pidfd_getfd), as with CUDA.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <climits>
#include <cstring>

#include "nullgpu/state.hpp"

using unipool::nullgpu::detail::Call;
using unipool::nullgpu::detail::Family;
using unipool::nullgpu::detail::kVmmMemfd;
using unipool::nullgpu::detail::memfd_number;
using unipool::nullgpu::detail::Physical;

namespace {

// The device whose memory fd is (a memfd named kVmmMemfd + device), or -1.
int device_of_memfd(int fd) {
  uint64_t device = 0;
  return memfd_number(fd, kVmmMemfd, &device) && device <= INT_MAX ? static_cast<int>(device) : -1;
}

}  // namespace

extern "C" {

CUresult cuMemExportToShareableHandle(void* shareableHandle, CUmemGenericAllocationHandle handle,
                                      CUmemAllocationHandleType handleType, unsigned long long flags) {
  Call call("cuMemExportToShareableHandle", Family::driver);
  if (call.refused()) return call.driver_refusal();
  const auto it = call.s.physical.find(handle);
  if (shareableHandle == nullptr || flags != 0 || it == call.s.physical.end() || it->second.released) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (handleType != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) return CUDA_ERROR_NOT_SUPPORTED;
  // Not created for export (or Config::ipc was off).
  if (it->second.fd < 0) return CUDA_ERROR_NOT_PERMITTED;
  const int copy = fcntl(it->second.fd, F_DUPFD_CLOEXEC, 0);
  if (copy < 0) return CUDA_ERROR_OUT_OF_MEMORY;
  std::memcpy(shareableHandle, &copy, sizeof copy);
  return CUDA_SUCCESS;
}

CUresult cuMemImportFromShareableHandle(CUmemGenericAllocationHandle* handle, void* osHandle,
                                        CUmemAllocationHandleType shHandleType) {
  Call call("cuMemImportFromShareableHandle", Family::driver);
  if (call.refused()) return call.driver_refusal();
  if (handle == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (shHandleType != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) return CUDA_ERROR_NOT_SUPPORTED;
  // The descriptor travels in the pointer's bits, as with CUDA.
  const int fd = static_cast<int>(reinterpret_cast<intptr_t>(osHandle));
  const int device = device_of_memfd(fd);
  struct stat st {};
  if (device < 0 || fstat(fd, &st) != 0) return CUDA_ERROR_INVALID_HANDLE;
  const auto bytes = static_cast<uint64_t>(st.st_size);
  if (!call.s.valid_device(device) || bytes == 0 || bytes % call.s.config.granularity != 0) {
    return CUDA_ERROR_INVALID_HANDLE;
  }
  // The caller keeps (and closes) its descriptor; the handle holds a copy.
  const int copy = fcntl(fd, F_DUPFD_CLOEXEC, 0);
  if (copy < 0) return CUDA_ERROR_OUT_OF_MEMORY;
  const CUmemGenericAllocationHandle created = call.s.next_handle++;
  call.s.physical.emplace(created, Physical{device, bytes, false, false, copy, true});
  *handle = created;
  return CUDA_SUCCESS;
}

}  // extern "C"
