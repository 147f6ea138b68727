// unipool transfer: a registration cache attached to unipool's pools, through
// their hooks (HostPool::set_region_hooks, DevicePool::set_segment_hooks) or,
// for a KV block pool's fixed arena, at once.
#include <exception>
#include <functional>
#include <mutex>
#include <shared_mutex>

#include "unipool/device_pool.hpp"
#include "unipool/host_pool.hpp"
#include "unipool/kv_block_pool.hpp"
#include "unipool/registration_cache.hpp"

namespace unipool {

// A hook holds the gate, not the cache, and must not throw into the pool
// that called it: what a step throws is counted by the cache.
template <typename Event>
std::function<void(const Event&)> RegistrationCache::hook(void (*step)(RegistrationCache&, const Event&)) {
  return [gate = gate_, step](const Event& e) {
    std::shared_lock lock(gate->mutex);
    if (gate->cache == nullptr) return;
    try {
      step(*gate->cache, e);
    } catch (const std::exception& ex) {
      gate->cache->hook_failed(ex.what());
    } catch (...) {
      gate->cache->hook_failed("unknown exception");
    }
  };
}

void RegistrationCache::hook_failed(const char* what) noexcept {
  try {
    std::unique_lock lock(mutex_);
    ++hook_failures_;
    last_hook_failure_ = what;
  } catch (...) {
  }
}

Status RegistrationCache::attach(HostPool& pool) {
  const Status s = pool.set_region_hooks(
      {hook<HostRegionEvent>([](RegistrationCache& c, const HostRegionEvent& e) { c.on_map(e.address, e.bytes, -1); }),
       hook<HostRegionEvent>(
           [](RegistrationCache& c, const HostRegionEvent& e) { c.before_unmap(e.address, e.bytes); })});
  if (s == Status::ok) {
    std::unique_lock lock(mutex_);
    host_pools_.push_back(&pool);
  }
  return s;
}

Status RegistrationCache::attach(DevicePool& pool) {
  if (pool.stats().reserved_bytes[static_cast<size_t>(DeviceStatPool::all)].current != 0) {
    return Status::bad_argument;  // what it mapped before would never be told
  }
  pool.set_segment_hooks({hook<DeviceSegmentEvent>([](RegistrationCache& c, const DeviceSegmentEvent& e) {
                            c.on_map(e.address, e.bytes, e.device);
                          }),
                          hook<DeviceSegmentEvent>([](RegistrationCache& c, const DeviceSegmentEvent& e) {
                            c.before_unmap(e.address, e.bytes);
                          })});
  std::unique_lock lock(mutex_);
  device_pools_.push_back(&pool);
  return Status::ok;
}

Status RegistrationCache::attach(KVPool& pool) {
  const uint64_t blocks_per_region = max_region_ / pool.stride();
  if (blocks_per_region == 0) return Status::bad_argument;  // a block larger than a region
  on_map(pool.base(), pool.arena_bytes(), -1, blocks_per_region * pool.stride());
  return Status::ok;
}

void RegistrationCache::detach_all() {
  std::vector<HostPool*> hosts;
  std::vector<DevicePool*> devices;
  {
    std::unique_lock lock(mutex_);
    hosts.swap(host_pools_);
    devices.swap(device_pools_);
  }
  for (HostPool* p : hosts) p->set_region_hooks({});
  for (DevicePool* p : devices) p->set_segment_hooks({});
}

}  // namespace unipool
