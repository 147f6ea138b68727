// unipool device pool: sleep (device_sleep.hpp). The memory of sleeping tags
// goes back to the backend while their virtual addresses stay reserved;
// offloaded contents wait in host pool blocks until wake (pool_wake.cpp).
//
// Backend calls, in order: synchronize, one copy batch, one unmap per run of
// mapped granules (per plain segment). Until the first unmap a failure
// leaves the tags as they were; after it they are `partial`, and the books
// say exactly which runs went (Arena::slept), so sleep or wake can go on.
#include <algorithm>
#include <chrono>
#include <string>
#include <vector>

#include "device/pool_impl.hpp"

namespace unipool {

using device::TagPhase;

namespace {

uint64_t bit(DeviceTag t) noexcept { return uint64_t{1} << t; }

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// The tags of `names` as a mask (made on first use).
uint64_t tag_mask(const std::vector<std::string>& names) {
  uint64_t mask = 0;
  for (const std::string& name : names) mask |= bit(device_tag(name));
  return mask;
}

std::string quoted(DeviceTag t) { return "'" + device_tag_name(t) + "'"; }

}  // namespace

TagPhase DevicePool::Impl::phase(DeviceTag tag) const {
  std::lock_guard lock(mutex);
  return tags[tag].phase;
}

void DevicePool::Impl::refuse_asleep(DeviceTag tag) const {
  throw DevicePoolError(Status::asleep, "unipool: device allocation from tag " + quoted(tag) + " on device " +
                                            std::to_string(device) + ", which is asleep: wake it first");
}

// Waits until no arena of the tags is being mapped, unmapped or grown, then
// marks each in transition, so growth and release leave it alone until
// end_transition(). The Arena objects stay put meanwhile.
std::vector<device::Arena*> DevicePool::Impl::claim_arenas(uint64_t mask, std::unique_lock<std::mutex>& lock) {
  auto busy = [&] {
    for (const auto& a : arenas) {
      if (a != nullptr && (mask & bit(a->tag)) != 0 && (a->transition || a->unpublished != 0)) return true;
    }
    return false;
  };
  while (busy()) transition_done.wait(lock);
  std::vector<Arena*> claimed;
  for (const auto& a : arenas) {
    if (a == nullptr || (mask & bit(a->tag)) == 0) continue;
    a->transition = true;
    claimed.push_back(a.get());
  }
  return claimed;
}

void DevicePool::Impl::end_transition(const std::vector<Arena*>& claimed) {
  for (Arena* a : claimed) a->transition = false;
  transition_done.notify_all();
}

void DevicePool::Impl::set_phase(uint64_t mask, TagPhase phase) {
  for (unsigned t = 0; t < kMaxDeviceTags; ++t) {
    if ((mask & bit(static_cast<DeviceTag>(t))) == 0) continue;
    tags[t].phase = phase;
  }
  if (phase == TagPhase::awake) {
    asleep_mask &= ~mask;
  } else {
    asleep_mask |= mask;
  }
}

// No queued work may still use the memory: the device's work is done, then
// the pending frees' fences are waited for (their blocks become free).
void DevicePool::Impl::settle_for_sleep(std::unique_lock<std::mutex>& lock) {
  lock.unlock();
  const BackendStatus synced = backend->synchronize(device);
  lock.lock();
  if (!synced.is_ok()) {
    throw DevicePoolError(Status::backend_error, std::string("unipool: sleep on device ") + std::to_string(device) +
                                                     ": synchronize failed: " + synced.message);
  }
  std::vector<FenceId> fences;
  for (const device::PendingQueue& q : pending.queues()) {
    for (const device::PendingFree& e : q.entries) {
      if (e.fence != kNoFence) fences.push_back(e.fence);
    }
  }
  wait_for(fences, lock);
}

// The live blocks of offloaded tags whose contents are still on the device
// and not staged yet (an earlier, failed sleep may have staged some); counts
// the discarded ones. Lock held.
void DevicePool::Impl::plan_offload(uint64_t mask, uint64_t offload, std::vector<DeviceCopy>& copies,
                                    uint64_t* discarded) {
  blocks.for_each([&](uint32_t, const device::Block& b) {
    const Arena& a = *arenas[b.arena];
    if (b.freed || (mask & bit(a.tag)) == 0) return;
    device::TagState& t = tags[a.tag];
    if ((offload & bit(a.tag)) == 0) {
      *discarded += b.size;
      t.discarded_bytes += b.size;
      return;
    }
    if (t.staged.count(b.address) != 0) return;
    const bool on_device = a.expandable ? a.range_mapped(b.offset, b.requested) : !a.plain_asleep;
    if (on_device) copies.push_back(DeviceCopy{nullptr, reinterpret_cast<const void*>(b.address), b.requested});
  });
}

// Host blocks for `copies`, then one copy batch into them. On failure every
// host block is freed again and the error thrown. Lock not held.
void DevicePool::Impl::stage(std::vector<DeviceCopy>& copies, HostPool& host) {
  if (copies.empty()) return;
  size_t made = 0;
  for (; made < copies.size(); ++made) {
    void* p = host.allocate(copies[made].bytes);
    if (p == nullptr) break;
    copies[made].dst = p;
  }
  BackendStatus copied;
  if (made == copies.size()) copied = backend->copy(device, copies.data(), copies.size(), CopyDirection::to_host);
  if (made == copies.size() && copied.is_ok()) return;
  const std::string host_error = made < copies.size() ? HostPool::last_error() : "";
  for (size_t i = 0; i < made; ++i) host.deallocate(copies[i].dst);
  const std::string where = "unipool: sleep on device " + std::to_string(device) + ": ";
  if (made < copies.size()) {
    throw DevicePoolError(Status::out_of_space, where + "the host pool could not hold a block of " +
                                                    std::to_string(copies[made].bytes) + " bytes to offload (" +
                                                    host_error + "); nothing was released");
  }
  throw DevicePoolError(Status::backend_error,
                        where + "the copy to host memory failed: " + copied.message + "; nothing was released");
}

// Files the staged contents under their tags; a block freed during the copy
// needs none. Lock held.
void DevicePool::Impl::keep_staged(const std::vector<DeviceCopy>& copies, HostPool& host) {
  for (const DeviceCopy& c : copies) {
    const auto address = reinterpret_cast<uint64_t>(c.src);
    const uint32_t id = live.find(address);
    if (id == device::kNoIndex) {
      host.deallocate(c.dst);
      continue;
    }
    device::TagState& t = tags[arenas[blocks[id].arena]->tag];
    t.staged[address] = device::Staged{c.dst, c.bytes, &host};
    t.offloaded_bytes += c.bytes;
  }
}

// A block of a sleeping tag was freed: its staged contents are not needed.
void DevicePool::Impl::drop_staged(const device::Block& b, const Arena& a) {
  auto& staged = tags[a.tag].staged;
  const auto it = staged.find(b.address);
  if (it == staged.end()) return;
  it->second.pool->deallocate(it->second.host);
  staged.erase(it);
}

// Gives every mapped byte of `a` back, run by run; the books follow each
// call. Throws on the first failure (its hooks are told the run is back).
// Lock not held; `a` is claimed.
uint64_t DevicePool::Impl::unmap_arena(Arena& a) {
  std::vector<std::pair<uint64_t, uint64_t>> runs;
  {
    std::lock_guard lock(mutex);
    if (a.expandable) {
      a.mapped_runs(runs);
    } else if (!a.plain_asleep) {
      runs.emplace_back(0, 0);
    }
  }
  uint64_t released = 0;
  for (const auto& run : runs) {
    const uint64_t from = run.first * a.granule;
    const uint64_t bytes = a.expandable ? (run.second - run.first) * a.granule : a.size;
    fire_unmap(a.base + from, bytes, a.expandable);
    const BackendStatus status = backend->unmap(device, a.base, from, bytes);
    if (!status.is_ok()) {
      fire_map(a.base + from, bytes, a.expandable);
      throw DevicePoolError(Status::backend_error,
                            "unipool: sleep of tag " + quoted(a.tag) + " on device " + std::to_string(device) +
                                ": unmapping " + std::to_string(bytes) + " bytes failed: " + status.message +
                                "; the tag is partly asleep: call sleep again to finish, or wake to undo");
    }
    std::lock_guard lock(mutex);
    count_sleep_run(a, run, bytes, false);
    tags[a.tag].released_bytes += bytes;
    released += bytes;
  }
  return released;
}

// The books of one run a sleep unmapped (`mapped` false) or a wake mapped
// again (true), lock held: the granules or the plain segment, what the
// arena keeps to map again, the stats and the trace.
void DevicePool::Impl::count_sleep_run(Arena& a, std::pair<uint64_t, uint64_t> run, uint64_t bytes, bool mapped) {
  if (a.expandable) {
    set_granules(a, run.first, run.second, mapped);
    if (mapped) {
      a.slept.erase(std::find(a.slept.begin(), a.slept.end(), run));
    } else {
      a.slept.push_back(run);
    }
  } else {
    a.plain_asleep = !mapped;
    device::stat_change(stats.segment, a.kind, mapped ? 1 : -1);
  }
  const auto delta = static_cast<int64_t>(bytes);
  device::stat_change(stats.reserved_bytes, a.kind, mapped ? delta : -delta);
  ++(mapped ? stats.num_device_alloc : stats.num_device_free);
  trace(mapped ? DeviceTraceAction::segment_map : DeviceTraceAction::segment_unmap,
        reinterpret_cast<uint64_t>(a.base) + run.first * a.granule, bytes, 0, a.owner->stream);
}

DeviceSleepResult DevicePool::Impl::sleep(uint64_t mask, uint64_t offload, HostPool& host) {
  const auto start = std::chrono::steady_clock::now();
  std::unique_lock lock(mutex);
  uint64_t was_awake = 0;
  for (unsigned t = 0; t < kMaxDeviceTags; ++t) {
    if (tags[t].phase == TagPhase::asleep) mask &= ~bit(static_cast<DeviceTag>(t));
    if ((mask >> t & 1) != 0 && tags[t].phase == TagPhase::awake) {
      was_awake |= bit(static_cast<DeviceTag>(t));
      tags[t].offloaded_bytes = tags[t].discarded_bytes = tags[t].released_bytes = 0;
    }
  }
  DeviceSleepResult result;
  if (mask == 0) return result;
  set_phase(mask, TagPhase::partial);  // from here on, allocations of these tags are refused
  const std::vector<Arena*> claimed = claim_arenas(mask, lock);
  try {
    settle_for_sleep(lock);
    std::vector<DeviceCopy> copies;
    plan_offload(mask, offload, copies, &result.discarded_bytes);
    lock.unlock();
    stage(copies, host);
    lock.lock();
    keep_staged(copies, host);
    for (const DeviceCopy& c : copies) result.offloaded_bytes += c.bytes;
  } catch (...) {
    if (!lock.owns_lock()) lock.lock();
    end_transition(claimed);
    set_phase(was_awake, TagPhase::awake);  // nothing was unmapped: as before
    throw;
  }
  lock.unlock();
  try {
    for (Arena* a : claimed) result.released_bytes += unmap_arena(*a);
  } catch (...) {
    lock.lock();
    end_transition(claimed);
    throw;  // the tags stay partial
  }
  lock.lock();
  end_transition(claimed);
  set_phase(mask, TagPhase::asleep);
  result.seconds = seconds_since(start);
  for (unsigned t = 0; t < kMaxDeviceTags; ++t) {
    if ((mask >> t & 1) == 0) continue;
    ++tags[t].sleeps;
    tags[t].last_sleep_seconds = result.seconds;
  }
  return result;
}

DeviceSleepResult sleep_pools(const std::vector<DevicePool*>& pools, const DeviceSleepRequest& request,
                              HostPool* host) {
  const auto start = std::chrono::steady_clock::now();
  const uint64_t offload = tag_mask(request.offload);
  const uint64_t discard = tag_mask(request.discard);
  const uint64_t mask = offload | discard;
  if (mask == 0) throw DevicePoolError(Status::bad_argument, "unipool: sleep needs at least one tag");
  for (unsigned t = 0; t < kMaxDeviceTags; ++t) {
    if ((offload & discard) >> t & 1) {
      throw DevicePoolError(Status::bad_argument, "unipool: sleep: tag " + quoted(static_cast<DeviceTag>(t)) +
                                                      " is both offloaded and discarded");
    }
  }
  for (DevicePool* p : pools) {
    if (!p->backend().supports_sleep()) {
      throw DevicePoolError(Status::bad_argument,
                            std::string("unipool: sleep needs memory that can be unmapped and mapped again at the "
                                        "same addresses, which backend '") +
                                p->backend().name() +
                                "' cannot do (cudaMalloc segments cannot keep their "
                                "addresses): use backend=cuda_vmm");
    }
  }
  for (unsigned t = 0; t < kMaxDeviceTags && !pools.empty(); ++t) {
    if ((mask >> t & 1) == 0) continue;
    bool everywhere = true;
    for (DevicePool* p : pools)
      everywhere = everywhere && p->impl_->phase(static_cast<DeviceTag>(t)) == TagPhase::asleep;
    if (everywhere) {
      throw DevicePoolError(Status::asleep,
                            "unipool: sleep: tag " + quoted(static_cast<DeviceTag>(t)) + " is already asleep");
    }
  }
  HostPool& staging = host != nullptr ? *host : HostPool::default_pool();
  DeviceSleepResult total;
  for (DevicePool* p : pools) {
    const DeviceSleepResult r = p->impl_->sleep(mask, offload, staging);
    total.offloaded_bytes += r.offloaded_bytes;
    total.discarded_bytes += r.discarded_bytes;
    total.released_bytes += r.released_bytes;
  }
  total.seconds = seconds_since(start);
  return total;
}

}  // namespace unipool
