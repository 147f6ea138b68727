// unipool device pool: checkpoints, and putting the pool back in the state
// of one (what PyTorch's cudagraph trees need of a graph pool; see
// include/unipool/device_checkpoint.hpp).
//
// restore() first works out everything it will do and checks it can, with
// the lock held and the pool untouched: every segment holding a block of the
// checkpoint must still be there (mapped, for an expandable one), or it
// throws. Memory a needed block overlaps may still be waited for by streams:
// a pending free, or a live block to be freed that other streams used. Those
// fences are waited for with the lock released (as empty_cache does), and
// the plan is made again from scratch, since anything may have changed
// meanwhile. Only a plan that needs no wait is carried out, in one lock
// hold: the blocks to free are freed, then the missing ones are carved at
// their addresses with RangeAllocator::allocate_at.
#include <algorithm>
#include <cstdio>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "device/pool_impl.hpp"

namespace unipool {

namespace {

std::string hex(uint64_t v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "0x%llx", static_cast<unsigned long long>(v));
  return buf;
}

// A block of the checkpoint and the arena it goes back into.
struct Needed {
  device::Arena* arena;
  const DeviceCheckpointBlock* block;
  uint64_t offset;
};

bool overlaps(uint64_t a, uint64_t a_size, uint64_t b, uint64_t b_size) {
  return a < b + b_size && b < a + a_size;
}

}  // namespace

DeviceCheckpoint DevicePool::Impl::checkpoint() const {
  std::lock_guard lock(mutex);
  std::unordered_map<uint32_t, std::vector<const device::Block*>> by_arena;
  blocks.for_each([&](uint32_t, const device::Block& b) {
    if (!b.freed) by_arena[b.arena].push_back(&b);
  });
  DeviceCheckpoint cp;
  cp.device = device;
  cp.pool = serial;
  for (const auto& slot : arenas) {
    if (slot == nullptr) continue;
    const Arena& a = *slot;
    if (a.expandable && a.mapped == 0) continue;  // address space only: nothing to come back to
    DeviceCheckpointSegment seg;
    seg.address = reinterpret_cast<uint64_t>(a.base);
    seg.size = a.size;
    seg.expandable = a.expandable;
    seg.small = a.kind == Kind::small;
    auto& live_here = by_arena[a.id];
    std::sort(live_here.begin(), live_here.end(),
              [](const device::Block* x, const device::Block* y) { return x->address < y->address; });
    for (const device::Block* b : live_here) {
      seg.blocks.push_back(DeviceCheckpointBlock{b->address, b->size, b->requested, b->stream, b->other_streams});
    }
    cp.segments.push_back(std::move(seg));
  }
  std::sort(cp.segments.begin(), cp.segments.end(),
            [](const DeviceCheckpointSegment& x, const DeviceCheckpointSegment& y) { return x.address < y.address; });
  return cp;
}

DeviceRestoreResult DevicePool::Impl::restore(const DeviceCheckpoint& cp) {
  if (cp.pool != serial) {
    throw DevicePoolError(Status::bad_argument, "unipool: restore of a checkpoint of another device pool (device " +
                                                    std::to_string(cp.device) + ") into the pool of device " +
                                                    std::to_string(device));
  }
  std::unique_lock lock(mutex);
  // Blocks (address -> handle) whose other streams this restore has waited
  // for: they are freed without new fences.
  std::unordered_map<uint64_t, uint64_t> synchronized;
  std::vector<FenceId> recorded;  // fences this restore recorded itself
  for (;;) {
    // Growth in flight holds carved ranges that are not blocks yet, and
    // granules that are being (un)mapped: let it finish.
    transition_done.wait(lock, [&] {
      return std::none_of(arenas.begin(), arenas.end(), [](const std::unique_ptr<Arena>& a) {
        return a != nullptr && (a->transition || a->unpublished != 0);
      });
    });
    if (pending.total() != 0) poll_pending();

    // 1. Where each block of the checkpoint goes; a segment that is gone is
    //    an error, with nothing changed yet.
    std::vector<Needed> needed;
    std::unordered_map<uint64_t, size_t> needed_at;  // address -> index in needed
    for (const DeviceCheckpointSegment& seg : cp.segments) {
      if (seg.blocks.empty()) continue;  // nothing of it has to come back
      Arena* arena = nullptr;
      for (const auto& slot : arenas) {
        if (slot != nullptr && reinterpret_cast<uint64_t>(slot->base) == seg.address && slot->size == seg.size &&
            slot->expandable == seg.expandable && (slot->kind == Kind::small) == seg.small) {
          arena = slot.get();
          break;
        }
      }
      if (arena == nullptr) {
        throw DevicePoolError(Status::not_live,
                              "unipool: cannot restore the checkpoint on device " + std::to_string(device) +
                                  ": its " + (seg.expandable ? "expandable segment" : "segment") + " at " +
                                  hex(seg.address) + " (" + std::to_string(seg.size) +
                                  " bytes) holding " + std::to_string(seg.blocks.size()) +
                                  " allocated block(s) was given back since (empty_cache or a release threshold)");
      }
      for (const DeviceCheckpointBlock& b : seg.blocks) {
        const uint64_t offset = b.address - seg.address;
        if (b.address < seg.address || offset + b.size > arena->size || b.size == 0) {
          throw DevicePoolError(Status::bad_argument, "unipool: checkpoint block at " + hex(b.address) +
                                                          " does not lie in its segment at " + hex(seg.address));
        }
        if (arena->expandable && !arena->range_mapped(offset, b.size)) {
          throw DevicePoolError(Status::not_live,
                                "unipool: cannot restore the checkpoint on device " + std::to_string(device) +
                                    ": memory under its block at " + hex(b.address) + " (" +
                                    std::to_string(b.size) + " bytes) was unmapped since (empty_cache or a "
                                    "release threshold)");
        }
        needed_at[b.address] = needed.size();
        needed.push_back(Needed{arena, &b, offset});
      }
    }
    auto overlaps_needed = [&](const device::Block& x) {
      for (const Needed& n : needed) {  // O(blocks x needed): a rare call
        if (n.arena->id == x.arena && overlaps(n.offset, n.block->size, x.offset, x.size)) return true;
      }
      return false;
    };

    // 2. Live blocks: kept when the checkpoint has the very same block,
    //    freed otherwise. What a needed block overlaps must not still be in
    //    use on another stream: collect the fences to wait for.
    std::vector<uint32_t> keep, drop;
    std::vector<FenceId> wait;
    std::vector<uint32_t> in_the_way;  // pending frees overlapping a needed block
    blocks.for_each([&](uint32_t id, const device::Block& x) {
      if (x.freed) {
        if (overlaps_needed(x)) in_the_way.push_back(id);
        return;
      }
      const auto it = needed_at.find(x.address);
      if (it != needed_at.end()) {
        const DeviceCheckpointBlock& b = *needed[it->second].block;
        if (needed[it->second].arena->id == x.arena && b.size == x.size && b.stream == x.stream &&
            b.requested == x.requested) {
          keep.push_back(id);
          return;
        }
      }
      drop.push_back(id);
    });
    // A stream's pending frees complete in queue order (poll_pending stops at
    // the first incomplete fence), so wait for every fence up to the last
    // entry of a block in the way.
    bool unrecorded = false;
    for (const device::PendingQueue& q : pending.queues()) {
      size_t last = 0;
      for (size_t i = 0; i < q.entries.size(); ++i) {
        if (std::find(in_the_way.begin(), in_the_way.end(), q.entries[i].block) != in_the_way.end()) last = i + 1;
      }
      for (size_t i = 0; i < last; ++i) {
        // A fence that could not be recorded yet is retried by poll_pending;
        // until then there is nothing to wait on.
        if (q.entries[i].fence == kNoFence) unrecorded = true;
        else wait.push_back(q.entries[i].fence);
      }
    }
    if (unrecorded) {
      throw DevicePoolError(Status::backend_error, "unipool: restore on device " + std::to_string(device) +
                                                       ": a fence guarding memory the checkpoint needs could not "
                                                       "be recorded");
    }
    for (const uint32_t id : drop) {
      const device::Block& x = blocks[id];
      const StreamHandle owner = arenas[x.arena]->owner->stream;
      const bool foreign = x.stream != owner || std::any_of(x.other_streams.begin(), x.other_streams.end(),
                                                            [&](StreamHandle s) { return s != owner; });
      if (!foreign || !overlaps_needed(x)) continue;
      const auto done = synchronized.find(x.address);
      if (done != synchronized.end() && done->second == x.handle) continue;
      auto sync_on = [&](StreamHandle s) {
        const FenceId f = backend->fences().record(device, s);
        if (f == kNoFence) {
          throw DevicePoolError(Status::backend_error, "unipool: restore could not record a fence on device " +
                                                           std::to_string(device) + " to free " + hex(x.address));
        }
        recorded.push_back(f);
        wait.push_back(f);
      };
      if (x.stream != owner) sync_on(x.stream);
      for (const StreamHandle s : x.other_streams) {
        if (s != owner) sync_on(s);
      }
      synchronized[x.address] = x.handle;
    }
    if (!wait.empty()) {
      const bool waited = wait_for(wait, lock);
      for (const FenceId f : recorded) release_fence(f);
      recorded.clear();
      if (waited) ++stats.num_sync_all_streams;
      continue;  // everything may have changed: plan again
    }

    // 3. Carry it out, in this one lock hold.
    DeviceRestoreResult result;
    for (const uint32_t id : keep) {
      device::Block& x = blocks[id];
      const DeviceCheckpointBlock& b = *needed[needed_at.at(x.address)].block;
      for (const StreamHandle s : b.other_streams) {  // the checkpoint's uses too: more fences, never fewer
        if (s != x.stream && std::find(x.other_streams.begin(), x.other_streams.end(), s) == x.other_streams.end()) {
          x.other_streams.push_back(s);
        }
      }
      result.kept.push_back(reinterpret_cast<void*>(x.address));
      needed_at.erase(x.address);
    }
    for (const uint32_t id : drop) {
      const device::Block& x = blocks[id];
      const uint64_t address = x.address;
      const auto done = synchronized.find(address);
      release_block(id, done != synchronized.end() && done->second == x.handle);
      result.freed.push_back(reinterpret_cast<void*>(address));
    }
    for (const Needed& n : needed) {
      if (needed_at.count(n.block->address) == 0) continue;  // kept
      result.allocated.push_back(carve_at(*n.arena, *n.block));
    }
    return result;
  }
}

// Carves checkpoint block b back at its offset in `a` and makes it live.
void* DevicePool::Impl::carve_at(Arena& a, const DeviceCheckpointBlock& b) {
  const uint64_t offset = b.address - reinterpret_cast<uint64_t>(a.base);
  const int64_t split_count = a.split_count(), split_bytes = a.split_bytes();
  const RangeAllocation range = a.ranges.allocate_at(offset, b.size);
  if (!range || a.ranges.allocation_size(range.offset, range.handle) != b.size) {
    // The plan made sure the range is free; reaching this is a bug in it.
    if (range) a.ranges.deallocate(range);
    throw DevicePoolError(Status::bad_argument, "unipool: internal error: restore could not take " +
                                                    std::to_string(b.size) + " bytes at " + hex(b.address) + " (" +
                                                    to_string(range.status) + ")");
  }
  device::stat_change(stats.inactive_split, a.kind, a.split_count() - split_count);
  device::stat_change(stats.inactive_split_bytes, a.kind, a.split_bytes() - split_bytes);
  refit(a);
  const Request r{b.requested, b.size, a.kind, a.whole_only, b.stream};
  void* p = publish(a, range, b.size, r);
  device::Block& block = blocks[live.find(b.address)];
  for (const StreamHandle s : b.other_streams) {
    if (s != b.stream) block.other_streams.push_back(s);
  }
  return p;
}

}  // namespace unipool
