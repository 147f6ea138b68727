// unipool device pool: growing when the cache has no fitting block. A plain
// pool asks the backend for a new segment; an expandable pool carves the
// block from the stream's reserved range and maps the granules under it that
// are not mapped yet. Backend calls run outside the pool lock: `inflight`
// counts the bytes on their way against the limit, and an expandable arena's
// `transition` flag lets one thread at a time map or unmap its granules.
#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "device/pool_impl.hpp"

namespace unipool {

using device::GrowthFailure;

namespace {

GrowthFailure over_limit() {
  GrowthFailure f;
  f.over_limit = true;
  return f;
}

}  // namespace

uint64_t DevicePool::Impl::effective_limit() const {
  uint64_t limit = memory_limit;
  if (memory_fraction > 0) {
    // At least 1: a positive fraction is a limit, never "none" (0). The
    // setters refuse fractions this small; this keeps the rule local.
    const auto by_fraction =
        std::max<uint64_t>(1, static_cast<uint64_t>(memory_fraction * static_cast<double>(device_total)));
    limit = limit == 0 ? by_fraction : std::min(limit, by_fraction);
  }
  return limit;
}

bool DevicePool::Impl::within_limit(uint64_t more) const {
  const uint64_t limit = effective_limit();
  if (limit == 0) return true;
  const auto reserved = static_cast<uint64_t>(stats.reserved_bytes[0].current);
  return reserved + inflight + more <= limit;
}

void* DevicePool::Impl::grow(const Request& r, GrowthFailure* why) {
  const double gc = config.garbage_collection_threshold;
  if (gc > 0) {
    bool collect = false;
    {
      std::lock_guard lock(mutex);
      const uint64_t limit = effective_limit();
      const auto reserved = static_cast<double>(stats.reserved_bytes[0].current);
      collect = limit > 0 && reserved > gc * static_cast<double>(limit);
    }
    if (collect) release_cached(device::Sync::none);
  }
  return use_expandable ? grow_expandable(r, why) : grow_segment(r, why);
}

uint32_t DevicePool::Impl::add_arena(std::unique_ptr<Arena> arena) {
  uint32_t id;
  if (!spare_arena_ids.empty()) {
    id = spare_arena_ids.back();
    spare_arena_ids.pop_back();
  } else {
    id = static_cast<uint32_t>(arenas.size());
    arenas.emplace_back();
  }
  arena->id = id;
  arenas[id] = std::move(arena);
  return id;
}

void* DevicePool::Impl::grow_segment(const Request& r, GrowthFailure* why) {
  const uint64_t bytes = r.oversize ? round_up(r.size, device::kRoundLarge) : device::segment_size(r.size);
  {
    std::lock_guard lock(mutex);
    if (!within_limit(bytes)) {
      *why = over_limit();
      return nullptr;
    }
    inflight += bytes;
  }
  void* base = nullptr;
  const BackendStatus status = backend->allocate(device, bytes, &base);
  if (status.is_ok()) fire_map(base, bytes, false);

  std::lock_guard lock(mutex);
  inflight -= bytes;
  if (!status.is_ok()) {
    why->over_limit = false;
    why->status = status;
    return nullptr;
  }
  StreamState& s = stream_state(r.stream, r.tag);
  RangeAllocatorOptions options;
  options.alignment = device::kBlockAlign;
  options.initial_nodes = 16;
  auto arena = std::make_unique<Arena>(0, r.kind, false, &s, static_cast<char*>(base), bytes, options, r.tag);
  arena->whole_only = r.oversize;
  Arena& a = *arena;
  const uint32_t id = add_arena(std::move(arena));
  own(s, a);
  s.hint[static_cast<size_t>(r.kind)] = id;
  device::stat_change(stats.segment, r.kind, 1);
  device::stat_change(stats.reserved_bytes, r.kind, static_cast<int64_t>(bytes));
  ++stats.num_device_alloc;
  trace(DeviceTraceAction::segment_alloc, reinterpret_cast<uint64_t>(base), bytes, 0, s.stream);
  return carve_in(a, r);  // fits: the segment was sized for r
}

// The stream's expandable arena of r's kind, reserving it on first use.
DevicePool::Impl::Arena* DevicePool::Impl::expandable_arena(const Request& r, GrowthFailure* why) {
  const auto k = static_cast<size_t>(r.kind);
  std::lock_guard reserving(reserve_mutex);
  {
    std::lock_guard lock(mutex);
    const uint32_t id = stream_state(r.stream, r.tag).expandable[k];
    if (id != StreamState::kNoArena) return arenas[id].get();
  }
  void* base = nullptr;
  const BackendStatus status = backend->reserve(device, reserve_bytes, &base);
  if (!status.is_ok()) {
    why->over_limit = false;
    why->status = status;
    return nullptr;
  }
  std::lock_guard lock(mutex);
  StreamState& s = stream_state(r.stream, r.tag);
  RangeAllocatorOptions options;
  options.alignment = device::kBlockAlign;
  auto arena = std::make_unique<Arena>(0, r.kind, true, &s, static_cast<char*>(base), reserve_bytes, options, r.tag);
  arena->init_granules(granule);
  Arena* a = arena.get();
  s.expandable[k] = add_arena(std::move(arena));
  return a;
}

// Carves r at the best fitting place of the stream's arena (its free ranges
// span mapped and unmapped granules alike), then maps the granules under the
// block that are not mapped yet. A block that starts in the free end of the
// mapped memory uses it and maps only the rest: growth never strands slivers.
// Maps the granule runs of `a` in order, with no lock held, firing the map
// hook of each; returns how many were mapped (all, or up to the failed one,
// whose status is in *status).
size_t DevicePool::Impl::map_runs(Arena& a, const std::vector<std::pair<uint64_t, uint64_t>>& runs,
                                  BackendStatus* status) {
  size_t done = 0;
  for (; done < runs.size(); ++done) {
    const uint64_t from = runs[done].first * a.granule;
    const uint64_t n = (runs[done].second - runs[done].first) * a.granule;
    *status = backend->map(device, a.base, from, n);
    if (!status->is_ok()) break;
    fire_map(a.base + from, n, true);
  }
  return done;
}

// The first `done` runs are mapped now: the arena's map, the stats and the
// trace say so (lock held).
void DevicePool::Impl::count_mapped(Arena& a, const std::vector<std::pair<uint64_t, uint64_t>>& runs, size_t done) {
  for (size_t i = 0; i < done; ++i) {
    const uint64_t bytes = (runs[i].second - runs[i].first) * a.granule;
    set_granules(a, runs[i].first, runs[i].second, true);
    device::stat_change(stats.reserved_bytes, a.kind, static_cast<int64_t>(bytes));
    ++stats.num_device_alloc;
    trace(DeviceTraceAction::segment_map, reinterpret_cast<uint64_t>(a.base) + runs[i].first * a.granule, bytes, 0,
          a.owner->stream);
  }
}

void DevicePool::Impl::set_granules(Arena& a, uint64_t first, uint64_t last, bool on) {
  const uint64_t runs_before = a.runs;
  a.set_mapped(first, last, on);
  device::stat_change(stats.segment, a.kind, static_cast<int64_t>(a.runs) - static_cast<int64_t>(runs_before));
}

void* DevicePool::Impl::grow_expandable(const Request& r, GrowthFailure* why) {
  Arena* a = expandable_arena(r, why);
  if (a == nullptr) return nullptr;
  std::unique_lock lock(mutex);
  const RangeAllocation range = a->ranges.allocate(r.size);
  if (!range) {  // the reservation (1.5x the device) is full
    *why = over_limit();
    return nullptr;
  }
  ++a->unpublished;
  // Once the lock was let go with this range carved, someone (restore())
  // may be waiting for unpublished ranges to settle: tell it when it does.
  bool let_go = false;
  auto settle = [&] {
    --a->unpublished;
    if (let_go) transition_done.notify_all();
  };
  auto give_up = [&] {
    settle();
    a->ranges.deallocate(range);
    return nullptr;
  };
  std::vector<std::pair<uint64_t, uint64_t>> runs;
  for (;;) {
    if (a->range_mapped(range.offset, r.size)) break;
    if (a->transition) {  // another thread maps or unmaps granules: wait for it
      let_go = true;
      transition_done.wait(lock);
      continue;
    }
    runs.clear();
    a->unmapped_runs(range.offset, r.size, runs);
    uint64_t bytes = 0;
    for (const auto& [first, last] : runs) bytes += (last - first) * a->granule;
    if (!within_limit(bytes)) {
      *why = over_limit();
      return give_up();
    }
    a->transition = true;
    inflight += bytes;
    let_go = true;
    lock.unlock();
    BackendStatus status;
    const size_t done = map_runs(*a, runs, &status);
    lock.lock();
    inflight -= bytes;
    a->transition = false;
    transition_done.notify_all();
    count_mapped(*a, runs, done);  // mapped runs stay, even if a later one failed
    if (done < runs.size()) {
      why->over_limit = false;
      why->status = status;
      return give_up();
    }
  }
  settle();
  return publish(*a, range, r.size, r);
}

void DevicePool::Impl::fire_map(void* address, uint64_t bytes, bool expandable) const {
  std::shared_ptr<const DeviceSegmentHooks> h;
  {
    std::lock_guard lock(mutex);
    h = hooks;
  }
  if (h && h->on_map) {
    try {
      h->on_map(DeviceSegmentEvent{device, address, bytes, expandable});
    } catch (...) {
      // A hook must not break the pool's books; see DeviceSegmentHooks.
    }
  }
}

void DevicePool::Impl::fire_unmap(void* address, uint64_t bytes, bool expandable) const {
  std::shared_ptr<const DeviceSegmentHooks> h;
  {
    std::lock_guard lock(mutex);
    h = hooks;
  }
  if (h && h->before_unmap) {
    try {
      h->before_unmap(DeviceSegmentEvent{device, address, bytes, expandable});
    } catch (...) {
    }
  }
}

}  // namespace unipool
