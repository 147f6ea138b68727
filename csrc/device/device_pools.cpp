// unipool device pool: DevicePools, one DevicePool per device of a backend.
#include <string>

#include "unipool/device_pool.hpp"

namespace unipool {

DevicePools::DevicePools(const DevicePoolConfig& config) : DevicePools(make_device_backend(config), config) {}

DevicePools::DevicePools(std::shared_ptr<DeviceBackend> backend, const DevicePoolConfig& config)
    : config_(config), backend_(std::move(backend)) {
  if (!backend_) throw DevicePoolError(Status::bad_argument, "unipool: DevicePools needs a backend");
  const int count = backend_->device_count();
  if (count <= 0) {
    throw DevicePoolError(Status::bad_argument,
                          std::string("unipool: backend '") + backend_->name() + "' reports no devices");
  }
  for (int d = 0; d < count; ++d) pools_.push_back(std::make_unique<DevicePool>(backend_, d, config_));
}

std::unique_ptr<DevicePools> DevicePools::create(std::string_view config) {
  return std::make_unique<DevicePools>(DevicePoolConfig::parse(config));
}

DevicePool& DevicePools::pool(int device) {
  if (device < 0 || device >= device_count()) {
    throw DevicePoolError(Status::bad_argument, "unipool: device " + std::to_string(device) +
                                                    " does not exist (" + std::to_string(device_count()) +
                                                    " devices)");
  }
  return *pools_[static_cast<size_t>(device)];
}

DevicePool& DevicePools::owner_of(const void* ptr, int device_hint) {
  if (device_hint >= 0 && device_hint < device_count() && pools_[static_cast<size_t>(device_hint)]->owns(ptr)) {
    return *pools_[static_cast<size_t>(device_hint)];
  }
  for (auto& p : pools_) {
    if (p->owns(ptr)) return *p;
  }
  // No device has it live: let the pool whose memory holds it (a double free,
  // an interior pointer), else the hinted or first one, explain why.
  for (auto& p : pools_) {
    if (p->in_pool_memory(ptr)) return *p;
  }
  return device_hint >= 0 && device_hint < device_count() ? *pools_[static_cast<size_t>(device_hint)] : *pools_[0];
}

void DevicePools::deallocate(void* ptr, int device_hint) {
  if (device_hint >= 0 && device_hint < device_count() &&
      pools_[static_cast<size_t>(device_hint)]->try_deallocate(ptr) == Status::ok) {
    return;
  }
  owner_of(ptr, -1).deallocate(ptr);  // throws with the reason if no pool has it
}

void DevicePools::record_stream(void* ptr, StreamHandle stream, int device_hint) {
  owner_of(ptr, device_hint).record_stream(ptr, stream);
}

void DevicePools::empty_cache() {
  for (auto& p : pools_) p->empty_cache();
}

DeviceSleepResult DevicePools::sleep(const DeviceSleepRequest& request, HostPool* host) {
  std::vector<DevicePool*> all;
  for (auto& p : pools_) all.push_back(p.get());
  return sleep_pools(all, request, host);
}

DeviceSleepResult DevicePools::wake(const std::vector<std::string>& tags) {
  std::vector<DevicePool*> all;
  for (auto& p : pools_) all.push_back(p.get());
  return wake_pools(all, tags);
}

std::string DevicePools::snapshot_json() const {
  DeviceSnapshot all;
  for (const auto& p : pools_) {
    DeviceSnapshot s = p->snapshot();
    for (DeviceSegmentInfo& seg : s.segments) all.segments.push_back(std::move(seg));
  }
  return to_json(all, static_cast<int>(pools_.size()));
}

bool DevicePools::validate(std::string* why) const {
  for (const auto& p : pools_) {
    if (!p->validate(why)) return false;
  }
  return true;
}

}  // namespace unipool
