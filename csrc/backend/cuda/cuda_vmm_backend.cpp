#include "backend/cuda/cuda_vmm_backend.hpp"

#include <cuda_runtime_api.h>

#include <algorithm>

#include "backend/cuda/cuda_backends.hpp"
#include "backend/cuda/cuda_status.hpp"
#include "backend/cuda/device_guard.hpp"
#include "core/align.hpp"

namespace unipool::backend::cuda {

namespace {

constexpr uint64_t kMinGranularity = uint64_t{2} << 20;

CUmemAllocationProp device_memory(int device) {
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = device;
  return prop;
}

CUdeviceptr address(uintptr_t base, const auto& r, uint64_t granule) {
  return static_cast<CUdeviceptr>(base) + granule * r.granularity;
}

}  // namespace

CudaVmmBackend::CudaVmmBackend() : api_(DriverApi::resolve()) {
  if (!api_.available()) {
    unsupported_ = intern("unipool cuda_vmm: " + api_.unavailable);
    return;
  }
  const int count = device_count();
  if (count == 0) {
    unsupported_ = "unipool cuda_vmm: no CUDA device";
    return;
  }
  for (int ordinal = 0; ordinal < count; ++ordinal) {
    CUdevice device = 0;
    int supported = 0;
    if (api_.device_get(&device, ordinal) != CUDA_SUCCESS ||
        api_.device_get_attribute(&supported, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, device) !=
            CUDA_SUCCESS) {
      unsupported_ = intern("unipool cuda_vmm: the driver did not say whether device " + std::to_string(ordinal) +
                            " supports virtual memory management");
      return;
    }
    if (supported == 0) {
      unsupported_ = intern("unipool cuda_vmm: device " + std::to_string(ordinal) +
                            " does not support virtual memory management");
      return;
    }
  }
  granularity_.assign(static_cast<size_t>(count), 0);
  shareable_.assign(static_cast<size_t>(count), false);
  for (int ordinal = 0; ordinal < count; ++ordinal) {
    CUdevice device = 0;
    int posix = 0;
    shareable_[static_cast<size_t>(ordinal)] =
        api_.device_get(&device, ordinal) == CUDA_SUCCESS &&
        api_.device_get_attribute(&posix, CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED, device) ==
            CUDA_SUCCESS &&
        posix != 0;
  }
  expandable_ = true;
}

CudaVmmBackend::~CudaVmmBackend() {
  std::lock_guard lock(mutex_);
  for (const auto& [base, imported] : imported_) {
    DeviceGuard guard(imported.device);
    (void)close_imported_locked(base, imported);
  }
  for (auto it = reservations_.begin(); it != reservations_.end();) {
    DeviceGuard guard(it->second.device);
    (void)unmap_all_locked(it->second, it->first);
    const auto next = std::next(it);
    (void)unreserve_locked(it);
    it = next;
  }
  retry_orphans_locked();
}

BackendStatus CudaVmmBackend::driver(CUresult result) const noexcept {
  return driver_status(result, api_.get_error_string);
}

BackendStatus CudaVmmBackend::usable() const noexcept {
  return expandable_ ? BackendStatus::success() : usage_error(unsupported_);
}

uint64_t CudaVmmBackend::granularity(int device) {
  if (!expandable_) return DeviceBackend::granularity(device);
  std::lock_guard lock(mutex_);
  return granularity_locked(device);
}

uint64_t CudaVmmBackend::granularity_locked(int device) {
  if (!expandable_ || device < 0 || static_cast<size_t>(device) >= granularity_.size()) return 0;
  uint64_t& cached = granularity_[static_cast<size_t>(device)];
  if (cached != 0) return cached;
  const CUmemAllocationProp prop = device_memory(device);
  size_t minimum = 0;
  size_t recommended = 0;
  if (api_.get_allocation_granularity(&minimum, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM) != CUDA_SUCCESS ||
      api_.get_allocation_granularity(&recommended, &prop, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED) != CUDA_SUCCESS ||
      minimum == 0) {
    return 0;
  }
  const uint64_t wanted = std::max<uint64_t>(recommended, kMinGranularity);
  cached = round_up(wanted, minimum);
  return cached;
}

CudaVmmBackend::Reservations::iterator CudaVmmBackend::find_locked(int device, void* base, bool plain,
                                                                   BackendStatus* why) {
  const auto it = reservations_.find(reinterpret_cast<uintptr_t>(base));
  if (it == reservations_.end()) {
    *why = usage_error("unipool cuda_vmm: not the base of a range of this backend");
  } else if (it->second.device != device) {
    *why = usage_error("unipool cuda_vmm: the range belongs to another device");
  } else if (it->second.plain != plain) {
    *why = usage_error(plain ? "unipool cuda_vmm: not a plain segment (use unmap / unreserve)"
                             : "unipool cuda_vmm: a plain segment (use deallocate)");
  } else {
    return it;
  }
  return reservations_.end();
}

BackendStatus CudaVmmBackend::granule_range(const Reservation& r, uint64_t offset, uint64_t bytes, uint64_t* first,
                                            uint64_t* count) noexcept {
  const uint64_t g = r.granularity;
  if (bytes == 0 || offset % g != 0 || bytes % g != 0 || offset > r.bytes || bytes > r.bytes - offset) {
    return usage_error("unipool cuda_vmm: offset and size must be granularity multiples inside the reservation");
  }
  *first = offset / g;
  *count = bytes / g;
  return BackendStatus::success();
}

// --- plain segments ----------------------------------------------------------

BackendStatus CudaVmmBackend::allocate(int device, uint64_t bytes, void** out) {
  if (out == nullptr || bytes == 0) return usage_error("unipool cuda_vmm: allocate needs an output and a size > 0");
  *out = nullptr;
  if (!expandable_) return runtime_allocate(device, bytes, out);
  std::lock_guard lock(mutex_);
  retry_orphans_locked();
  const uint64_t g = granularity_locked(device);
  if (g == 0) return usage_error("unipool cuda_vmm: no allocation granularity for this device");
  if (bytes > UINT64_MAX - g) return usage_error("unipool cuda_vmm: size too large");
  void* base = nullptr;
  DeviceGuard guard(device);
  if (!guard.ok()) return guard.status();
  if (BackendStatus status = reserve_locked(device, round_up(bytes, g), true, &base); !status.is_ok()) {
    return status;
  }
  const auto it = reservations_.find(reinterpret_cast<uintptr_t>(base));
  const BackendStatus mapped = map_locked(it->second, it->first, 0, it->second.granules.size());
  if (!mapped.is_ok()) {
    (void)unreserve_locked(it);
    return mapped;
  }
  *out = base;
  return mapped;
}

BackendStatus CudaVmmBackend::deallocate(int device, void* ptr, uint64_t bytes) {
  if (!expandable_) return runtime_deallocate(device, ptr);
  std::lock_guard lock(mutex_);
  retry_orphans_locked();
  BackendStatus why;
  const auto it = find_locked(device, ptr, true, &why);
  if (it == reservations_.end()) return why;
  Reservation& r = it->second;
  if (bytes == 0 || bytes > r.bytes || r.bytes - bytes >= r.granularity) {
    return usage_error("unipool cuda_vmm: deallocate with a size other than the one allocated");
  }
  DeviceGuard guard(device);
  if (!guard.ok()) return guard.status();
  if (BackendStatus status = unmap_all_locked(r, it->first); !status.is_ok()) return status;
  return unreserve_locked(it);
}

BackendStatus CudaVmmBackend::runtime_allocate(int device, uint64_t bytes, void** out) {
  DeviceGuard guard(device);
  if (!guard.ok()) return guard.status();
  void* ptr = nullptr;
  const BackendStatus status = runtime_status(cudaMalloc(&ptr, static_cast<size_t>(bytes)));
  if (status.is_ok()) *out = ptr;
  return status;
}

BackendStatus CudaVmmBackend::runtime_deallocate(int device, void* ptr) {
  if (ptr == nullptr) return usage_error("unipool cuda_vmm: deallocate of a null pointer");
  DeviceGuard guard(device);
  if (!guard.ok()) return guard.status();
  return runtime_status(cudaFree(ptr));
}

// --- expandable segments -----------------------------------------------------

BackendStatus CudaVmmBackend::reserve(int device, uint64_t bytes, void** base) {
  if (base == nullptr) return usage_error("unipool cuda_vmm: reserve needs an output");
  *base = nullptr;
  if (BackendStatus status = usable(); !status.is_ok()) return status;
  std::lock_guard lock(mutex_);
  retry_orphans_locked();
  DeviceGuard guard(device);
  if (!guard.ok()) return guard.status();
  return reserve_locked(device, bytes, false, base);
}

BackendStatus CudaVmmBackend::map(int device, void* base, uint64_t offset, uint64_t bytes) {
  return on_granules(device, base, offset, bytes, &CudaVmmBackend::map_locked);
}

BackendStatus CudaVmmBackend::unmap(int device, void* base, uint64_t offset, uint64_t bytes) {
  return on_granules(device, base, offset, bytes, &CudaVmmBackend::unmap_locked);
}

// map() and unmap() alike: find the reservation and the granule run of
// [offset, offset + bytes), then run `op` on it under the lock with `device`
// current.
BackendStatus CudaVmmBackend::on_granules(int device, void* base, uint64_t offset, uint64_t bytes,
                                          GranuleOp op) {
  if (BackendStatus status = usable(); !status.is_ok()) return status;
  std::lock_guard lock(mutex_);
  retry_orphans_locked();
  BackendStatus why;
  // Plain segments too: sleep unmaps them and maps them again in place.
  auto it = find_locked(device, base, false, &why);
  if (it == reservations_.end()) it = find_locked(device, base, true, &why);
  if (it == reservations_.end()) return why;
  // A plain segment's caller knows its size, not the granularity it was
  // rounded up to: its tail granule is whole.
  if (it->second.plain && offset < it->second.bytes && bytes > it->second.bytes - offset - it->second.granularity &&
      bytes <= it->second.bytes - offset) {
    bytes = it->second.bytes - offset;
  }
  uint64_t first = 0;
  uint64_t count = 0;
  if (BackendStatus status = granule_range(it->second, offset, bytes, &first, &count); !status.is_ok()) return status;
  DeviceGuard guard(device);
  if (!guard.ok()) return guard.status();
  return (this->*op)(it->second, it->first, first, count);
}

BackendStatus CudaVmmBackend::unreserve(int device, void* base, uint64_t bytes) {
  if (BackendStatus status = usable(); !status.is_ok()) return status;
  std::lock_guard lock(mutex_);
  retry_orphans_locked();
  BackendStatus why;
  const auto it = find_locked(device, base, false, &why);
  if (it == reservations_.end()) return why;
  if (it->second.bytes != bytes) return usage_error("unipool cuda_vmm: unreserve with a size other than reserved");
  DeviceGuard guard(device);
  if (!guard.ok()) return guard.status();
  return unreserve_locked(it);
}

// --- the driver calls --------------------------------------------------------

BackendStatus CudaVmmBackend::reserve_locked(int device, uint64_t bytes, bool plain, void** base) {
  const uint64_t g = granularity_locked(device);
  if (g == 0) return usage_error("unipool cuda_vmm: no allocation granularity for this device");
  if (bytes == 0 || bytes % g != 0) {
    return usage_error("unipool cuda_vmm: reserve size must be a non-zero multiple of granularity()");
  }
  CUdeviceptr ptr = 0;
  if (BackendStatus status = driver(api_.address_reserve(&ptr, static_cast<size_t>(bytes), static_cast<size_t>(g), 0, 0));
      !status.is_ok()) {
    return status;
  }
  reservations_.emplace(static_cast<uintptr_t>(ptr),
                        Reservation{device, bytes, g, plain, std::vector<Granule>(bytes / g), 0});
  *base = reinterpret_cast<void*>(ptr);
  return BackendStatus::success();
}

BackendStatus CudaVmmBackend::map_locked(Reservation& r, uintptr_t base, uint64_t first, uint64_t count) {
  for (uint64_t i = first; i < first + count; ++i) {
    if (r.granules[i].mapped) return usage_error("unipool cuda_vmm: the range is already (partly) mapped");
  }
  const auto size = static_cast<size_t>(r.granularity);
  BackendStatus status;
  uint64_t done = 0;
  // One handle per granule, so that any granule can be unmapped later.
  for (; done < count; ++done) {
    CUmemGenericAllocationHandle handle = 0;
    status = create_granule(r.device, r.granularity, &handle);
    if (!status.is_ok()) break;
    status = driver(api_.map(address(base, r, first + done), size, 0, handle, 0));
    if (!status.is_ok()) {
      release_handle_locked(handle);
      break;
    }
    r.granules[first + done] = Granule{handle, true, 0};
    ++r.mapped;
  }
  if (status.is_ok()) {
    status = allow_access_locked(r.device, address(base, r, first), size * count);
    if (status.is_ok()) return status;
  }
  // All or nothing: give back what this call mapped.
  if (done != 0) (void)unmap_locked(r, base, first, done);
  return status;
}

BackendStatus CudaVmmBackend::unmap_locked(Reservation& r, uintptr_t base, uint64_t first, uint64_t count) {
  for (uint64_t i = first; i < first + count; ++i) {
    if (!r.granules[i].mapped) return usage_error("unipool cuda_vmm: the range is not (entirely) mapped");
  }
  // One call for the whole range (CUDA accepts a range made of whole
  // mappings), so a failure leaves it entirely mapped.
  if (BackendStatus status = driver(api_.unmap(address(base, r, first), static_cast<size_t>(r.granularity * count)));
      !status.is_ok()) {
    return status;
  }
  for (uint64_t i = first; i < first + count; ++i) {
    unexport_locked(r.granules[i]);
    release_handle_locked(r.granules[i].handle);
    r.granules[i] = Granule{};
    --r.mapped;
  }
  return BackendStatus::success();
}

BackendStatus CudaVmmBackend::unmap_all_locked(Reservation& r, uintptr_t base) {
  // Runs of mapped granules: all of them for a healthy plain segment.
  for (uint64_t i = 0; i < r.granules.size();) {
    if (!r.granules[i].mapped) {
      ++i;
      continue;
    }
    uint64_t end = i;
    while (end < r.granules.size() && r.granules[end].mapped) ++end;
    if (BackendStatus status = unmap_locked(r, base, i, end - i); !status.is_ok()) return status;
    i = end;
  }
  return BackendStatus::success();
}

BackendStatus CudaVmmBackend::unreserve_locked(Reservations::iterator it) {
  if (it->second.mapped != 0) return usage_error("unipool cuda_vmm: unreserve of a range still mapped; unmap it first");
  if (BackendStatus status = driver(api_.address_free(static_cast<CUdeviceptr>(it->first),
                                                      static_cast<size_t>(it->second.bytes)));
      !status.is_ok()) {
    return status;
  }
  reservations_.erase(it);
  return BackendStatus::success();
}

BackendStatus CudaVmmBackend::allow_access_locked(int device, CUdeviceptr at, uint64_t bytes) {
  CUmemAccessDesc access{};
  access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  access.location.id = device;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  return driver(api_.set_access(at, static_cast<size_t>(bytes), &access, 1));
}

// Exportable (a POSIX descriptor handle) where the device has it. A driver
// that claims it and then refuses it (a container without the device
// nodes it needs) is taken at its word once: that device's memory is then
// not shareable, as with PyTorch's fallback.
BackendStatus CudaVmmBackend::create_granule(int device, uint64_t bytes, CUmemGenericAllocationHandle* handle) {
  CUmemAllocationProp prop = device_memory(device);
  const auto d = static_cast<size_t>(device);
  if (shareable_[d]) {
    prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    const CUresult res = api_.create(handle, static_cast<size_t>(bytes), &prop, 0);
    if (res != CUDA_ERROR_NOT_SUPPORTED && res != CUDA_ERROR_NOT_PERMITTED) {
      return driver(res);
    }
    shareable_[d] = false;
    prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_NONE;
  }
  return driver(api_.create(handle, static_cast<size_t>(bytes), &prop, 0));
}

// An unmapped handle's memory returns to the device on release. If that
// fails the range is still unmapped (the caller's view is right), so the
// handle is kept and released by a later call rather than lost.
void CudaVmmBackend::release_handle_locked(CUmemGenericAllocationHandle handle) {
  if (api_.release(handle) != CUDA_SUCCESS) orphans_.push_back(handle);
}

void CudaVmmBackend::retry_orphans_locked() {
  std::erase_if(orphans_, [this](CUmemGenericAllocationHandle h) { return api_.release(h) == CUDA_SUCCESS; });
}

}  // namespace unipool::backend::cuda

namespace unipool::backend {

std::unique_ptr<DeviceBackend> make_cuda_vmm_backend() { return std::make_unique<cuda::CudaVmmBackend>(); }

}  // namespace unipool::backend
