// unipool null GPU: CUDA IPC between processes of this host. Device memory
// is a memfd when Config::ipc is on; a memory handle names the exporting
// process and the memfd's descriptor there, and the opening process takes
// a copy of that descriptor with pidfd_getfd (which the kernel allows to a
// process that may ptrace the other: the same user, under the default Yama
// policy) and maps it, once: opening a handle again returns the same
// pointer, and it is unmapped with the last close, as CUDA counts opens.
// Every copy on the null GPU is done when its call returns, so an event
// opened from another process's handle is complete.
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstring>

#include "nullgpu/state.hpp"

using unipool::nullgpu::detail::Call;
using unipool::nullgpu::detail::containing;
using unipool::nullgpu::detail::DeviceAllocation;
using unipool::nullgpu::detail::Family;
using unipool::nullgpu::detail::kDeviceMemfd;
using unipool::nullgpu::detail::map_shared_memory;
using unipool::nullgpu::detail::memfd_number;
using unipool::nullgpu::detail::thread_state;

namespace {

constexpr uint64_t kMemMagic = 0x6d656d6370696e67;    // "gnipcmem"
constexpr uint64_t kEventMagic = 0x7476656370696e67;  // "gnipcevt"

// What a cudaIpcMemHandle_t holds on the null GPU (64 bytes at most).
struct MemBlob {
  uint64_t magic;
  int32_t pid, fd;
  uint64_t bytes, mapped_bytes, serial;
  int32_t device;
};
static_assert(sizeof(MemBlob) <= sizeof(cudaIpcMemHandle_t));

// A descriptor of process pid, copied into this one; -1 if that process or
// descriptor is gone (or the kernel refuses).
int take_descriptor(pid_t pid, int fd) {
#if defined(SYS_pidfd_open) && defined(SYS_pidfd_getfd)
  const int pidfd = static_cast<int>(syscall(SYS_pidfd_open, pid, 0));
  if (pidfd < 0) return -1;
  const int copy = static_cast<int>(syscall(SYS_pidfd_getfd, pidfd, fd, 0));
  close(pidfd);
  return copy;
#else
  (void)pid, (void)fd;
  return -1;
#endif
}

// Whether fd is the memfd of allocation `serial` (its name says): a handle
// to a freed allocation names a descriptor number that may be another's now.
bool is_allocation(int fd, uint64_t serial) {
  uint64_t named = 0;
  return memfd_number(fd, kDeviceMemfd, &named) && named == serial;
}

}  // namespace

extern "C" {

cudaError_t cudaIpcGetMemHandle(cudaIpcMemHandle_t* handle, void* devPtr) {
  Call call("cudaIpcGetMemHandle", Family::runtime);
  if (call.refused()) return call.runtime_refusal();
  if (handle == nullptr) return call.fail(cudaErrorInvalidValue);
  const auto it = containing(call.s.allocations, reinterpret_cast<uintptr_t>(devPtr),
                             [](const DeviceAllocation& a) { return a.mapped_bytes; });
  if (it == call.s.allocations.end() || it->second.opened) return call.fail(cudaErrorInvalidValue);
  if (it->second.fd < 0) return call.fail(cudaErrorNotSupported);  // not shareable: Config::ipc was off
  const MemBlob blob{kMemMagic,         getpid(),         it->second.fd, it->second.bytes, it->second.mapped_bytes,
                     it->second.serial, it->second.device};
  std::memset(handle, 0, sizeof *handle);
  std::memcpy(handle, &blob, sizeof blob);
  return cudaSuccess;
}

cudaError_t cudaIpcOpenMemHandle(void** devPtr, cudaIpcMemHandle_t handle, unsigned int flags) {
  Call call("cudaIpcOpenMemHandle", Family::runtime);
  if (call.refused()) return call.runtime_refusal();
  if (devPtr == nullptr || (flags & ~static_cast<unsigned>(cudaIpcMemLazyEnablePeerAccess)) != 0) {
    return call.fail(cudaErrorInvalidValue);
  }
  MemBlob blob;
  std::memcpy(&blob, &handle, sizeof blob);
  if (blob.magic != kMemMagic || !call.s.valid_device(blob.device)) return call.fail(cudaErrorInvalidResourceHandle);
  // Opened already: CUDA counts the opens and returns the same pointer.
  for (auto& [base, a] : call.s.allocations) {
    if (a.opened && a.source == blob.pid && a.serial == blob.serial) {
      ++a.opens;
      *devPtr = reinterpret_cast<void*>(base);
      return cudaSuccess;
    }
  }
  const int fd = take_descriptor(blob.pid, blob.fd);
  if (fd < 0) return call.fail(cudaErrorInvalidResourceHandle);  // the exporter is gone
  if (!is_allocation(fd, blob.serial)) {                         // the allocation is gone
    close(fd);
    return call.fail(cudaErrorInvalidResourceHandle);
  }
  uint64_t mapped = 0;
  int kept = -1;
  void* base = map_shared_memory(blob.mapped_bytes, 256, &mapped, &kept, fd);
  close(fd);  // the mapping holds the memory
  if (base == nullptr) return call.fail(cudaErrorMapBufferObjectFailed);
  call.s.allocations.emplace(reinterpret_cast<uintptr_t>(base), DeviceAllocation{blob.device, blob.bytes, false, mapped,
                                                                                 -1, true, blob.serial, blob.pid, 1});
  *devPtr = base;
  return cudaSuccess;
}

cudaError_t cudaIpcCloseMemHandle(void* devPtr) {
  Call call("cudaIpcCloseMemHandle", Family::runtime);
  if (call.refused()) return call.runtime_refusal();
  const auto it = call.s.allocations.find(reinterpret_cast<uintptr_t>(devPtr));
  if (it == call.s.allocations.end() || !it->second.opened) return call.fail(cudaErrorInvalidValue);
  if (--it->second.opens > 0) return cudaSuccess;
  munmap(devPtr, it->second.mapped_bytes);
  call.s.allocations.erase(it);
  return cudaSuccess;
}

cudaError_t cudaIpcGetEventHandle(cudaIpcEventHandle_t* handle, cudaEvent_t event) {
  Call call("cudaIpcGetEventHandle", Family::runtime);
  if (call.refused()) return call.runtime_refusal();
  if (handle == nullptr || event == nullptr || call.s.events.count(event) == 0) {
    return call.fail(cudaErrorInvalidResourceHandle);
  }
  // CUDA asks for an interprocess event without timing.
  if (!(event->flags & cudaEventInterprocess) || !(event->flags & cudaEventDisableTiming)) {
    return call.fail(cudaErrorInvalidResourceHandle);
  }
  std::memset(handle, 0, sizeof *handle);
  std::memcpy(handle, &kEventMagic, sizeof kEventMagic);
  return cudaSuccess;
}

cudaError_t cudaIpcOpenEventHandle(cudaEvent_t* event, cudaIpcEventHandle_t handle) {
  Call call("cudaIpcOpenEventHandle", Family::runtime);
  if (call.refused()) return call.runtime_refusal();
  uint64_t magic = 0;
  std::memcpy(&magic, &handle, sizeof magic);
  if (event == nullptr || magic != kEventMagic) return call.fail(cudaErrorInvalidResourceHandle);
  auto* opened = new CUevent_st{thread_state().device, cudaEventInterprocess | cudaEventDisableTiming};
  opened->recorded = opened->complete = true;
  call.s.events.insert(opened);
  *event = opened;
  return cudaSuccess;
}

}  // extern "C"
