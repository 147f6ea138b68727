// unipool device pool: construction and the public DevicePool methods, thin
// wrappers over DevicePool::Impl (pool_*.cpp).
#include <atomic>
#include <cstdio>
#include <string>

#include "device/pool_impl.hpp"

namespace unipool {

namespace {
std::atomic<uint64_t> g_next_serial{1};

std::string format_fraction(double fraction) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.6g", fraction);
  return text;
}

// A positive fraction whose share of the device truncates to 0 bytes would
// read as "no limit" (0) in effective_limit(): the opposite of what a tiny
// fraction asks for. torch's setMemoryFraction takes any fraction in [0, 1]
// and a limit of 0 bytes there refuses every allocation; here 0 is "no
// limit", so such a fraction is refused instead. `what` names the setting.
void check_fraction_bytes(double fraction, uint64_t device_total, const std::string& what) {
  if (fraction > 0 && fraction * static_cast<double>(device_total) < 1.0) {
    throw DevicePoolError(Status::bad_argument,
                          "unipool: " + what + " " + format_fraction(fraction) + " rounds to 0 bytes of the device's " +
                              std::to_string(device_total) + " bytes, which would mean no limit at all");
  }
}
}  // namespace

DevicePool::Impl::Impl(std::shared_ptr<DeviceBackend> backend_in, int device_in, const DevicePoolConfig& config_in)
    : serial(g_next_serial.fetch_add(1, std::memory_order_relaxed)),
      backend(std::move(backend_in)),
      device(device_in),
      config(config_in) {
  if (!backend) throw DevicePoolError(Status::bad_argument, "unipool: DevicePool needs a backend");
  const int count = backend->device_count();
  if (device < 0 || device >= count) {
    throw DevicePoolError(Status::bad_argument, "unipool: device " + std::to_string(device) + " does not exist (" +
                                                    backend->name() + " has " + std::to_string(count) + ")");
  }
  uint64_t free_bytes = 0;
  const BackendStatus status = backend->memory_info(device, &free_bytes, &device_total);
  if (!status.is_ok()) {
    throw DevicePoolError(Status::bad_argument, std::string("unipool: memory_info of device ") +
                                                    std::to_string(device) + " failed: " + status.message);
  }
  use_expandable = config.expandable_segments < 0 ? backend->supports_expandable() : config.expandable_segments == 1;
  if (use_expandable && !backend->supports_expandable()) {
    throw DevicePoolError(Status::bad_argument, std::string("unipool: expandable_segments=true but backend '") +
                                                    backend->name() + "' has no virtual memory management");
  }
  granule = backend->granularity(device);
  if (granule < device::kBlockAlign || !is_power_of_two(granule)) {
    throw DevicePoolError(Status::bad_argument, "unipool: backend granularity " + std::to_string(granule) +
                                                    " is not a power of two >= 512");
  }
  // Address space only: 1.5x the device, so holes left by long-lived blocks
  // never keep an arena from using the whole device (PyTorch takes 1.125x).
  reserve_bytes = round_up(device_total + device_total / 2, granule);
  check_fraction_bytes(config.memory_fraction, device_total, "UNIPOOL_DEVICE_CONF key 'memory_fraction': value");
  memory_fraction = config.memory_fraction;
  memory_limit = config.memory_limit;
}

DevicePool::Impl::~Impl() { release_all(); }

DevicePool::DevicePool(std::shared_ptr<DeviceBackend> backend, int device, const DevicePoolConfig& config)
    : impl_(std::make_unique<Impl>(std::move(backend), device, config)) {}

DevicePool::~DevicePool() = default;

void* DevicePool::allocate(uint64_t bytes, StreamHandle stream) {
  return impl_->allocate(bytes, stream, current_device_tag());
}
void* DevicePool::allocate(uint64_t bytes, StreamHandle stream, DeviceTag tag) {
  if (!device_tag_made(tag)) {
    throw DevicePoolError(Status::bad_argument,
                          "unipool: device tag " + std::to_string(tag) + " was never made by device_tag()");
  }
  return impl_->allocate(bytes, stream, tag);
}

void DevicePool::deallocate(void* ptr) {
  std::string why;
  const Status s = impl_->deallocate(ptr, &why);
  if (s != Status::ok) throw DevicePoolError(s, why);
}

Status DevicePool::try_deallocate(void* ptr) noexcept {
  try {
    return impl_->deallocate(ptr, nullptr);
  } catch (...) {  // only std::bad_alloc could get here
    return Status::out_of_space;
  }
}

void DevicePool::record_stream(void* ptr, StreamHandle stream) {
  std::string why;
  const Status s = impl_->record_stream(ptr, stream, &why);
  if (s != Status::ok) throw DevicePoolError(s, why);
}

bool DevicePool::owns(const void* ptr) const {
  std::lock_guard lock(impl_->mutex);
  return impl_->live.find(reinterpret_cast<uint64_t>(ptr)) != device::kNoIndex;
}

bool DevicePool::in_pool_memory(const void* ptr) const {
  std::lock_guard lock(impl_->mutex);
  for (const auto& a : impl_->arenas) {
    if (a != nullptr && a->contains(reinterpret_cast<uint64_t>(ptr))) return true;
  }
  return false;
}

uint64_t DevicePool::requested_size(const void* ptr) const {
  std::lock_guard lock(impl_->mutex);
  const uint32_t id = impl_->live.find(reinterpret_cast<uint64_t>(ptr));
  return id == device::kNoIndex ? 0 : impl_->blocks[id].requested;
}

void DevicePool::empty_cache() { impl_->release_cached(device::Sync::all); }

DeviceStats DevicePool::stats() const {
  std::lock_guard lock(impl_->mutex);
  return impl_->stats;
}

void DevicePool::reset_peak_stats() {
  std::lock_guard lock(impl_->mutex);
  DeviceStats& s = impl_->stats;
  for (DeviceStatArray* a : {&s.allocation, &s.segment, &s.active, &s.inactive_split, &s.allocated_bytes,
                             &s.reserved_bytes, &s.active_bytes, &s.inactive_split_bytes, &s.requested_bytes}) {
    for (DeviceStat& stat : *a) stat.peak = stat.current;
  }
}

void DevicePool::reset_accumulated_stats() {
  std::lock_guard lock(impl_->mutex);
  DeviceStats& s = impl_->stats;
  for (DeviceStatArray* a : {&s.allocation, &s.segment, &s.active, &s.inactive_split, &s.allocated_bytes,
                             &s.reserved_bytes, &s.active_bytes, &s.inactive_split_bytes, &s.requested_bytes}) {
    for (DeviceStat& stat : *a) stat.allocated = stat.freed = 0;
  }
  s.num_alloc_retries = s.num_ooms = s.num_device_alloc = s.num_device_free = s.num_sync_all_streams = 0;
}

DeviceSnapshot DevicePool::snapshot() const { return impl_->snapshot(); }

std::string DevicePool::snapshot_json() const { return to_json(snapshot(), 1); }

void DevicePool::set_memory_fraction(double fraction) {
  if (!(fraction >= 0.0 && fraction <= 1.0)) {
    throw DevicePoolError(Status::bad_argument,
                          "unipool: memory fraction " + format_fraction(fraction) + " is not in [0, 1]");
  }
  check_fraction_bytes(fraction, impl_->device_total, "memory fraction");  // device_total never changes
  std::lock_guard lock(impl_->mutex);
  impl_->memory_fraction = fraction;
}

void DevicePool::set_memory_limit(uint64_t bytes) {
  std::lock_guard lock(impl_->mutex);
  impl_->memory_limit = bytes;
}

uint64_t DevicePool::memory_limit() const {
  std::lock_guard lock(impl_->mutex);
  return impl_->effective_limit();
}

void DevicePool::set_segment_hooks(DeviceSegmentHooks hooks) {
  auto h = std::make_shared<const DeviceSegmentHooks>(std::move(hooks));
  std::lock_guard lock(impl_->mutex);
  impl_->hooks = std::move(h);
}

void DevicePool::set_oom_observer(DeviceOomObserver observer) {
  auto o = std::make_shared<const DeviceOomObserver>(std::move(observer));
  std::lock_guard lock(impl_->mutex);
  impl_->oom_observer = std::move(o);
}

DeviceSleepResult DevicePool::sleep(const DeviceSleepRequest& request, HostPool* host) {
  return sleep_pools({this}, request, host);
}
DeviceSleepResult DevicePool::wake(const std::vector<std::string>& tags) { return wake_pools({this}, tags); }
std::vector<DeviceTagStats> DevicePool::tag_stats() const { return impl_->tag_stats(); }

DeviceCheckpoint DevicePool::checkpoint() const { return impl_->checkpoint(); }
DeviceRestoreResult DevicePool::restore(const DeviceCheckpoint& cp) { return impl_->restore(cp); }

bool DevicePool::validate(std::string* why) const { return impl_->validate(why); }
int DevicePool::device() const noexcept { return impl_->device; }
bool DevicePool::expandable() const noexcept { return impl_->use_expandable; }
DeviceBackend& DevicePool::backend() noexcept { return *impl_->backend; }
const DevicePoolConfig& DevicePool::config() const noexcept { return impl_->config; }

}  // namespace unipool
