// unipool device pool: allocation from cached memory. The hot path is
// allocate() -> from_cache() -> carve_own() -> carve_in() -> publish(): one
// lock, one range allocator call, one table insert, the stats.
#include <string>

#include "device/pool_impl.hpp"

namespace unipool {

using device::Kind;

namespace {

std::string size_text(uint64_t bytes) { return std::to_string(bytes) + " bytes"; }

}  // namespace

void* DevicePool::Impl::allocate(uint64_t bytes, StreamHandle stream) {
  if (bytes == 0) {
    throw DevicePoolError(Status::zero_size, "unipool: device allocation of 0 bytes on device " +
                                                 std::to_string(device));
  }
  if (bytes > device::kMaxRequest) {
    throw DevicePoolError(Status::too_large, "unipool: device allocation of " + size_text(bytes) +
                                                 " on device " + std::to_string(device) +
                                                 " is larger than any device (at most 2^50 bytes)");
  }
  const uint64_t size = device::round_block(bytes);
  const Request r{bytes, size, device::kind_of(size),
                  !use_expandable && size >= config.max_split_size, stream};
  {
    std::lock_guard lock(mutex);
    if (void* p = from_cache(r)) return p;
  }
  device::GrowthFailure why;
  if (void* p = grow(r, &why)) return p;
  // OOM path: give back what the cache holds (waiting for the owners'
  // fences), then try once more, from the cache and then from the backend.
  {
    std::lock_guard lock(mutex);
    ++stats.num_alloc_retries;
  }
  release_cached(device::Sync::owners);
  {
    std::lock_guard lock(mutex);
    if (void* p = from_cache(r)) return p;
  }
  if (void* p = grow(r, &why)) return p;
  out_of_memory(r, why);
}

DevicePool::Impl::StreamState& DevicePool::Impl::stream_state(StreamHandle stream) {
  if (last_stream != nullptr && last_stream->stream == stream) return *last_stream;
  StreamState& s = streams[stream];  // node-based: the address stays valid
  s.stream = stream;
  last_stream = &s;
  return s;
}

void* DevicePool::Impl::from_cache(const Request& r) {
  if (pending.total() != 0) poll_pending();
  StreamState& s = stream_state(r.stream);
  if (void* p = carve_own(s, r)) return p;
  return steal(s, r);
}

void* DevicePool::Impl::carve_own(StreamState& s, const Request& r) {
  const auto k = static_cast<size_t>(r.kind);
  if (use_expandable) {
    const uint32_t id = s.expandable[k];
    return id == StreamState::kNoArena ? nullptr : carve_in(*arenas[id], r);
  }
  const uint32_t hint = s.hint[k];
  if (hint != StreamState::kNoArena) {
    if (void* p = carve_in(*arenas[hint], r)) return p;
  }
  for (const uint32_t id : s.arenas[k]) {
    if (id == hint) continue;
    if (void* p = carve_in(*arenas[id], r)) {
      s.hint[k] = id;
      return p;
    }
  }
  return nullptr;
}

// A free range of another stream's arena, once that stream is known to be
// past it. The first miss records a marker fence on the owner; a later
// request takes the memory when the marker has completed. Never blocks.
void* DevicePool::Impl::steal(StreamState& s, const Request& r) {
  const auto k = static_cast<size_t>(r.kind);
  for (auto& [handle, other] : streams) {
    if (&other == &s) continue;
    bool waiting = false;
    auto try_arena = [&](uint32_t id) -> void* {
      Arena& a = *arenas[id];
      if (a.ranges.largest_free() < r.size) return nullptr;
      if (!settled(a)) {
        waiting = true;
        return nullptr;
      }
      return carve_in(a, r);
    };
    if (other.expandable[k] != StreamState::kNoArena) {
      if (void* p = try_arena(other.expandable[k])) return p;
    }
    for (size_t i = 0; i < other.arenas[k].size(); ++i) {
      const uint32_t id = other.arenas[k][i];
      void* p = try_arena(id);
      if (p == nullptr) continue;
      Arena& a = *arenas[id];
      if (a.ranges.live_allocations() == 1) {
        // The whole segment was idle: it changes hands, so the new owner's
        // frees are immediate again.
        other.arenas[k].erase(other.arenas[k].begin() + static_cast<std::ptrdiff_t>(i));
        if (other.hint[k] == id) other.hint[k] = StreamState::kNoArena;
        s.arenas[k].push_back(id);
        s.hint[k] = id;
        a.owner = &s;
        a.last_free_seq = 0;
      }
      return p;
    }
    if (waiting) request_marker(other);
  }
  return nullptr;
}

// Carves a block for r out of `a` if a free range fits, without growing it.
void* DevicePool::Impl::carve_in(Arena& a, const Request& r) {
  if (a.whole_only != r.oversize) return nullptr;
  uint64_t extent = r.size;
  if (a.whole_only) {
    // PyTorch's rule for blocks >= max_split_size: reuse only if the waste is
    // under one large segment.
    if (a.ranges.live_allocations() != 0 || a.size < r.size || a.size >= r.size + device::kLargeSegment) {
      return nullptr;
    }
    extent = a.size;
  }
  const int64_t split_count = a.split_count(), split_bytes = a.split_bytes();
  const RangeAllocation range = a.ranges.allocate(extent);
  if (!range) return nullptr;
  if (a.expandable && !a.range_mapped(range.offset, extent)) {
    a.ranges.free(range);  // would need growth: not from the cache
    return nullptr;
  }
  device::stat_change(stats.inactive_split, a.kind, a.split_count() - split_count);
  device::stat_change(stats.inactive_split_bytes, a.kind, a.split_bytes() - split_bytes);
  return publish(a, range, extent, r);
}

// Turns a carved range into a live block: table, stats.
void* DevicePool::Impl::publish(Arena& a, const RangeAllocation& range, uint64_t extent, const Request& r) {
  const uint32_t id = blocks.acquire();
  device::Block& b = blocks[id];
  b.address = reinterpret_cast<uint64_t>(a.base) + range.offset;
  b.offset = range.offset;
  b.handle = range.handle;
  b.size = extent;
  b.requested = r.bytes;
  b.stream = r.stream;
  b.arena = a.id;
  live.insert(b.address, id);
  const auto n = static_cast<int64_t>(extent);
  device::stat_change(stats.allocation, a.kind, 1);
  device::stat_change(stats.allocated_bytes, a.kind, n);
  device::stat_change(stats.active, a.kind, 1);
  device::stat_change(stats.active_bytes, a.kind, n);
  device::stat_change(stats.requested_bytes, a.kind, static_cast<int64_t>(r.bytes));
  return reinterpret_cast<void*>(b.address);
}

}  // namespace unipool
