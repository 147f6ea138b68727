// unipool device pool: freeing blocks. A block used only on its arena's owner
// stream is free again at once; one used on other streams (its allocation
// stream, if it was taken from another stream's arena, and every stream given
// to record_stream) waits for a fence recorded on each of them now.
#include <cstdio>
#include <string>

#include "core/number_text.hpp"
#include "device/pool_impl.hpp"

namespace unipool {

Status DevicePool::Impl::deallocate(void* ptr, std::string* why) {
  const auto address = reinterpret_cast<uint64_t>(ptr);
  bool trim = false;
  {
    std::lock_guard lock(mutex);
    const uint32_t id = live.find(address);
    if (id == device::kNoIndex) {
      if (why != nullptr) *why = explain_bad_pointer(address);
      return Status::not_live;
    }
    release_block(id, false);
    const uint64_t cached = static_cast<uint64_t>(stats.reserved_bytes[0].current - stats.active_bytes[0].current);
    trim = config.release_threshold != ~uint64_t{0} && cached > config.release_threshold;
  }
  if (trim) release_cached(device::Sync::none);
  return Status::ok;
}

void DevicePool::Impl::release_block(uint32_t id, bool synchronized) {
  device::Block& b = blocks[id];
  trace(DeviceTraceAction::free_requested, b.address, b.size, b.requested, b.stream);
  live.erase(b.address);
  Arena& a = *arenas[b.arena];
  if (UNIPOOL_UNLIKELY(asleep_mask != 0) && !tag_awake(a.tag)) drop_staged(b, a);
  device::stat_change(stats.allocation, a.kind, -1);
  device::stat_change(stats.allocated_bytes, a.kind, -static_cast<int64_t>(b.size));

  const StreamHandle owner = a.owner->stream;
  auto fence_on = [&](StreamHandle s) {
    const FenceId f = backend->fences().record(device, s);
    pending.push(s, f, id);  // kNoFence is retried by poll_pending()
    ++b.pending;
  };
  if (!synchronized) {
    if (b.stream != owner) fence_on(b.stream);
    for (const StreamHandle s : b.other_streams) {
      if (s != owner) fence_on(s);
    }
  }
  if (b.pending == 0) {
    finish_free(id);
  } else {
    b.freed = true;
  }
}

Status DevicePool::Impl::record_stream(void* ptr, StreamHandle stream, std::string* why) {
  std::lock_guard lock(mutex);
  const uint32_t id = live.find(reinterpret_cast<uint64_t>(ptr));
  if (id == device::kNoIndex) {
    if (why != nullptr) *why = "record_stream: " + explain_bad_pointer(reinterpret_cast<uint64_t>(ptr));
    return Status::not_live;
  }
  device::Block& b = blocks[id];
  if (stream == b.stream) return Status::ok;
  for (const StreamHandle s : b.other_streams) {
    if (s == stream) return Status::ok;
  }
  b.other_streams.push_back(stream);
  return Status::ok;
}

// Completes the pending frees whose fences are done; stops at the first
// incomplete fence of each stream (later ones cannot be done before it).
void DevicePool::Impl::poll_pending() {
  FenceSource& fences = backend->fences();
  for (device::PendingQueue& q : pending.queues()) {
    while (!q.entries.empty()) {
      device::PendingFree& e = q.entries.front();
      if (e.fence == kNoFence) {
        e.fence = fences.record(device, q.stream);  // later than the free: still safe
        if (e.fence == kNoFence) break;
      }
      if (!fences.completed(e.fence)) break;
      release_fence(e.fence);
      const uint32_t id = e.block;
      q.entries.pop_front();
      pending.popped();
      if (--blocks[id].pending == 0) finish_free(id);
    }
  }
}

// The block's range goes back to its arena's range allocator, merging with
// free neighbours; the owner stream may reuse it at once.
void DevicePool::Impl::finish_free(uint32_t id) {
  device::Block& b = blocks[id];
  Arena& a = *arenas[b.arena];
  const int64_t split_count = a.split_count(), split_bytes = a.split_bytes();
  a.ranges.deallocate(b.offset, b.handle);
  a.last_free_seq = ++free_seq;
  device::stat_change(stats.inactive_split, a.kind, a.split_count() - split_count);
  device::stat_change(stats.inactive_split_bytes, a.kind, a.split_bytes() - split_bytes);
  device::stat_change(stats.active, a.kind, -1);
  device::stat_change(stats.active_bytes, a.kind, -static_cast<int64_t>(b.size));
  device::stat_change(stats.requested_bytes, a.kind, -static_cast<int64_t>(b.requested));
  if (!a.expandable) {
    a.owner->hint[static_cast<size_t>(a.kind)] = a.id;
    refit(a);
  }
  // Reported here, not at deallocate(): a block other streams used is free
  // only once their fences completed (poll_pending, possibly much later).
  trace(DeviceTraceAction::free_completed, b.address, b.size, b.requested, b.stream);
  blocks.release(id);
}

// True when every stream that used a free range of `a` is known to be past
// it: no range was ever freed there, or the owner's marker covers the last free.
bool DevicePool::Impl::settled(const Arena& a) {
  if (a.last_free_seq == 0) return true;
  StreamState& s = *a.owner;
  if (s.settled_seq < a.last_free_seq && s.marker != kNoFence) {
    FenceSource& fences = backend->fences();
    if (fences.completed(s.marker)) {
      release_fence(s.marker);
      s.marker = kNoFence;
      s.settled_seq = s.marker_seq;
    }
  }
  return s.settled_seq >= a.last_free_seq;
}

// Records a marker on s unless one is already pending.
void DevicePool::Impl::request_marker(StreamState& s) {
  if (s.marker != kNoFence || s.settled_seq >= free_seq) return;
  s.marker = backend->fences().record(device, s.stream);
  s.marker_seq = free_seq;
}

// A marker covering every free so far (replacing an older pending one), for
// a caller about to wait on it. kNoFence if recording failed.
FenceId DevicePool::Impl::fresh_marker(StreamState& s) {
  if (s.marker != kNoFence && s.marker_seq >= free_seq) return s.marker;
  if (s.marker != kNoFence) release_fence(s.marker);
  s.marker = backend->fences().record(device, s.stream);
  s.marker_seq = free_seq;
  return s.marker;
}

// A thread may be waiting on a fence outside the lock; it is given back
// only once no one waits (a released id may be reused or unknown).
void DevicePool::Impl::release_fence(FenceId fence) {
  if (waiters > 0) {
    deferred_fences.push_back(fence);
  } else {
    backend->fences().release(fence);
  }
}

std::string DevicePool::Impl::explain_bad_pointer(uint64_t address) const {
  const std::string where = hex_string(address) + " on device " + std::to_string(device);
  if (address == 0) return "unipool: free of a null pointer on device " + std::to_string(device);
  for (const auto& a : arenas) {
    if (a == nullptr || !a->contains(address)) continue;
    bool pending_block = false;
    blocks.for_each([&](uint32_t, const device::Block& b) {
      if (b.freed && b.address == address) pending_block = true;
    });
    if (pending_block) {
      return "unipool: double free of " + where + " (already freed, waiting for stream fences)";
    }
    return "unipool: " + where + " is not a live block: a double free or an interior pointer (inside the segment at " +
           hex_string(reinterpret_cast<uint64_t>(a->base)) + ")";
  }
  return "unipool: foreign pointer " + where + ": not allocated by this device pool";
}

}  // namespace unipool
