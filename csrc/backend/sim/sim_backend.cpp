// unipool backend "sim": a simulated device whose memory is PROT_NONE address
// space. Plain C++ and POSIX; no CUDA anywhere.
#include "core/align.hpp"
#include "unipool/device_sim_backend.hpp"

#include <sys/mman.h>

#include <cstring>
#include <iterator>
#include <stdexcept>
#include <string>

namespace unipool {

namespace {

BackendStatus fail(BackendStatus::Code code, const char* message) {
  return BackendStatus{code, code == BackendStatus::out_of_memory ? 2 : 1, message};
}

// Address space that faults on any touch: what "device memory" is to the host.
void* reserve_address_space(uint64_t bytes) {
  void* p = ::mmap(nullptr, bytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  return p == MAP_FAILED ? nullptr : p;
}

}  // namespace

SimBackend::SimBackend(SimBackendOptions options) : options_(options) {
  if (options_.devices < 1 || options_.devices > 64) {
    throw std::invalid_argument("unipool::SimBackend: devices must be in 1..64, got " +
                                std::to_string(options_.devices));
  }
  if (!is_power_of_two(options_.granularity) || options_.granularity % 4096 != 0) {
    throw std::invalid_argument("unipool::SimBackend: granularity must be a power of two >= 4096");
  }
  // Not one granule would fit: every allocation would fail while the device
  // reads as free.
  if (options_.granularity > options_.capacity) {
    throw std::invalid_argument("unipool::SimBackend: granularity " + std::to_string(options_.granularity) +
                                " is larger than the capacity " + std::to_string(options_.capacity));
  }
  devices_.resize(static_cast<size_t>(options_.devices));
}

SimBackend::~SimBackend() {
  // Whatever a leaky caller left behind goes back to the OS.
  for (Device& d : devices_) {
    for (const auto& [base, r] : d.reservations) ::munmap(reinterpret_cast<void*>(base), r.bytes);
  }
}

SimBackend::Device* SimBackend::device_or_null(int device) {
  if (device < 0 || device >= options_.devices) return nullptr;
  return &devices_[static_cast<size_t>(device)];
}

BackendStatus SimBackend::enter(Call kind, int device) {
  calls_[kind].fetch_add(1, std::memory_order_relaxed);
  if (device_or_null(device) == nullptr) return fail(BackendStatus::error, "sim: invalid device ordinal");
  if (kind == memory_info_call) return BackendStatus::success();
  const uint64_t number = memory_call_count_++;
  if (number == fail_at_) {
    fail_at_ = ~uint64_t{0};
    return fail(fail_at_code_, "sim: injected failure");
  }
  if (fail_next_[kind] > 0) {
    --fail_next_[kind];
    return fail(fail_next_code_[kind], "sim: injected failure");
  }
  return BackendStatus::success();
}

BackendStatus SimBackend::memory_info(int device, uint64_t* free_bytes, uint64_t* total_bytes) {
  std::lock_guard lock(mutex_);
  if (BackendStatus s = enter(memory_info_call, device); !s.is_ok()) return s;
  const Device& d = *device_or_null(device);
  if (free_bytes != nullptr) *free_bytes = options_.capacity - d.used;
  if (total_bytes != nullptr) *total_bytes = options_.capacity;
  return BackendStatus::success();
}

BackendStatus SimBackend::allocate(int device, uint64_t bytes, void** out) {
  std::lock_guard lock(mutex_);
  if (BackendStatus s = enter(allocate_call, device); !s.is_ok()) return s;
  Device& d = *device_or_null(device);
  if (bytes == 0 || out == nullptr) return fail(BackendStatus::error, "sim: invalid argument");
  if (bytes > options_.capacity - d.used) return fail(BackendStatus::out_of_memory, "sim: out of memory");
  void* p = reserve_address_space(bytes);
  if (p == nullptr) return fail(BackendStatus::out_of_memory, "sim: mmap failed");
  const auto base = reinterpret_cast<uintptr_t>(p);
  Reservation& r = d.reservations[base];
  r.bytes = bytes;
  r.plain = true;
  r.mapped.emplace(0, bytes);
  d.used += bytes;
  protect(base, bytes, true);
  *out = p;
  return BackendStatus::success();
}

BackendStatus SimBackend::deallocate(int device, void* ptr, uint64_t bytes) {
  std::lock_guard lock(mutex_);
  if (BackendStatus s = enter(deallocate_call, device); !s.is_ok()) return s;
  Device& d = *device_or_null(device);
  const auto it = d.reservations.find(reinterpret_cast<uintptr_t>(ptr));
  if (it == d.reservations.end() || !it->second.plain || it->second.bytes != bytes) {
    return fail(BackendStatus::error, "sim: deallocate of an unknown pointer or with a wrong size");
  }
  // A segment sleep left (partly) unmapped holds only what is still mapped.
  for (const auto& [offset, n] : it->second.mapped) d.used -= n;
  ::munmap(ptr, bytes);
  d.reservations.erase(it);
  return BackendStatus::success();
}

uint64_t SimBackend::granularity(int /*device*/) { return options_.granularity; }

BackendStatus SimBackend::reserve(int device, uint64_t bytes, void** base) {
  std::lock_guard lock(mutex_);
  if (BackendStatus s = enter(reserve_call, device); !s.is_ok()) return s;
  if (!options_.expandable) return fail(BackendStatus::error, "sim: expandable segments disabled");
  if (bytes == 0 || bytes % options_.granularity != 0 || base == nullptr) {
    return fail(BackendStatus::error, "sim: reserve size is not a multiple of the granularity");
  }
  void* p = reserve_address_space(bytes);
  if (p == nullptr) return fail(BackendStatus::out_of_memory, "sim: mmap failed");
  device_or_null(device)->reservations[reinterpret_cast<uintptr_t>(p)].bytes = bytes;
  *base = p;
  return BackendStatus::success();
}

BackendStatus SimBackend::map(int device, void* base, uint64_t offset, uint64_t bytes) {
  std::lock_guard lock(mutex_);
  if (BackendStatus s = enter(map_call, device); !s.is_ok()) return s;
  Device& d = *device_or_null(device);
  const auto it = d.reservations.find(reinterpret_cast<uintptr_t>(base));
  if (it == d.reservations.end() || (it->second.plain && !options_.expandable)) {
    return fail(BackendStatus::error, "sim: map outside a reservation or not granule aligned");
  }
  return map_locked(d, it->first, it->second, offset, bytes);
}

BackendStatus SimBackend::map_locked(Device& d, uintptr_t base, Reservation& r, uint64_t offset, uint64_t bytes) {
  const uint64_t g = options_.granularity;
  // A plain segment's size need not be a granule multiple: its tail is whole.
  const bool to_end = r.plain && offset + bytes == r.bytes;
  if (bytes == 0 || offset % g != 0 || (bytes % g != 0 && !to_end) || offset + bytes > r.bytes) {
    return fail(BackendStatus::error, "sim: map outside a reservation or not granule aligned");
  }
  auto& mapped = r.mapped;
  const auto next = mapped.lower_bound(offset);
  const bool overlaps_next = next != mapped.end() && next->first < offset + bytes;
  const bool overlaps_prev = next != mapped.begin() && std::prev(next)->first + std::prev(next)->second > offset;
  if (overlaps_next || overlaps_prev) return fail(BackendStatus::error, "sim: map over mapped memory");
  if (bytes > options_.capacity - d.used) return fail(BackendStatus::out_of_memory, "sim: out of memory");
  mapped.emplace(offset, bytes);
  d.used += bytes;
  if (!r.plain) d.mapped += bytes;
  protect(base + offset, bytes, true);
  return BackendStatus::success();
}

BackendStatus SimBackend::unmap(int device, void* base, uint64_t offset, uint64_t bytes) {
  std::lock_guard lock(mutex_);
  if (BackendStatus s = enter(unmap_call, device); !s.is_ok()) return s;
  Device& d = *device_or_null(device);
  const auto it = d.reservations.find(reinterpret_cast<uintptr_t>(base));
  if (it == d.reservations.end() || (it->second.plain && !options_.expandable)) {
    return fail(BackendStatus::error, "sim: unmap of an unknown reservation");
  }
  return unmap_locked(d, it->first, it->second, offset, bytes);
}

BackendStatus SimBackend::unmap_locked(Device& d, uintptr_t base, Reservation& r, uint64_t offset, uint64_t bytes) {
  // [offset, offset + bytes) must be exactly covered by mapped pieces; pieces
  // may be split (a map of 3 granules unmapped one at a time is fine).
  auto& mapped = r.mapped;
  auto first = mapped.upper_bound(offset);
  if (bytes == 0 || first == mapped.begin()) return fail(BackendStatus::error, "sim: unmap of unmapped memory");
  --first;
  uint64_t covered = offset;
  for (auto p = first; p != mapped.end() && p->first < offset + bytes; ++p) {
    if (p->first > covered || p->first + p->second <= covered) {
      return fail(BackendStatus::error, "sim: unmap of unmapped memory");
    }
    covered = p->first + p->second;
  }
  if (covered < offset + bytes) return fail(BackendStatus::error, "sim: unmap of unmapped memory");
  // Cut the pieces: keep what lies outside [offset, offset + bytes).
  std::map<uint64_t, uint64_t> keep;
  for (auto p = first; p != mapped.end() && p->first < offset + bytes;) {
    const uint64_t lo = p->first, hi = p->first + p->second;
    if (lo < offset) keep.emplace(lo, offset - lo);
    if (hi > offset + bytes) keep.emplace(offset + bytes, hi - offset - bytes);
    p = mapped.erase(p);
  }
  mapped.insert(keep.begin(), keep.end());
  d.used -= bytes;
  if (!r.plain) d.mapped -= bytes;
  protect(base + offset, bytes, false);
  return BackendStatus::success();
}

// With `accessible`, mapped memory is read-write and unmapped memory faults
// again and has lost its contents, as device memory has after cuMemUnmap.
void SimBackend::protect(uintptr_t address, uint64_t bytes, bool on) const {
  if (!options_.accessible) return;
  void* p = reinterpret_cast<void*>(address);
  if (!on) ::madvise(p, bytes, MADV_DONTNEED);
  ::mprotect(p, bytes, on ? PROT_READ | PROT_WRITE : PROT_NONE);
}

BackendStatus SimBackend::unreserve(int device, void* base, uint64_t bytes) {
  std::lock_guard lock(mutex_);
  if (BackendStatus s = enter(unreserve_call, device); !s.is_ok()) return s;
  Device& d = *device_or_null(device);
  const auto it = d.reservations.find(reinterpret_cast<uintptr_t>(base));
  if (it == d.reservations.end() || it->second.plain || it->second.bytes != bytes) {
    return fail(BackendStatus::error, "sim: unreserve of an unknown reservation or with a wrong size");
  }
  if (!it->second.mapped.empty()) return fail(BackendStatus::error, "sim: unreserve while memory is mapped");
  ::munmap(base, bytes);
  d.reservations.erase(it);
  return BackendStatus::success();
}

BackendStatus SimBackend::synchronize(int device) {
  std::lock_guard lock(mutex_);
  return enter(synchronize_call, device);
}

BackendStatus SimBackend::copy(int device, const DeviceCopy* copies, size_t count, CopyDirection /*direction*/) {
  std::lock_guard lock(mutex_);
  if (BackendStatus s = enter(copy_call, device); !s.is_ok()) return s;
  if (!options_.accessible) return fail(BackendStatus::error, "sim: copy needs SimBackendOptions::accessible");
  if (count != 0 && copies == nullptr) return fail(BackendStatus::error, "sim: copy of a null batch");
  for (size_t i = 0; i < count; ++i) std::memcpy(copies[i].dst, copies[i].src, copies[i].bytes);
  return BackendStatus::success();
}

void SimBackend::fail_next(Call kind, uint64_t count, BackendStatus::Code code) {
  std::lock_guard lock(mutex_);
  fail_next_[kind] = count;
  fail_next_code_[kind] = code;
}

void SimBackend::fail_call_at(uint64_t index, BackendStatus::Code code) {
  std::lock_guard lock(mutex_);
  fail_at_ = memory_call_count_ + index;
  fail_at_code_ = code;
}

void SimBackend::clear_faults() {
  std::lock_guard lock(mutex_);
  for (uint64_t& n : fail_next_) n = 0;
  fail_at_ = ~uint64_t{0};
}

uint64_t SimBackend::memory_calls() const {
  std::lock_guard lock(mutex_);
  return memory_call_count_;
}

uint64_t SimBackend::used_bytes(int device) const {
  std::lock_guard lock(mutex_);
  return devices_.at(static_cast<size_t>(device)).used;
}

uint64_t SimBackend::live_segments(int device) const {
  std::lock_guard lock(mutex_);
  return devices_.at(static_cast<size_t>(device)).reservations.size();
}

uint64_t SimBackend::mapped_bytes(int device) const {
  std::lock_guard lock(mutex_);
  return devices_.at(static_cast<size_t>(device)).mapped;
}

uint64_t SimBackend::reserved_ranges(int device) const {
  std::lock_guard lock(mutex_);
  uint64_t n = 0;
  for (const auto& [base, r] : devices_.at(static_cast<size_t>(device)).reservations) n += r.plain ? 0 : 1;
  return n;
}

}  // namespace unipool
