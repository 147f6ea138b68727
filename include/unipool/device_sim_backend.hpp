// unipool: "sim", a simulated device for CPU-only machines and tests.
//
// Its memory is address space reserved PROT_NONE, so host code that touches
// "device" memory faults at once; with `accessible` mapped memory is readable
// and writable (and loses its contents when unmapped), so copies and sleep's
// offload can be checked byte for byte. It counts every call, checks every call's
// arguments as strictly as the driver would (unknown pointer, wrong size,
// double map, unmap of something not mapped), fails on purpose when a test
// asks, and its fences are ManualFences the test completes.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <mutex>
#include <vector>

#include "unipool/device_backend.hpp"
#include "unipool/fence.hpp"

namespace unipool {

struct SimBackendOptions {
  int devices = 1;
  uint64_t capacity = uint64_t{16} << 30;     // bytes per device
  uint64_t granularity = uint64_t{2} << 20;   // of map/unmap
  bool expandable = true;                     // supports reserve/map (and sleep)
  bool accessible = false;                    // mapped memory is host-readable
};

class SimBackend final : public DeviceBackend {
 public:
  enum Call : uint8_t {
    memory_info_call,
    allocate_call,
    deallocate_call,
    reserve_call,
    map_call,
    unmap_call,
    unreserve_call,
    synchronize_call,
    copy_call,
    kCallKinds
  };

  explicit SimBackend(SimBackendOptions options = {});
  ~SimBackend() override;

  const char* name() const noexcept override { return "sim"; }
  int device_count() override { return options_.devices; }
  BackendStatus memory_info(int device, uint64_t* free_bytes, uint64_t* total_bytes) override;
  BackendStatus allocate(int device, uint64_t bytes, void** out) override;
  BackendStatus deallocate(int device, void* ptr, uint64_t bytes) override;
  bool supports_expandable() const noexcept override { return options_.expandable; }
  uint64_t granularity(int device) override;
  BackendStatus reserve(int device, uint64_t bytes, void** base) override;
  BackendStatus map(int device, void* base, uint64_t offset, uint64_t bytes) override;
  BackendStatus unmap(int device, void* base, uint64_t offset, uint64_t bytes) override;
  BackendStatus unreserve(int device, void* base, uint64_t bytes) override;
  // Plain segments can be unmapped and mapped again in place, as on cuda_vmm.
  bool supports_sleep() const noexcept override { return options_.expandable; }
  BackendStatus synchronize(int device) override;
  // memcpy with `accessible`; an error otherwise (the memory cannot be read).
  BackendStatus copy(int device, const DeviceCopy* copies, size_t count, CopyDirection direction) override;
  FenceSource& fences() override { return fences_; }
  ManualFenceSource& manual_fences() noexcept { return fences_; }

  // ---- for tests ----
  // Makes the next `count` calls of `kind` fail with `code` (out_of_memory,
  // or error: a driver failure that is not about memory).
  void fail_next(Call kind, uint64_t count = 1, BackendStatus::Code code = BackendStatus::out_of_memory);
  // Makes the call that is the `index`-th from now (0 = the next one) among
  // the memory calls (everything but memory_info) fail; that one call only.
  void fail_call_at(uint64_t index, BackendStatus::Code code = BackendStatus::out_of_memory);
  void clear_faults();
  uint64_t calls(Call kind) const { return calls_[kind].load(std::memory_order_relaxed); }
  uint64_t memory_calls() const;          // every call but memory_info (synchronize and copy included)
  uint64_t used_bytes(int device) const;  // allocated + mapped
  uint64_t live_segments(int device) const;  // allocations + reservations
  uint64_t mapped_bytes(int device) const;   // mapped inside reservations
  uint64_t reserved_ranges(int device) const;  // expandable reservations

 private:
  // A plain segment is a reservation made mapped whole by allocate().
  struct Reservation {
    uint64_t bytes = 0;
    bool plain = false;
    std::map<uint64_t, uint64_t> mapped;  // offset -> bytes
  };
  struct Device {
    uint64_t used = 0;
    uint64_t mapped = 0;  // inside expandable reservations
    std::map<uintptr_t, Reservation> reservations;
  };

  BackendStatus enter(Call kind, int device);  // counts, injects faults; mutex held
  Device* device_or_null(int device);
  BackendStatus map_locked(Device& d, uintptr_t base, Reservation& r, uint64_t offset, uint64_t bytes);
  BackendStatus unmap_locked(Device& d, uintptr_t base, Reservation& r, uint64_t offset, uint64_t bytes);
  void protect(uintptr_t address, uint64_t bytes, bool on) const;

  SimBackendOptions options_;
  mutable std::mutex mutex_;
  std::vector<Device> devices_;
  std::atomic<uint64_t> calls_[kCallKinds] = {};
  uint64_t fail_next_[kCallKinds] = {};
  BackendStatus::Code fail_next_code_[kCallKinds] = {};
  uint64_t memory_call_count_ = 0;
  uint64_t fail_at_ = ~uint64_t{0};  // absolute memory-call number to fail
  BackendStatus::Code fail_at_code_ = BackendStatus::out_of_memory;
  ManualFenceSource fences_;
};

}  // namespace unipool
