// unipool null GPU: the driver's virtual memory management (cuMem*), on
// real reserved host address space so that unmapped memory faults. Memory
// created for a POSIX descriptor handle under Config::ipc is a memfd that
// cuMemExportToShareableHandle hands out (driver_vmm_ipc.cpp).
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>

#include "nullgpu/state.hpp"

using unipool::nullgpu::detail::Call;
using unipool::nullgpu::detail::create_memfd;
using unipool::nullgpu::detail::Family;
using unipool::nullgpu::detail::kVmmMemfd;
using unipool::nullgpu::detail::Mapping;
using unipool::nullgpu::detail::Physical;
using unipool::nullgpu::detail::State;

namespace {

constexpr int kMapFlags = MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE;

bool multiple_of(uint64_t value, uint64_t granularity) { return value % granularity == 0; }

// CUDA_SUCCESS if `prop` asks for pinned memory on a device the null GPU has.
CUresult check_prop(const State& s, const CUmemAllocationProp* prop) {
  if (prop == nullptr || prop->type != CU_MEM_ALLOCATION_TYPE_PINNED ||
      prop->location.type != CU_MEM_LOCATION_TYPE_DEVICE) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (!s.valid_device(prop->location.id)) return CUDA_ERROR_INVALID_DEVICE;
  if (!s.config.vmm_supported) return CUDA_ERROR_NOT_SUPPORTED;
  return CUDA_SUCCESS;
}

// True if [begin, begin + bytes) lies inside one reservation.
bool inside_reservation(const State& s, uintptr_t begin, uint64_t bytes) {
  auto it = s.reservations.upper_bound(begin);
  if (it == s.reservations.begin()) return false;
  --it;
  return begin - it->first <= it->second && bytes <= it->second - (begin - it->first);
}

bool overlaps_mapping(const State& s, uintptr_t begin, uint64_t bytes) {
  auto it = s.mappings.lower_bound(begin + bytes);
  if (it == s.mappings.begin()) return false;
  --it;
  return it->first + it->second.bytes > begin;
}

// True if mappings tile [begin, begin + bytes) exactly, starting at `begin`.
bool tiled_by_mappings(const State& s, uintptr_t begin, uint64_t bytes) {
  uintptr_t at = begin;
  for (auto it = s.mappings.find(begin); it != s.mappings.end() && it->first == at && at < begin + bytes; ++it) {
    at += it->second.bytes;
  }
  return at == begin + bytes;
}

// True if [begin, begin + bytes) is fully covered by mappings (any split).
bool covered_by_mappings(const State& s, uintptr_t begin, uint64_t bytes) {
  auto it = s.mappings.upper_bound(begin);
  if (it == s.mappings.begin()) return false;
  --it;
  uintptr_t at = begin;
  for (; it != s.mappings.end() && it->first <= at && at < begin + bytes; ++it) {
    at = std::max<uintptr_t>(at, it->first + it->second.bytes);
  }
  return at >= begin + bytes;
}

void free_physical(State& s, std::map<CUmemGenericAllocationHandle, Physical>::iterator it) {
  if (!it->second.imported) s.uncharge(it->second.device, it->second.bytes);
  if (it->second.fd >= 0) close(it->second.fd);
  s.physical.erase(it);
}

}  // namespace

extern "C" {

CUresult cuMemGetAllocationGranularity(size_t* granularity, const CUmemAllocationProp* prop,
                                       CUmemAllocationGranularity_flags option) {
  Call call("cuMemGetAllocationGranularity", Family::driver);
  if (call.refused()) return call.driver_refusal();
  if (granularity == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (option != CU_MEM_ALLOC_GRANULARITY_MINIMUM && option != CU_MEM_ALLOC_GRANULARITY_RECOMMENDED) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (const CUresult res = check_prop(call.s, prop); res != CUDA_SUCCESS) return res;
  *granularity = static_cast<size_t>(call.s.config.granularity);
  return CUDA_SUCCESS;
}

CUresult cuMemAddressReserve(CUdeviceptr* ptr, size_t size, size_t alignment, CUdeviceptr /*addr*/,
                             unsigned long long flags) {
  Call call("cuMemAddressReserve", Family::driver);
  if (call.refused()) return call.driver_refusal();
  const uint64_t granularity = call.s.config.granularity;
  if (ptr == nullptr || size == 0 || !multiple_of(size, granularity) || flags != 0 ||
      (alignment & (alignment - 1)) != 0) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  // Over-reserve, then trim to an aligned range, as the driver aligns
  // reservations to at least the granularity.
  const size_t align = std::max<size_t>(alignment, static_cast<size_t>(granularity));
  void* raw = mmap(nullptr, size + align, PROT_NONE, kMapFlags, -1, 0);
  if (raw == MAP_FAILED) return CUDA_ERROR_OUT_OF_MEMORY;
  const auto start = reinterpret_cast<uintptr_t>(raw);
  const uintptr_t base = (start + align - 1) / align * align;
  if (base > start) munmap(raw, base - start);
  if (const uintptr_t tail = start + size + align - (base + size); tail != 0) {
    munmap(reinterpret_cast<void*>(base + size), tail);
  }
  call.s.reservations.emplace(base, size);
  *ptr = static_cast<CUdeviceptr>(base);
  return CUDA_SUCCESS;
}

CUresult cuMemAddressFree(CUdeviceptr ptr, size_t size) {
  Call call("cuMemAddressFree", Family::driver);
  if (call.refused()) return call.driver_refusal();
  const auto it = call.s.reservations.find(static_cast<uintptr_t>(ptr));
  if (it == call.s.reservations.end() || it->second != size) return CUDA_ERROR_INVALID_VALUE;
  // Stricter than CUDA, to catch leaks: the range must be unmapped first.
  if (overlaps_mapping(call.s, it->first, it->second)) return CUDA_ERROR_INVALID_VALUE;
  munmap(reinterpret_cast<void*>(it->first), it->second);
  call.s.reservations.erase(it);
  return CUDA_SUCCESS;
}

CUresult cuMemCreate(CUmemGenericAllocationHandle* handle, size_t size, const CUmemAllocationProp* prop,
                     unsigned long long flags) {
  Call call("cuMemCreate", Family::driver);
  if (call.refused()) return call.driver_refusal();
  if (handle == nullptr || size == 0 || flags != 0) return CUDA_ERROR_INVALID_VALUE;
  if (const CUresult res = check_prop(call.s, prop); res != CUDA_SUCCESS) return res;
  if (!multiple_of(size, call.s.config.granularity)) return CUDA_ERROR_INVALID_VALUE;
  const int device = prop->location.id;
  if (!call.s.fits(device, size)) return CUDA_ERROR_OUT_OF_MEMORY;
  const auto types = static_cast<unsigned>(prop->requestedHandleTypes);
  if ((types & ~static_cast<unsigned>(CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)) != 0) return CUDA_ERROR_NOT_SUPPORTED;
  // Without Config::ipc the request is accepted and export refused, so
  // that programs asking for it by default run in one process.
  int fd = -1;
  if (types != 0 && call.s.config.ipc && (fd = create_memfd(kVmmMemfd, device, size)) < 0)
    return CUDA_ERROR_OUT_OF_MEMORY;
  const CUmemGenericAllocationHandle created = call.s.next_handle++;
  call.s.physical.emplace(created, Physical{device, size, false, false, fd});
  call.s.charge(device, size);
  *handle = created;
  return CUDA_SUCCESS;
}

CUresult cuMemRelease(CUmemGenericAllocationHandle handle) {
  Call call("cuMemRelease", Family::driver);
  if (call.refused()) return call.driver_refusal();
  const auto it = call.s.physical.find(handle);
  if (it == call.s.physical.end() || it->second.released) return CUDA_ERROR_INVALID_VALUE;
  // Memory still mapped is freed when it is unmapped.
  if (it->second.mapped) {
    it->second.released = true;
  } else {
    free_physical(call.s, it);
  }
  return CUDA_SUCCESS;
}

CUresult cuMemMap(CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle handle,
                  unsigned long long flags) {
  Call call("cuMemMap", Family::driver);
  if (call.refused()) return call.driver_refusal();
  auto& s = call.s;
  const auto it = s.physical.find(handle);
  if (it == s.physical.end() || it->second.released || flags != 0 || offset != 0) return CUDA_ERROR_INVALID_VALUE;
  if (it->second.mapped) return CUDA_ERROR_NOT_SUPPORTED;  // aliases: see nullgpu.hpp
  const auto begin = static_cast<uintptr_t>(ptr);
  if (size != it->second.bytes || !multiple_of(begin, s.config.granularity) || !inside_reservation(s, begin, size) ||
      overlaps_mapping(s, begin, size)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  // Its pages (fresh ones, or the memfd's), inaccessible until cuMemSetAccess.
  const int fd = it->second.fd;
  const int how = fd >= 0 ? MAP_SHARED | MAP_FIXED : kMapFlags | MAP_FIXED;
  if (mmap(reinterpret_cast<void*>(begin), size, PROT_NONE, how, fd, 0) == MAP_FAILED) {
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  unipool::nullgpu::detail::advise_device_memory(s, reinterpret_cast<void*>(begin), size);
  it->second.mapped = true;
  s.mappings.emplace(begin, Mapping{size, handle});
  return CUDA_SUCCESS;
}

CUresult cuMemSetAccess(CUdeviceptr ptr, size_t size, const CUmemAccessDesc* desc, size_t count) {
  Call call("cuMemSetAccess", Family::driver);
  if (call.refused()) return call.driver_refusal();
  auto& s = call.s;
  const auto begin = static_cast<uintptr_t>(ptr);
  if (desc == nullptr || count == 0 || size == 0 || !covered_by_mappings(s, begin, size)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  // The host stands in for every device: it gets the widest access granted.
  int protection = PROT_NONE;
  for (size_t i = 0; i < count; ++i) {
    if (desc[i].location.type != CU_MEM_LOCATION_TYPE_DEVICE) return CUDA_ERROR_INVALID_VALUE;
    if (!s.valid_device(desc[i].location.id)) return CUDA_ERROR_INVALID_DEVICE;
    if (desc[i].flags == CU_MEM_ACCESS_FLAGS_PROT_READWRITE) protection |= PROT_READ | PROT_WRITE;
    if (desc[i].flags == CU_MEM_ACCESS_FLAGS_PROT_READ) protection |= PROT_READ;
  }
  if (mprotect(reinterpret_cast<void*>(begin), size, protection) != 0) return CUDA_ERROR_INVALID_VALUE;
  return CUDA_SUCCESS;
}

CUresult cuMemUnmap(CUdeviceptr ptr, size_t size) {
  Call call("cuMemUnmap", Family::driver);
  if (call.refused()) return call.driver_refusal();
  auto& s = call.s;
  const auto begin = static_cast<uintptr_t>(ptr);
  // Whole mappings only, as in CUDA.
  if (size == 0 || !tiled_by_mappings(s, begin, size)) return CUDA_ERROR_INVALID_VALUE;
  // Drop the pages; the range is reserved and inaccessible again.
  if (mmap(reinterpret_cast<void*>(begin), size, PROT_NONE, kMapFlags | MAP_FIXED, -1, 0) == MAP_FAILED) {
    return CUDA_ERROR_UNKNOWN;
  }
  for (auto it = s.mappings.find(begin); it != s.mappings.end() && it->first < begin + size;) {
    const auto physical = s.physical.find(it->second.handle);
    physical->second.mapped = false;
    if (physical->second.released) free_physical(s, physical);
    it = s.mappings.erase(it);
  }
  return CUDA_SUCCESS;
}

}  // extern "C"
