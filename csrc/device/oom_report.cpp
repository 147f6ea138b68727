// unipool device pool: the out-of-memory report (and the report of a backend
// that failed for another reason). It reads like PyTorch's
// "CUDA out of memory. Tried to allocate ..." and states what a person needs
// to act: requested, allocated, reserved, device free, the largest free block
// (fragmentation) and the limit, if one was hit.
#include <algorithm>
#include <cstdio>
#include <string>

#include "device/pool_impl.hpp"

namespace unipool {

namespace {

std::string human(uint64_t bytes) {
  static const char* const units[] = {"bytes", "KiB", "MiB", "GiB", "TiB", "PiB"};
  double v = static_cast<double>(bytes);
  int u = 0;
  while (v >= 1024.0 && u < 5) {
    v /= 1024.0;
    ++u;
  }
  char buf[48];
  if (u == 0) {
    std::snprintf(buf, sizeof buf, "%llu bytes", static_cast<unsigned long long>(bytes));
  } else {
    std::snprintf(buf, sizeof buf, "%.2f %s", v, units[u]);
  }
  return buf;
}

}  // namespace

// Lock held. Inside reserved memory only: for an expandable arena, the
// longest mapped stretch of a free range.
uint64_t DevicePool::Impl::largest_free_block() const {
  uint64_t largest = 0;
  for (const auto& a : arenas) {
    if (a == nullptr) continue;
    if (!a->expandable) {
      largest = std::max(largest, a->ranges.largest_free());
      continue;
    }
    const uint64_t g = a->granule;
    a->ranges.for_each_range([&](const RangeInfo& r) {
      if (r.used) return;
      uint64_t stretch = 0;
      for (uint64_t at = r.offset, end = r.offset + r.size; at < end;) {
        const uint64_t next = std::min(end, (at / g + 1) * g);
        stretch = a->is_mapped(at / g) ? stretch + (next - at) : 0;
        largest = std::max(largest, stretch);
        at = next;
      }
    });
  }
  return largest;
}

void DevicePool::Impl::out_of_memory(const Request& r, const device::GrowthFailure& why) {
  DeviceOomInfo info;
  info.device = device;
  info.stream = r.stream;
  info.requested = r.bytes;
  uint64_t free_bytes = 0, total_bytes = device_total;
  const BackendStatus mem = backend->memory_info(device, &free_bytes, &total_bytes);
  std::shared_ptr<const DeviceOomObserver> observer;
  {
    std::lock_guard lock(mutex);
    ++stats.num_ooms;
    info.allocated = static_cast<uint64_t>(stats.allocated_bytes[0].current);
    info.reserved = static_cast<uint64_t>(stats.reserved_bytes[0].current);
    info.largest_free = largest_free_block();
    info.limit = effective_limit();
    observer = oom_observer;
    trace(DeviceTraceAction::oom, mem.is_ok() ? free_bytes : 0, r.size, r.bytes, r.stream);
  }
  info.device_free = mem.is_ok() ? free_bytes : 0;
  info.device_total = total_bytes;

  const std::string dev = std::to_string(device);
  std::string m = "unipool: device out of memory. Tried to allocate " + human(r.bytes) + " (" +
                  std::to_string(r.bytes) + " bytes) on device " + dev + ". Device " + dev + " (" +
                  backend->name() + " backend) has a total capacity of " + human(total_bytes) + " of which " +
                  (mem.is_ok() ? human(info.device_free) : std::string("an unknown amount")) +
                  " is free. Of the memory reserved by unipool, " + human(info.allocated) + " is allocated and " +
                  human(info.reserved) + " is reserved (" + human(info.reserved - std::min(info.reserved, info.allocated)) +
                  " reserved but unallocated; the largest free block is " + human(info.largest_free) + ").";
  if (why.over_limit && info.limit != 0) {
    m += " The request exceeds the pool's limit of " + human(info.limit) + " (memory_fraction / memory_limit).";
  } else if (why.over_limit) {
    m += " The device's reserved address range is exhausted.";
  } else {
    m += std::string(" The backend said: ") + (why.status.message ? why.status.message : "") + ".";
  }
  if (info.reserved > info.allocated && info.reserved - info.allocated > info.reserved / 4 && !use_expandable) {
    m += " If reserved but unallocated memory is large, try expandable_segments=true to avoid fragmentation.";
  }
  info.message = m;
  if (observer && *observer) {
    try {
      (*observer)(info);
    } catch (...) {
      // An observer cannot turn the OOM into something else.
    }
  }
  throw OutOfMemoryError(m);
}

// Not an OOM: nothing is released, no retry, num_ooms and the observer stay
// untouched; the caller learns which backend failed and what it said.
void DevicePool::Impl::backend_error(const Request& r, const device::GrowthFailure& why) {
  const std::string dev = std::to_string(device);
  throw DevicePoolError(Status::backend_error,
                        "unipool: the " + std::string(backend->name()) + " backend failed while allocating " +
                            human(r.bytes) + " (" + std::to_string(r.bytes) + " bytes) on device " + dev + ": " +
                            (why.status.message ? why.status.message : "") + " (error " +
                            std::to_string(why.status.native) + "). Nothing was allocated.");
}

}  // namespace unipool
