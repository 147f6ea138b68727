// unipool transfer: a registration cache attached to unipool's pools, through
// their hooks (HostPool::set_region_hooks, DevicePool::set_segment_hooks) or,
// for a KV block pool's fixed arena, at once.
#include <exception>
#include <mutex>

#include "unipool/device_pool.hpp"
#include "unipool/host_pool.hpp"
#include "unipool/kv_block_pool.hpp"
#include "unipool/registration_cache.hpp"

namespace unipool {

// A hook must not throw into the pool that called it.
void RegistrationCache::hook_failed(const char* what) noexcept {
  try {
    std::unique_lock lock(mutex_);
    ++hook_failures_;
    last_hook_failure_ = what;
  } catch (...) {
  }
}

Status RegistrationCache::attach(HostPool& pool) {
  auto guarded = [this](auto&& step) {
    return [this, step](const HostRegionEvent& e) {
      try {
        step(e);
      } catch (const std::exception& ex) {
        hook_failed(ex.what());
      } catch (...) {
        hook_failed("unknown exception");
      }
    };
  };
  const Status s =
      pool.set_region_hooks({guarded([this](const HostRegionEvent& e) { on_map(e.address, e.bytes, -1); }),
                             guarded([this](const HostRegionEvent& e) { before_unmap(e.address, e.bytes); })});
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
  auto guarded = [this](auto&& step) {
    return [this, step](const DeviceSegmentEvent& e) {
      try {
        step(e);
      } catch (const std::exception& ex) {
        hook_failed(ex.what());
      } catch (...) {
        hook_failed("unknown exception");
      }
    };
  };
  pool.set_segment_hooks({guarded([this](const DeviceSegmentEvent& e) { on_map(e.address, e.bytes, e.device); }),
                          guarded([this](const DeviceSegmentEvent& e) { before_unmap(e.address, e.bytes); })});
  std::unique_lock lock(mutex_);
  device_pools_.push_back(&pool);
  return Status::ok;
}

Status RegistrationCache::attach(KVBlockPool& pool) {
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
