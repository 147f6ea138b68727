// unipool: the device pool, stream-ordered GPU blocks carved by the range
// allocator out of segments a DeviceBackend provides.
//
//   auto pools = unipool::DevicePools::create("backend=sim,sim_capacity=8GiB");
//   void* p = pools->allocate(4 << 20, /*device=*/0, stream);
//   pools->record_stream(p, other_stream);   // p is also used on other_stream
//   pools->deallocate(p);                    // reusable on `stream` at once,
//                                            // elsewhere after other_stream's fence
//
// Policy (docs/device_pool.md): sizes are rounded to 512 bytes; requests under
// 1 MiB come from a small pool of 2 MiB segments, the rest from a large pool
// (20 MiB segments for 1-10 MiB requests, larger ones rounded to 2 MiB), or,
// with expandable segments, from one reserved virtual range per stream and
// pool kind that is mapped in granules as it grows. Free ranges belong to the
// stream that owns their segment: reusable there at once, by another stream
// only after a fence shows the owner is past them.
//
// Thread safety: every method may be called from any thread. One mutex per
// device; backend calls (growth, release, fence waits) and hooks run outside it.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "unipool/device_backend.hpp"
#include "unipool/device_checkpoint.hpp"
#include "unipool/device_config.hpp"
#include "unipool/device_error.hpp"
#include "unipool/device_sleep.hpp"
#include "unipool/device_snapshot.hpp"
#include "unipool/device_stats.hpp"
#include "unipool/device_tags.hpp"
#include "unipool/device_trace.hpp"
#include "unipool/fence.hpp"

namespace unipool {

class HostPool;

// A segment, or a run of granules of an expandable segment, that was just
// mapped or is about to be unmapped: what ncclCommRegister needs.
struct DeviceSegmentEvent {
  int device = 0;
  void* address = nullptr;
  uint64_t bytes = 0;
  bool expandable = false;
};

// Each mapped range is reported once by on_map (after the backend mapped it,
// before any block of it is handed out) and once by before_unmap (before the
// backend unmaps it). Hooks run outside the pool's lock, on the thread that
// grew or released the pool; they must not call back into the same pool.
struct DeviceSegmentHooks {
  std::function<void(const DeviceSegmentEvent&)> on_map;
  std::function<void(const DeviceSegmentEvent&)> before_unmap;
};

// What an OOM observer is told before OutOfMemoryError is thrown.
struct DeviceOomInfo {
  int device = 0;
  StreamHandle stream = 0;
  uint64_t requested = 0;     // bytes asked for
  uint64_t allocated = 0;     // allocated_bytes.all.current
  uint64_t reserved = 0;      // reserved_bytes.all.current
  uint64_t device_free = 0;   // as the backend reports it
  uint64_t device_total = 0;
  uint64_t largest_free = 0;  // largest free block inside reserved memory
  uint64_t limit = 0;         // the pool's byte limit, 0 if none
  std::string message;        // OutOfMemoryError::what()
};
using DeviceOomObserver = std::function<void(const DeviceOomInfo&)>;

class DevicePool;

// Sleep and wake over several pools (a CUDA allocator's device pools and its
// graph pools), with DevicePools' rule for tags asleep in some pools only.
DeviceSleepResult sleep_pools(const std::vector<DevicePool*>& pools, const DeviceSleepRequest& request,
                              HostPool* host = nullptr);
DeviceSleepResult wake_pools(const std::vector<DevicePool*>& pools, const std::vector<std::string>& tags = {});

// The pool of one device.
class DevicePool {
 public:
  DevicePool(std::shared_ptr<DeviceBackend> backend, int device, const DevicePoolConfig& config = {});
  ~DevicePool();
  DevicePool(const DevicePool&) = delete;
  DevicePool& operator=(const DevicePool&) = delete;

  // A block of the calling thread's current tag (device_tags.hpp). Throws
  // DevicePoolError (zero_size, too_large; asleep: the tag sleeps) or
  // OutOfMemoryError.
  void* allocate(uint64_t bytes, StreamHandle stream = 0);
  void* allocate(uint64_t bytes, StreamHandle stream, DeviceTag tag);
  // Throws DevicePoolError(not_live) for a double free, an interior or a
  // foreign pointer; nothing changes then.
  void deallocate(void* ptr);
  // Status::not_live instead of an exception (ptr not from this pool).
  Status try_deallocate(void* ptr) noexcept;
  // `ptr` is also used on `stream`: when it is freed, reuse waits for a fence
  // recorded on `stream` at that moment.
  void record_stream(void* ptr, StreamHandle stream);
  // True if ptr is a live block of this pool (its start, not an interior byte).
  bool owns(const void* ptr) const;
  // True if ptr lies anywhere in device memory this pool holds (live or not).
  bool in_pool_memory(const void* ptr) const;
  // The size the block of `ptr` was requested with; 0 if not a live block.
  uint64_t requested_size(const void* ptr) const;

  // CUDA IPC (what torch.multiprocessing does with CUDA tensors). The handle
  // of a live block, for another process of this host: its bytes go there,
  // and the block starts `offset` bytes into what ipc_open maps. Throws
  // DevicePoolError: not_live for a pointer that is not a live block's
  // start; backend_error if the backend cannot share it (say why).
  DeviceBackend::IpcHandle ipc_export(const void* ptr);
  // Maps another process's block (the bytes of its ipc_export) once per
  // handle in this pool, for as long as any returned pointer lives; the
  // block starts at the sender's offset into it. Throws DevicePoolError
  // (backend_error) if it cannot be opened.
  std::shared_ptr<void> ipc_open(const std::string& handle);

  // Gives every cached free segment and fully free trailing granules back to
  // the backend. Waits for the fences of the owning streams (synchronous, like
  // torch.cuda.empty_cache()).
  void empty_cache();

  DeviceStats stats() const;
  void reset_peak_stats();         // peaks := currents
  void reset_accumulated_stats();  // allocated/freed and the num_* counters := 0
  DeviceSnapshot snapshot() const;
  std::string snapshot_json() const;

  // Limits on reserved bytes (see DevicePoolConfig). A fraction in (0, 1],
  // a limit in bytes; 0 removes that limit. A positive fraction that rounds
  // to 0 bytes of the device is refused (bad_argument), not taken as none.
  void set_memory_fraction(double fraction);
  void set_memory_limit(uint64_t bytes);
  uint64_t memory_limit() const;  // the effective limit, 0 if none

  void set_segment_hooks(DeviceSegmentHooks hooks);
  void set_oom_observer(DeviceOomObserver observer);
  // Every alloc, free and segment event from now on (device_trace.hpp); an
  // empty function stops them. Off (the default), the hot path pays one
  // branch on the unset function.
  void set_trace_observer(DeviceTraceObserver observer);

  // The allocated blocks of every segment (blocks freed but still waiting for
  // fences count as free). O(blocks + segments).
  DeviceCheckpoint checkpoint() const;
  // Puts the pool back in the state of `cp`, a checkpoint of this pool: every
  // live block that is not in it is freed (as deallocate() would), every
  // block of it that is not live is allocated again at its very address.
  // Memory a needed block overlaps that is still waiting for stream fences
  // (a pending free, or a freed block used on other streams) is waited for,
  // as empty_cache() waits. Throws DevicePoolError(bad_argument) for a
  // checkpoint of another pool and (not_live) when memory a block of the
  // checkpoint lay in was given back since (empty_cache, a release
  // threshold); the pool is unchanged then.
  DeviceRestoreResult restore(const DeviceCheckpoint& cp);

  // Sleep and wake (device_sleep.hpp). Offloaded contents go to `host`
  // (HostPool::default_pool() when null). A tag in both lists, or sleep on a
  // backend that cannot keep addresses, is Status::bad_argument; sleep of a
  // tag already asleep, or wake of one awake, is Status::asleep. `tags`
  // empty: every tag that is not awake. Failures: see device_sleep.hpp.
  DeviceSleepResult sleep(const DeviceSleepRequest& request, HostPool* host = nullptr);
  DeviceSleepResult wake(const std::vector<std::string>& tags = {});
  // Every tag that has memory, a block or a sleep in this pool.
  std::vector<DeviceTagStats> tag_stats() const;

  // Checks every invariant (range allocators, block table, free lists and
  // pending frees, stats against a recount). *why says what failed.
  bool validate(std::string* why = nullptr) const;

  int device() const noexcept;
  bool expandable() const noexcept;
  DeviceBackend& backend() noexcept;
  const DevicePoolConfig& config() const noexcept;

  struct Impl;

 private:
  friend DeviceSleepResult sleep_pools(const std::vector<DevicePool*>&, const DeviceSleepRequest&, HostPool*);
  friend DeviceSleepResult wake_pools(const std::vector<DevicePool*>&, const std::vector<std::string>&);
  std::unique_ptr<Impl> impl_;
};

// One pool per device of a backend, built from a config string.
class DevicePools {
 public:
  explicit DevicePools(const DevicePoolConfig& config);
  // With a backend the caller made (a test's SimBackend, a runtime's own).
  DevicePools(std::shared_ptr<DeviceBackend> backend, const DevicePoolConfig& config);
  // DevicePoolConfig::parse(config) then the constructor.
  static std::unique_ptr<DevicePools> create(std::string_view config);

  int device_count() const noexcept { return static_cast<int>(pools_.size()); }
  DevicePool& pool(int device);  // throws DevicePoolError(bad_argument) for a bad index

  void* allocate(uint64_t bytes, int device, StreamHandle stream = 0) {
    return pool(device).allocate(bytes, stream);
  }
  // Finds the owning device (the one given first, if any).
  void deallocate(void* ptr, int device_hint = -1);
  void record_stream(void* ptr, StreamHandle stream, int device_hint = -1);
  void empty_cache();  // every device
  // Every device's pool (see DevicePool). A tag already asleep on some devices
  // only is put to sleep on the others (and woken likewise): a failed call
  // can be retried as a whole.
  DeviceSleepResult sleep(const DeviceSleepRequest& request, HostPool* host = nullptr);
  DeviceSleepResult wake(const std::vector<std::string>& tags = {});
  // {"segments": [every device's], "device_traces": [...]}
  std::string snapshot_json() const;
  bool validate(std::string* why = nullptr) const;

  DeviceBackend& backend() noexcept { return *backend_; }
  const DevicePoolConfig& config() const noexcept { return config_; }

 private:
  DevicePool& owner_of(const void* ptr, int device_hint);

  DevicePoolConfig config_;
  std::shared_ptr<DeviceBackend> backend_;
  std::vector<std::unique_ptr<DevicePool>> pools_;
};

// The backend a config names ("sim" is always there; the CUDA ones when the
// library was built with CUDA). Throws DevicePoolError(bad_argument).
std::shared_ptr<DeviceBackend> make_device_backend(const DevicePoolConfig& config);

}  // namespace unipool
