// unipool: the memory of unipool's pools registered with a transfer engine
// (NIXL, UCX, ibverbs): each chunk once, when the pool maps it, in regions of
// at most max_region_bytes (NIXL over UCX slows past 4 GiB per region), and
// deregistered before the pool unmaps it; any address found in its region
// in O(1). The engine's calls come from a Registrar, so unipool needs no
// transfer library: with NIXL's C++ API, register_region fills an
// nixl_reg_dlist_t with the one region and calls nixlAgent::registerMem.
//
//   RegistrationCache cache({register_fn, deregister_fn});
//   cache.attach(host_pool);        // pinned pieces, now and as they come
//   cache.attach(device_pool);      // segments and expandable granule runs
//   cache.attach(kv_pool);          // the arena, in regions of whole blocks
//   auto where = cache.locate(ptr); // the region's handle and the offset in it
//
// Thread safety: every member is thread-safe. The registrar is called with
// the cache's lock held, and from the pools' hooks: on the thread that maps
// or unmaps, for the host pool with its locks held. It must not call back
// into the cache or a pool.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <shared_mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "unipool/status.hpp"

namespace unipool {

class HostPool;
class DevicePool;
class KVPool;

struct Registrar {
  // Registers [address, address + bytes) of `device` (-1: host memory) and
  // returns the engine's handle for it; throws on failure.
  std::function<uint64_t(void* address, uint64_t bytes, int device)> register_region;
  std::function<void(uint64_t handle)> deregister_region;
};

struct RegisteredRegion {
  void* address = nullptr;
  uint64_t bytes = 0;
  int device = -1;
  uint64_t handle = 0;
};

// Where an address lies: its region, and the offset in it.
struct RegionLocation {
  RegisteredRegion region;
  uint64_t offset = 0;
};

class RegistrationCache {
 public:
  static constexpr uint64_t kDefaultMaxRegion = uint64_t{4} << 30;

  // Throws std::invalid_argument for a registrar without both functions or
  // a max_region_bytes of 0.
  explicit RegistrationCache(Registrar registrar, uint64_t max_region_bytes = kDefaultMaxRegion);
  // Detaches from every pool attached, then deregisters everything.
  ~RegistrationCache();
  RegistrationCache(const RegistrationCache&) = delete;
  RegistrationCache& operator=(const RegistrationCache&) = delete;

  // Registers a chunk just mapped, in regions of at most max_region_bytes
  // (or piece_bytes, which must not pass it). All or nothing: when the
  // registrar throws, the regions of the chunk made so far are deregistered
  // and the exception goes on. std::invalid_argument for an empty chunk or
  // one that overlaps a registered chunk.
  void on_map(void* address, uint64_t bytes, int device, uint64_t piece_bytes = 0);
  // Deregisters every chunk [address, address + bytes) touches; what of them
  // lies outside the range stays mapped and is registered again, as a chunk
  // of its own (an expandable segment gives back granule runs of its own).
  void before_unmap(void* address, uint64_t bytes);

  std::optional<RegionLocation> locate(const void* address) const;
  std::vector<RegisteredRegion> regions() const;  // by address

  // Registers what the pool has mapped now and follows it through its hooks
  // until this cache is destroyed or detach_all() is called. A pool has one
  // set of hooks: attaching replaces any it had (another cache's included),
  // and the pool must outlive this cache or be detached first. A
  // registration that fails inside a hook cannot fail the pool's call: it
  // is counted (hook_failures) with its message (last_hook_failure), and
  // that chunk stays unregistered.
  // HostPool: Status::bad_argument for a pool that pins nothing.
  Status attach(HostPool& pool);
  // DevicePool: attach it before it maps anything and before other threads
  // use it (its hooks say what is mapped from then on);
  // Status::bad_argument when it has mapped memory.
  Status attach(DevicePool& pool);
  // A KVPool (KVBlockPool, SharedKVBlockPool): the arena at once, in regions of whole blocks; no hooks
  // (the arena lives as long as the pool, which must outlive this cache or
  // be detached first).
  Status attach(KVPool& pool);
  void detach_all();

  uint64_t registrations() const;
  uint64_t deregistrations() const;
  uint64_t live_regions() const { return registrations() - deregistrations(); }
  uint64_t hook_failures() const;
  std::string last_hook_failure() const;
  uint64_t max_region_bytes() const noexcept { return max_region_; }

 private:
  struct Chunk {
    uintptr_t end = 0;
    int device = -1;
    std::vector<size_t> regions;  // indices into regions_
  };

  // What the pools' hooks hold: the cache while it lives. The destructor
  // clears `cache` under the lock, so it waits for hook calls in flight (a
  // device pool calls its hooks with no lock of its own held) and later
  // ones find nothing.
  struct HookGate {
    std::shared_mutex mutex;
    RegistrationCache* cache = nullptr;
  };
  template <typename Event>
  std::function<void(const Event&)> hook(void (*step)(RegistrationCache&, const Event&));

  void map_locked(uintptr_t address, uint64_t bytes, int device, uint64_t piece);
  void drop_regions_locked(const std::vector<size_t>& regions);
  void drop_chunk_locked(std::map<uintptr_t, Chunk>::iterator it);
  size_t add_region_locked(uintptr_t address, uint64_t bytes, int device, uint64_t handle);
  void hook_failed(const char* what) noexcept;

  Registrar registrar_;
  const uint64_t max_region_;
  std::shared_ptr<HookGate> gate_;
  mutable std::shared_mutex mutex_;
  std::vector<std::optional<RegisteredRegion>> regions_;
  std::vector<size_t> spare_;                                   // free slots of regions_
  std::map<uintptr_t, Chunk> chunks_;                           // by start
  std::unordered_map<uint64_t, std::vector<size_t>> granules_;  // 2 MiB granule -> regions touching it
  uint64_t registrations_ = 0, deregistrations_ = 0, hook_failures_ = 0;
  std::string last_hook_failure_;
  std::vector<HostPool*> host_pools_;
  std::vector<DevicePool*> device_pools_;
};

}  // namespace unipool
