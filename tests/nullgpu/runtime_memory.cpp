// unipool null GPU: device memory (host memory standing in for it), copies,
// pointer attributes and host-memory registration.
#include <sys/mman.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <iterator>

#include "nullgpu/state.hpp"

using unipool::nullgpu::detail::advise_device_memory;
using unipool::nullgpu::detail::Call;
using unipool::nullgpu::detail::capture_forbids_sync;
using unipool::nullgpu::detail::containing;
using unipool::nullgpu::detail::DeviceAllocation;
using unipool::nullgpu::detail::Family;
using unipool::nullgpu::detail::HostAllocation;
using unipool::nullgpu::detail::map_memory;
using unipool::nullgpu::detail::map_shared_memory;
using unipool::nullgpu::detail::Registration;
using unipool::nullgpu::detail::State;
using unipool::nullgpu::detail::stream_device;
using unipool::nullgpu::detail::thread_state;
using unipool::nullgpu::detail::unmap_memory;

namespace {

constexpr size_t kAlignment = 256;  // cudaMalloc's documented minimum

// Whether [ptr, ptr + bytes) is mapped memory of this process: registering
// an unmapped range fails in CUDA as well.
bool host_range_mapped(const void* ptr, size_t bytes) {
  const auto page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  const auto begin = reinterpret_cast<uintptr_t>(ptr) & ~(page - 1);
  const auto end = reinterpret_cast<uintptr_t>(ptr) + bytes;
  return msync(reinterpret_cast<void*>(begin), end - begin, MS_ASYNC) == 0;
}

cudaError_t device_malloc(Call& call, void** devPtr, size_t size) {
  if (call.refused()) return call.runtime_refusal();
  if (devPtr == nullptr) return call.fail(cudaErrorInvalidValue);
  if (size == 0) {
    *devPtr = nullptr;
    return cudaSuccess;
  }
  const int device = thread_state().device;
  if (!call.s.fits(device, size)) return call.fail(cudaErrorMemoryAllocation);
  uint64_t mapped = 0;
  int fd = -1;
  const uint64_t serial = call.s.next_serial++;
  void* storage = call.s.config.ipc ? map_shared_memory(size, kAlignment, &mapped, &fd, -1, serial)
                                    : map_memory(size, kAlignment, &mapped);
  if (storage == nullptr) return call.fail(cudaErrorMemoryAllocation);
  advise_device_memory(call.s, storage, mapped);
  call.s.allocations.emplace(reinterpret_cast<uintptr_t>(storage),
                             DeviceAllocation{device, size, false, mapped, fd, false, serial});
  call.s.charge(device, size);
  *devPtr = storage;
  return cudaSuccess;
}

cudaError_t device_free(Call& call, void* devPtr) {
  const auto it = call.s.allocations.find(reinterpret_cast<uintptr_t>(devPtr));
  if (it == call.s.allocations.end() || it->second.nccl || it->second.opened) return call.fail(cudaErrorInvalidValue);
  const DeviceAllocation allocation = it->second;
  call.s.allocations.erase(it);
  call.s.uncharge(allocation.device, allocation.bytes);
  unmap_memory(devPtr, allocation.mapped_bytes);
  if (allocation.fd >= 0) close(allocation.fd);
  if (call.s.config.free_synchronizes) call.s.complete_device_events(allocation.device);
  return cudaSuccess;
}

// Pinned host memory counts against the same limit as registrations.
cudaError_t host_alloc(Call& call, void** ptr, size_t size, unsigned flags) {
  if (call.refused()) return call.runtime_refusal();
  constexpr unsigned kKnownFlags = cudaHostAllocPortable | cudaHostAllocMapped | cudaHostAllocWriteCombined;
  if (ptr == nullptr || (flags & ~kKnownFlags) != 0) return call.fail(cudaErrorInvalidValue);
  if (size == 0) {
    *ptr = nullptr;
    return cudaSuccess;
  }
  auto& s = call.s;
  if (size > s.config.pinned_limit || s.pinned + s.host_allocated > s.config.pinned_limit - size) {
    return call.fail(cudaErrorMemoryAllocation);
  }
  uint64_t mapped = 0;
  void* storage = map_memory(size, kAlignment, &mapped);
  if (storage == nullptr) return call.fail(cudaErrorMemoryAllocation);
  s.host_allocations.emplace(reinterpret_cast<uintptr_t>(storage), HostAllocation{size, mapped, flags});
  s.host_allocated += size;
  *ptr = storage;
  return cudaSuccess;
}

bool overlaps_registration(const State& s, uintptr_t begin, uint64_t bytes) {
  auto it = s.registrations.lower_bound(begin + bytes);
  if (it == s.registrations.begin()) return false;
  --it;
  return it->first + it->second.bytes > begin;
}

}  // namespace

extern "C" {

cudaError_t cudaMalloc(void** devPtr, size_t size) {
  Call call("cudaMalloc", Family::runtime);
  return device_malloc(call, devPtr, size);
}

cudaError_t cudaFree(void* devPtr) {
  Call call("cudaFree", Family::runtime);
  if (call.refused()) return call.runtime_refusal();
  if (devPtr == nullptr) return cudaSuccess;  // often used to create the context
  // cudaFree synchronizes the device, which a capture forbids.
  if (capture_forbids_sync(call.s, nullptr)) return call.fail(cudaErrorStreamCaptureUnsupported);
  return device_free(call, devPtr);
}

// Stream-ordered allocation without a pool: memory is served at once and
// freed at once, since work on the null GPU is done when it is issued.
cudaError_t cudaMallocAsync(void** devPtr, size_t size, cudaStream_t stream) {
  Call call("cudaMallocAsync", Family::runtime);
  if (call.refused()) return call.runtime_refusal();
  if (stream_device(call.s, stream) < 0) return call.fail(cudaErrorInvalidResourceHandle);
  return device_malloc(call, devPtr, size);
}

cudaError_t cudaFreeAsync(void* devPtr, cudaStream_t stream) {
  Call call("cudaFreeAsync", Family::runtime);
  if (call.refused()) return call.runtime_refusal();
  if (stream_device(call.s, stream) < 0) return call.fail(cudaErrorInvalidResourceHandle);
  if (devPtr == nullptr) return cudaSuccess;
  return device_free(call, devPtr);
}

cudaError_t cudaHostAlloc(void** pHost, size_t size, unsigned int flags) {
  Call call("cudaHostAlloc", Family::runtime);
  return host_alloc(call, pHost, size, flags);
}

cudaError_t cudaMallocHost(void** ptr, size_t size) {
  Call call("cudaMallocHost", Family::runtime);
  return host_alloc(call, ptr, size, cudaHostAllocDefault);
}

cudaError_t cudaFreeHost(void* ptr) {
  Call call("cudaFreeHost", Family::runtime);
  if (call.refused()) return call.runtime_refusal();
  if (ptr == nullptr) return cudaSuccess;
  const auto it = call.s.host_allocations.find(reinterpret_cast<uintptr_t>(ptr));
  if (it == call.s.host_allocations.end()) return call.fail(cudaErrorInvalidValue);
  call.s.host_allocated -= it->second.bytes;
  unmap_memory(ptr, it->second.mapped_bytes);
  call.s.host_allocations.erase(it);
  return cudaSuccess;
}

// Host and device share one address space here, as with unified addressing.
cudaError_t cudaHostGetDevicePointer(void** pDevice, void* pHost, unsigned int flags) {
  Call call("cudaHostGetDevicePointer", Family::runtime);
  if (call.refused()) return call.runtime_refusal();
  if (pDevice == nullptr || flags != 0) return call.fail(cudaErrorInvalidValue);
  const auto address = reinterpret_cast<uintptr_t>(pHost);
  const auto bytes_of = [](const auto& entry) { return entry.bytes; };
  if (containing(call.s.host_allocations, address, bytes_of) == call.s.host_allocations.end() &&
      containing(call.s.registrations, address, bytes_of) == call.s.registrations.end()) {
    return call.fail(cudaErrorInvalidValue);
  }
  *pDevice = pHost;
  return cudaSuccess;
}

cudaError_t cudaHostGetFlags(unsigned int* pFlags, void* pHost) {
  Call call("cudaHostGetFlags", Family::runtime);
  if (call.refused()) return call.runtime_refusal();
  const auto bytes_of = [](const auto& entry) { return entry.bytes; };
  const auto it = containing(call.s.host_allocations, reinterpret_cast<uintptr_t>(pHost), bytes_of);
  if (pFlags == nullptr || it == call.s.host_allocations.end()) return call.fail(cudaErrorInvalidValue);
  *pFlags = it->second.flags;
  return cudaSuccess;
}

cudaError_t cudaPointerGetAttributes(struct cudaPointerAttributes* attributes, const void* ptr) {
  Call call("cudaPointerGetAttributes", Family::runtime);
  if (call.refused()) return call.runtime_refusal();
  if (attributes == nullptr) return call.fail(cudaErrorInvalidValue);
  *attributes = cudaPointerAttributes{};
  attributes->type = cudaMemoryTypeUnregistered;
  attributes->device = cudaInvalidDeviceId;
  const auto address = reinterpret_cast<uintptr_t>(ptr);
  auto& s = call.s;
  const auto bytes_of = [](const auto& entry) { return entry.bytes; };
  if (auto it = containing(s.allocations, address, bytes_of); it != s.allocations.end()) {
    attributes->type = cudaMemoryTypeDevice;
    attributes->device = it->second.device;
    attributes->devicePointer = const_cast<void*>(ptr);
  } else if (auto m = containing(s.mappings, address, bytes_of); m != s.mappings.end()) {
    attributes->type = cudaMemoryTypeDevice;
    attributes->device = s.physical.at(m->second.handle).device;
    attributes->devicePointer = const_cast<void*>(ptr);
  } else if (auto r = containing(s.registrations, address, bytes_of); r != s.registrations.end()) {
    attributes->type = cudaMemoryTypeHost;
    attributes->device = r->second.device;
    attributes->devicePointer = const_cast<void*>(ptr);
    attributes->hostPointer = const_cast<void*>(ptr);
  } else if (auto h = containing(s.host_allocations, address, bytes_of); h != s.host_allocations.end()) {
    attributes->type = cudaMemoryTypeHost;
    attributes->device = 0;
    attributes->devicePointer = const_cast<void*>(ptr);
    attributes->hostPointer = const_cast<void*>(ptr);
  }
  return cudaSuccess;
}

cudaError_t cudaHostRegister(void* ptr, size_t size, unsigned int flags) {
  Call call("cudaHostRegister", Family::runtime);
  if (call.refused()) return call.runtime_refusal();
  constexpr unsigned kKnownFlags = cudaHostRegisterPortable | cudaHostRegisterMapped | cudaHostRegisterIoMemory |
                                   cudaHostRegisterReadOnly;
  if (ptr == nullptr || size == 0 || (flags & ~kKnownFlags) != 0) return call.fail(cudaErrorInvalidValue);
  const auto begin = reinterpret_cast<uintptr_t>(ptr);
  if (overlaps_registration(call.s, begin, size)) return call.fail(cudaErrorHostMemoryAlreadyRegistered);
  if (!host_range_mapped(ptr, size)) return call.fail(cudaErrorInvalidValue);
  if (size > call.s.config.pinned_limit || call.s.pinned + call.s.host_allocated > call.s.config.pinned_limit - size) {
    return call.fail(cudaErrorMemoryAllocation);
  }
  call.s.registrations.emplace(begin, Registration{size, thread_state().device});
  call.s.pinned += size;
  return cudaSuccess;
}

cudaError_t cudaHostUnregister(void* ptr) {
  Call call("cudaHostUnregister", Family::runtime);
  if (call.refused()) return call.runtime_refusal();
  const auto it = call.s.registrations.find(reinterpret_cast<uintptr_t>(ptr));
  if (ptr == nullptr || it == call.s.registrations.end()) return call.fail(cudaErrorHostMemoryNotRegistered);
  call.s.pinned -= it->second.bytes;
  call.s.registrations.erase(it);
  return cudaSuccess;
}

}  // extern "C"
