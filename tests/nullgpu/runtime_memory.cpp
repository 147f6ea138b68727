// unipool null GPU: device memory (host memory standing in for it), copies,
// pointer attributes and host-memory registration.
#include <sys/mman.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <iterator>

#include "nullgpu/state.hpp"

using unipool::nullgpu::detail::Call;
using unipool::nullgpu::detail::DeviceAllocation;
using unipool::nullgpu::detail::Family;
using unipool::nullgpu::detail::Registration;
using unipool::nullgpu::detail::State;
using unipool::nullgpu::detail::stream_device;
using unipool::nullgpu::detail::thread_state;

namespace {

constexpr size_t kAlignment = 256;  // cudaMalloc's documented minimum

// The entry of `map` whose [key, key + size) holds `address`, or end().
template <class Map, class SizeOf>
auto containing(Map& map, uintptr_t address, SizeOf size_of) {
  auto it = map.upper_bound(address);
  if (it == map.begin()) return map.end();
  --it;
  return address - it->first < size_of(it->second) ? it : map.end();
}

// Whether [ptr, ptr + bytes) is mapped memory of this process: registering
// an unmapped range fails in CUDA as well.
bool host_range_mapped(const void* ptr, size_t bytes) {
  const auto page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  const auto begin = reinterpret_cast<uintptr_t>(ptr) & ~(page - 1);
  const auto end = reinterpret_cast<uintptr_t>(ptr) + bytes;
  return msync(reinterpret_cast<void*>(begin), end - begin, MS_ASYNC) == 0;
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
  if (call.refused()) return call.runtime_refusal();
  if (devPtr == nullptr) return call.fail(cudaErrorInvalidValue);
  if (size == 0) {
    *devPtr = nullptr;
    return cudaSuccess;
  }
  const int device = thread_state().device;
  if (!call.s.fits(device, size)) return call.fail(cudaErrorMemoryAllocation);
  void* storage = std::aligned_alloc(kAlignment, (size + kAlignment - 1) / kAlignment * kAlignment);
  if (storage == nullptr) return call.fail(cudaErrorMemoryAllocation);
  call.s.allocations.emplace(reinterpret_cast<uintptr_t>(storage), DeviceAllocation{device, size, false});
  call.s.charge(device, size);
  *devPtr = storage;
  return cudaSuccess;
}

cudaError_t cudaFree(void* devPtr) {
  Call call("cudaFree", Family::runtime);
  if (call.refused()) return call.runtime_refusal();
  if (devPtr == nullptr) return cudaSuccess;  // often used to create the context
  const auto it = call.s.allocations.find(reinterpret_cast<uintptr_t>(devPtr));
  if (it == call.s.allocations.end() || it->second.nccl) return call.fail(cudaErrorInvalidValue);
  const DeviceAllocation allocation = it->second;
  call.s.allocations.erase(it);
  call.s.uncharge(allocation.device, allocation.bytes);
  std::free(devPtr);
  if (call.s.config.free_synchronizes) call.s.complete_device_events(allocation.device);
  return cudaSuccess;
}

cudaError_t cudaMemcpy(void* dst, const void* src, size_t count, enum cudaMemcpyKind kind) {
  Call call("cudaMemcpy", Family::runtime);
  if (call.refused()) return call.runtime_refusal();
  if (count != 0 && (dst == nullptr || src == nullptr)) return call.fail(cudaErrorInvalidValue);
  if (kind < cudaMemcpyHostToHost || kind > cudaMemcpyDefault) return call.fail(cudaErrorInvalidMemcpyDirection);
  if (count != 0) std::memmove(dst, src, count);
  return cudaSuccess;
}

cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t count, enum cudaMemcpyKind kind, cudaStream_t stream) {
  Call call("cudaMemcpyAsync", Family::runtime);
  if (call.refused()) return call.runtime_refusal();
  if (stream_device(call.s, stream) < 0) return call.fail(cudaErrorInvalidResourceHandle);
  if (count != 0 && (dst == nullptr || src == nullptr)) return call.fail(cudaErrorInvalidValue);
  if (kind < cudaMemcpyHostToHost || kind > cudaMemcpyDefault) return call.fail(cudaErrorInvalidMemcpyDirection);
  if (count != 0) std::memmove(dst, src, count);
  return cudaSuccess;
}

cudaError_t cudaMemset(void* devPtr, int value, size_t count) {
  Call call("cudaMemset", Family::runtime);
  if (call.refused()) return call.runtime_refusal();
  if (count != 0 && devPtr == nullptr) return call.fail(cudaErrorInvalidValue);
  if (count != 0) std::memset(devPtr, value, count);
  return cudaSuccess;
}

cudaError_t cudaMemsetAsync(void* devPtr, int value, size_t count, cudaStream_t stream) {
  Call call("cudaMemsetAsync", Family::runtime);
  if (call.refused()) return call.runtime_refusal();
  if (stream_device(call.s, stream) < 0) return call.fail(cudaErrorInvalidResourceHandle);
  if (count != 0 && devPtr == nullptr) return call.fail(cudaErrorInvalidValue);
  if (count != 0) std::memset(devPtr, value, count);
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
  if (size > call.s.config.pinned_limit - call.s.pinned) return call.fail(cudaErrorMemoryAllocation);
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
