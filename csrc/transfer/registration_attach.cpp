// unipool transfer: a registration cache attached to unipool's pools, through
// their hooks (HostPool::set_region_hooks, DevicePool::set_segment_hooks) or,
// for a KV block pool's fixed arena, at once.
#include <exception>
#include <functional>
#include <mutex>

#include "unipool/device_pool.hpp"
#include "unipool/host_pool.hpp"
#include "unipool/kv_block_pool.hpp"
#include "unipool/registration_cache.hpp"

namespace unipool {
namespace {

// A hook must not throw into the pool that called it: what a step throws
// goes to `fail`.
template <typename Event, typename Step, typename Fail>
std::function<void(const Event&)> guarded(Step step, Fail fail) {
  return [step, fail](const Event& e) {
    try {
      step(e);
    } catch (const std::exception& ex) {
      fail(ex.what());
    } catch (...) {
      fail("unknown exception");
    }
  };
}

}  // namespace

void RegistrationCache::hook_failed(const char* what) noexcept {
  try {
    std::unique_lock lock(mutex_);
    ++hook_failures_;
    last_hook_failure_ = what;
  } catch (...) {
  }
}

Status RegistrationCache::attach(HostPool& pool) {
  auto fail = [this](const char* what) { hook_failed(what); };
  const Status s = pool.set_region_hooks(
      {guarded<HostRegionEvent>([this](const HostRegionEvent& e) { on_map(e.address, e.bytes, -1); }, fail),
       guarded<HostRegionEvent>([this](const HostRegionEvent& e) { before_unmap(e.address, e.bytes); }, fail)});
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
  auto fail = [this](const char* what) { hook_failed(what); };
  pool.set_segment_hooks(
      {guarded<DeviceSegmentEvent>([this](const DeviceSegmentEvent& e) { on_map(e.address, e.bytes, e.device); }, fail),
       guarded<DeviceSegmentEvent>([this](const DeviceSegmentEvent& e) { before_unmap(e.address, e.bytes); }, fail)});
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
