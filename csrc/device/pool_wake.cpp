// unipool device pool: wake (device_sleep.hpp), and what each tag holds.
// Every run a sleep unmapped is mapped again at its address (free memory
// included: a captured CUDA graph may use blocks its pool has freed), then
// the offloaded contents are copied back in one batch and their host blocks
// freed. A failure leaves the tags `partial` with exact books: what was
// mapped stays mapped, and wake can be called again.
#include <chrono>
#include <string>
#include <vector>

#include "device/pool_impl.hpp"

namespace unipool {

using device::TagPhase;

namespace {

uint64_t bit(DeviceTag t) noexcept { return uint64_t{1} << t; }

std::string quoted(DeviceTag t) { return "'" + device_tag_name(t) + "'"; }

const char* phase_name(TagPhase p) {
  switch (p) {
    case TagPhase::awake: return "awake";
    case TagPhase::asleep: return "asleep";
    case TagPhase::partial: return "partial";
  }
  return "?";
}

}  // namespace

// Maps every run sleep unmapped from `a`, in order; the books follow each
// call. Lock not held; `a` is claimed.
uint64_t DevicePool::Impl::map_arena(Arena& a) {
  std::vector<std::pair<uint64_t, uint64_t>> runs;
  {
    std::lock_guard lock(mutex);
    if (a.expandable) {
      runs = a.slept;
    } else if (a.plain_asleep) {
      runs.emplace_back(0, 0);
    }
  }
  uint64_t mapped = 0;
  for (const auto& run : runs) {
    const uint64_t from = run.first * a.granule;
    const uint64_t bytes = a.expandable ? (run.second - run.first) * a.granule : a.size;
    const BackendStatus status = backend->map(device, a.base, from, bytes);
    if (!status.is_ok()) {
      const Status s = status.code == BackendStatus::out_of_memory ? Status::out_of_space : Status::backend_error;
      throw DevicePoolError(s, "unipool: wake of tag " + quoted(a.tag) + " on device " + std::to_string(device) +
                                   ": mapping " + std::to_string(bytes) + " bytes failed: " + status.message +
                                   "; the tag is partly awake: call wake again");
    }
    fire_map(a.base + from, bytes, a.expandable);
    std::lock_guard lock(mutex);
    count_sleep_run(a, run, bytes, true);
    mapped += bytes;
  }
  return mapped;
}

std::vector<DeviceCopy> DevicePool::Impl::staged_copies(uint64_t mask) const {
  std::vector<DeviceCopy> copies;
  for (unsigned t = 0; t < kMaxDeviceTags; ++t) {
    if ((mask >> t & 1) == 0) continue;
    for (const auto& [address, s] : tags[t].staged) {
      copies.push_back(DeviceCopy{reinterpret_cast<void*>(address), s.host, s.bytes});
    }
  }
  return copies;
}

void DevicePool::Impl::free_staged(uint64_t mask) {
  for (unsigned t = 0; t < kMaxDeviceTags; ++t) {
    if ((mask >> t & 1) == 0) continue;
    for (const auto& [address, s] : tags[t].staged) s.pool->deallocate(s.host);
    tags[t].staged.clear();
  }
}

DeviceSleepResult DevicePool::Impl::wake(uint64_t mask) {
  const auto start = std::chrono::steady_clock::now();
  std::unique_lock lock(mutex);
  for (unsigned t = 0; t < kMaxDeviceTags; ++t) {
    if (tags[t].phase == TagPhase::awake) mask &= ~bit(static_cast<DeviceTag>(t));
  }
  DeviceSleepResult result;
  if (mask == 0) return result;
  set_phase(mask, TagPhase::partial);
  const std::vector<Arena*> claimed = claim_arenas(mask, lock);
  lock.unlock();
  try {
    for (Arena* a : claimed) result.released_bytes += map_arena(*a);
    lock.lock();
    const std::vector<DeviceCopy> copies = staged_copies(mask);
    lock.unlock();
    if (!copies.empty()) {
      const BackendStatus copied = backend->copy(device, copies.data(), copies.size(), CopyDirection::to_device);
      if (!copied.is_ok()) {
        throw DevicePoolError(Status::backend_error, "unipool: wake on device " + std::to_string(device) +
                                                         ": the copy back to the device failed: " + copied.message +
                                                         "; the contents stay in host memory: call wake again");
      }
    }
    for (const DeviceCopy& c : copies) result.offloaded_bytes += c.bytes;
  } catch (...) {
    if (!lock.owns_lock()) lock.lock();
    end_transition(claimed);
    throw;  // the tags stay partial
  }
  lock.lock();
  free_staged(mask);
  end_transition(claimed);
  set_phase(mask, TagPhase::awake);
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  for (unsigned t = 0; t < kMaxDeviceTags; ++t) {
    if ((mask >> t & 1) == 0) continue;
    ++tags[t].wakes;
    tags[t].last_wake_seconds = result.seconds;
  }
  return result;
}

DeviceSleepResult wake_pools(const std::vector<DevicePool*>& pools, const std::vector<std::string>& names) {
  const auto start = std::chrono::steady_clock::now();
  auto asleep_somewhere = [&](DeviceTag t) {
    for (DevicePool* p : pools) {
      if (p->impl_->phase(t) != TagPhase::awake) return true;
    }
    return false;
  };
  uint64_t mask = 0;
  for (const std::string& name : names) {
    DeviceTag t = kDefaultDeviceTag;
    if (!find_device_tag(name, &t) || !asleep_somewhere(t)) {
      throw DevicePoolError(Status::asleep, "unipool: wake: tag '" + name + "' is awake");
    }
    mask |= bit(t);
  }
  if (names.empty()) {
    for (unsigned t = 0; t < kMaxDeviceTags; ++t) {
      if (asleep_somewhere(static_cast<DeviceTag>(t))) mask |= bit(static_cast<DeviceTag>(t));
    }
    if (mask == 0) throw DevicePoolError(Status::asleep, "unipool: wake: no tag is asleep");
  }
  DeviceSleepResult total;
  for (DevicePool* p : pools) {
    const DeviceSleepResult r = p->impl_->wake(mask);
    total.offloaded_bytes += r.offloaded_bytes;
    total.released_bytes += r.released_bytes;
  }
  total.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return total;
}

std::vector<DeviceTagStats> DevicePool::Impl::tag_stats() const {
  std::lock_guard lock(mutex);
  std::array<DeviceTagStats, kMaxDeviceTags> by_tag{};
  blocks.for_each([&](uint32_t, const device::Block& b) {
    if (b.freed) return;
    DeviceTagStats& s = by_tag[arenas[b.arena]->tag];
    s.allocated_bytes += b.size;
    ++s.blocks;
  });
  for (const auto& a : arenas) {
    if (a != nullptr) by_tag[a->tag].reserved_bytes += a->reserved_bytes();
  }
  std::vector<DeviceTagStats> out;
  for (unsigned t = 0; t < kMaxDeviceTags; ++t) {
    DeviceTagStats& s = by_tag[t];
    const device::TagState& state = tags[t];
    for (const auto& [address, staged] : state.staged) s.host_bytes += staged.bytes;
    if (s.blocks == 0 && s.reserved_bytes == 0 && state.sleeps == 0 && state.phase == TagPhase::awake) continue;
    s.tag = device_tag_name(static_cast<DeviceTag>(t));
    s.state = phase_name(state.phase);
    s.offloaded_bytes = state.offloaded_bytes;
    s.discarded_bytes = state.discarded_bytes;
    s.released_bytes = state.released_bytes;
    s.sleeps = state.sleeps;
    s.wakes = state.wakes;
    s.last_sleep_seconds = state.last_sleep_seconds;
    s.last_wake_seconds = state.last_wake_seconds;
    out.push_back(std::move(s));
  }
  return out;
}

}  // namespace unipool
