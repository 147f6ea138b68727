// unipool device pool: giving cached memory back to the backend (empty_cache,
// the OOM path, the garbage-collection and release thresholds, destruction).
//
// Memory goes back only when the stream that owns it is past its last use:
// its marker fence covers the arena's last free. Sync::all (empty_cache)
// first waits for the fences of pending frees, then, like Sync::owners (the
// OOM path), records fresh markers on the owners of releasable memory and
// waits for them, as torch.cuda.empty_cache() and PyTorch's OOM path
// synchronize. Sync::none (the thresholds) releases what is already settled
// and leaves markers behind for next time. Backend calls and hooks run with the
// lock released; on a backend failure the memory goes back into the pool, so
// nothing is ever lost.
#include <algorithm>
#include <utility>
#include <vector>

#include "device/pool_impl.hpp"

namespace unipool {

void DevicePool::Impl::release_cached(device::Sync sync) {
  std::vector<device::Release> items;
  {
    std::unique_lock lock(mutex);
    if (pending.total() != 0) poll_pending();
    if (sync != device::Sync::none) {
      // First (empty_cache only) every pending free's fence, so those blocks
      // become free; then one fresh marker per owner of releasable memory its
      // stream may still be using.
      std::vector<FenceId> fences;
      for (const device::PendingQueue& q : pending.queues()) {
        if (sync != device::Sync::all) break;
        for (const device::PendingFree& e : q.entries) {
          if (e.fence != kNoFence) fences.push_back(e.fence);
        }
      }
      bool waited = wait_for(fences, lock);
      fences.clear();
      for (const auto& a : arenas) {
        if (a == nullptr || a->transition || settled(*a)) continue;
        if (!releasable(*a)) continue;
        const FenceId f = fresh_marker(*a->owner);
        if (f != kNoFence && std::find(fences.begin(), fences.end(), f) == fences.end()) fences.push_back(f);
      }
      waited = wait_for(fences, lock) || waited;
      if (waited) ++stats.num_sync_all_streams;
    }
    items = take_releasable();
  }
  give_back(items);
}

// Whether `a` holds memory a release could give back now. A sleeping tag's
// memory is the sleep's to give back and to map again.
bool DevicePool::Impl::releasable(const Arena& a) const {
  if (!tag_awake(a.tag)) return false;
  if (!a.expandable) return a.ranges.live_allocations() == 0;
  std::vector<std::pair<uint64_t, uint64_t>> runs;
  a.releasable_runs(runs);
  return !runs.empty();
}

// Waits for `fences` with the lock released; they stay allocated meanwhile
// (release_fence defers). Then completes the pending frees that are done.
bool DevicePool::Impl::wait_for(const std::vector<FenceId>& fences, std::unique_lock<std::mutex>& lock) {
  if (fences.empty()) return false;
  ++waiters;
  lock.unlock();
  for (const FenceId f : fences) {
    try {
      backend->fences().wait(f);
    } catch (...) {
      // A failed wait leaves the fence incomplete: what it guards stays put.
    }
  }
  lock.lock();
  if (--waiters == 0) {
    for (const FenceId f : deferred_fences) backend->fences().release(f);
    deferred_fences.clear();
  }
  if (pending.total() != 0) poll_pending();
  return true;
}

std::vector<device::Release> DevicePool::Impl::take_releasable() {
  std::vector<device::Release> items;
  for (auto& slot : arenas) {
    if (slot == nullptr || slot->transition || !tag_awake(slot->tag)) continue;
    Arena& a = *slot;
    if (!settled(a)) {
      request_marker(*a.owner);
      continue;
    }
    if (a.expandable) {
      std::vector<std::pair<uint64_t, uint64_t>> runs;
      a.releasable_runs(runs);
      if (runs.empty()) continue;
      a.transition = true;  // nobody maps granules of this arena meanwhile
      for (const auto& [first, last] : runs) {
        set_granules(a, first, last, false);
        device::Release item;
        item.expandable = &a;
        item.from = first * a.granule;
        item.bytes = (last - first) * a.granule;
        device::stat_change(stats.reserved_bytes, a.kind, -static_cast<int64_t>(item.bytes));
        trace(DeviceTraceAction::segment_unmap, reinterpret_cast<uint64_t>(a.base) + item.from, item.bytes, 0,
              a.owner->stream);
        items.push_back(std::move(item));
      }
      continue;
    }
    if (a.ranges.live_allocations() != 0) continue;
    trace(DeviceTraceAction::segment_free, reinterpret_cast<uint64_t>(a.base), a.size, 0, a.owner->stream);
    disown(a);
    device::stat_change(stats.segment, a.kind, -1);
    device::stat_change(stats.reserved_bytes, a.kind, -static_cast<int64_t>(a.size));
    // The id stays taken (its slot null) until the backend call succeeded.
    device::Release item;
    item.segment = std::move(slot);
    items.push_back(std::move(item));
  }
  return items;
}

void DevicePool::Impl::give_back(std::vector<device::Release>& items) {
  if (items.empty()) return;
  std::vector<BackendStatus> results;
  results.reserve(items.size());
  for (device::Release& item : items) {
    if (item.segment) {
      fire_unmap(item.segment->base, item.segment->size, false);
      results.push_back(backend->deallocate(device, item.segment->base, item.segment->size));
    } else {
      fire_unmap(item.expandable->base + item.from, item.bytes, true);
      results.push_back(backend->unmap(device, item.expandable->base, item.from, item.bytes));
    }
  }
  std::vector<DeviceSegmentEvent> remapped;  // failed: back in the pool, hooks told again
  {
    std::lock_guard lock(mutex);
    for (size_t i = 0; i < items.size(); ++i) {
      device::Release& item = items[i];
      const bool ok = results[i].is_ok();
      if (ok) ++stats.num_device_free;
      if (item.expandable != nullptr) {
        Arena& a = *item.expandable;
        if (!ok) {  // still mapped: back in the books
          set_granules(a, item.from / a.granule, (item.from + item.bytes) / a.granule, true);
          device::stat_change(stats.reserved_bytes, a.kind, static_cast<int64_t>(item.bytes));
          remapped.push_back(DeviceSegmentEvent{device, a.base + item.from, item.bytes, true});
          trace(DeviceTraceAction::segment_map, reinterpret_cast<uint64_t>(a.base) + item.from, item.bytes, 0,
                a.owner->stream);
        }
        a.transition = false;
        continue;
      }
      Arena* a = item.segment.get();
      if (ok) {
        spare_arena_ids.push_back(a->id);
        continue;  // the unique_ptr frees the bookkeeping
      }
      device::stat_change(stats.segment, a->kind, 1);
      device::stat_change(stats.reserved_bytes, a->kind, static_cast<int64_t>(a->size));
      remapped.push_back(DeviceSegmentEvent{device, a->base, a->size, false});
      trace(DeviceTraceAction::segment_alloc, reinterpret_cast<uint64_t>(a->base), a->size, 0, a->owner->stream);
      arenas[a->id] = std::move(item.segment);
      own(*a->owner, *a);
    }
    transition_done.notify_all();
  }
  for (const DeviceSegmentEvent& e : remapped) {
    fire_map(e.address, e.bytes, e.expandable);
  }
}

// Destruction: everything goes back, leaked blocks included.
void DevicePool::Impl::release_all() {
  FenceSource& fences = backend->fences();
  for (device::PendingQueue& q : pending.queues()) {
    for (const device::PendingFree& e : q.entries) {
      if (e.fence != kNoFence) fences.release(e.fence);
    }
  }
  for (auto& [key, s] : streams) {
    if (s.marker != kNoFence) fences.release(s.marker);
  }
  for (const FenceId f : deferred_fences) fences.release(f);
  for (auto& a : arenas) {
    if (a == nullptr) continue;
    if (a->expandable) {
      std::vector<std::pair<uint64_t, uint64_t>> runs;
      a->mapped_runs(runs);
      for (const auto& [first, last] : runs) {
        fire_unmap(a->base + first * a->granule, (last - first) * a->granule, true);
        backend->unmap(device, a->base, first * a->granule, (last - first) * a->granule);
      }
      backend->unreserve(device, a->base, a->size);
    } else {
      if (!a->plain_asleep) fire_unmap(a->base, a->size, false);
      backend->deallocate(device, a->base, a->size);
    }
  }
  arenas.clear();
  free_staged(~uint64_t{0});
}

}  // namespace unipool
