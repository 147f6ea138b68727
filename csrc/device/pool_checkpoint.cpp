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

#include "core/number_text.hpp"
#include "device/pool_impl.hpp"

namespace unipool {

namespace {

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

namespace {

// One restore: the plan (made again after every wait, since anything may
// change while the lock is released) and what survives between attempts.
class Restore {
 public:
  Restore(DevicePool::Impl& pool, const DeviceCheckpoint& cp) : pool_(pool), cp_(cp) {}

  DeviceRestoreResult run(std::unique_lock<std::mutex>& lock) {
    for (;;) {
      wait_for_growth(lock);
      plan();
      if (!wait_.empty()) {
        const bool waited = pool_.wait_for(wait_, lock);
        for (const FenceId f : recorded_) pool_.release_fence(f);
        recorded_.clear();
        if (waited) ++pool_.stats.num_sync_all_streams;
        continue;  // everything may have changed: plan again
      }
      return carry_out();
    }
  }

 private:
  using Arena = device::Arena;

  // Growth in flight holds carved ranges that are not blocks yet, and
  // granules that are being (un)mapped: let it finish.
  void wait_for_growth(std::unique_lock<std::mutex>& lock) {
    pool_.transition_done.wait(lock, [&] {
      return std::none_of(pool_.arenas.begin(), pool_.arenas.end(), [](const std::unique_ptr<Arena>& a) {
        return a != nullptr && (a->transition || a->unpublished != 0);
      });
    });
    if (pool_.pending.total() != 0) pool_.poll_pending();
  }

  void plan() {
    needed_.clear();
    needed_at_.clear();
    keep_.clear();
    drop_.clear();
    wait_.clear();
    for (const DeviceCheckpointSegment& seg : cp_.segments) {
      if (!seg.blocks.empty()) place(seg);  // a segment with no block has nothing to come back
    }
    std::vector<uint32_t> in_the_way = sort_live_blocks();
    wait_for_pending_frees(in_the_way);
    synchronize_dropped_blocks();
  }

  std::string where() const {
    return "unipool: cannot restore the checkpoint on device " + std::to_string(pool_.device);
  }

  Arena* arena_of(const DeviceCheckpointSegment& seg) const {
    for (const auto& slot : pool_.arenas) {
      if (slot != nullptr && reinterpret_cast<uint64_t>(slot->base) == seg.address && slot->size == seg.size &&
          slot->expandable == seg.expandable && (slot->kind == device::Kind::small) == seg.small) {
        return slot.get();
      }
    }
    return nullptr;
  }

  // 1. Where each block of the segment goes; a segment or mapping that is
  //    gone is an error, with nothing changed yet.
  void place(const DeviceCheckpointSegment& seg) {
    Arena* arena = arena_of(seg);
    if (arena == nullptr) {
      throw DevicePoolError(Status::not_live, where() + ": its " + (seg.expandable ? "expandable segment" : "segment") +
                                                  " at " + hex_string(seg.address) + " (" + std::to_string(seg.size) +
                                                  " bytes) holding " + std::to_string(seg.blocks.size()) +
                                                  " allocated block(s) was given back since (empty_cache or a "
                                                  "release threshold)");
    }
    for (const DeviceCheckpointBlock& b : seg.blocks) {
      const uint64_t offset = b.address - seg.address;
      if (b.address < seg.address || offset + b.size > arena->size || b.size == 0) {
        throw DevicePoolError(Status::bad_argument, "unipool: checkpoint block at " + hex_string(b.address) +
                                                        " does not lie in its segment at " + hex_string(seg.address));
      }
      if (arena->expandable && !arena->range_mapped(offset, b.size)) {
        throw DevicePoolError(Status::not_live, where() + ": memory under its block at " + hex_string(b.address) +
                                                    " (" + std::to_string(b.size) +
                                                    " bytes) was unmapped since (empty_cache or a release threshold)");
      }
      needed_at_[b.address] = needed_.size();
      needed_.push_back(Needed{arena, &b, offset});
    }
  }

  bool overlaps_needed(const device::Block& x) const {
    for (const Needed& n : needed_) {  // O(blocks x needed): a rare call
      if (n.arena->id == x.arena && overlaps(n.offset, n.block->size, x.offset, x.size)) return true;
    }
    return false;
  }

  // 2. Live blocks are kept when the checkpoint has the very same block and
  //    dropped otherwise. Returns the pending frees that overlap a needed block.
  std::vector<uint32_t> sort_live_blocks() {
    std::vector<uint32_t> in_the_way;
    pool_.blocks.for_each([&](uint32_t id, const device::Block& x) {
      if (x.freed) {
        if (overlaps_needed(x)) in_the_way.push_back(id);
        return;
      }
      const auto it = needed_at_.find(x.address);
      if (it != needed_at_.end()) {
        const DeviceCheckpointBlock& b = *needed_[it->second].block;
        if (needed_[it->second].arena->id == x.arena && b.size == x.size && b.stream == x.stream &&
            b.requested == x.requested) {
          keep_.push_back(id);
          return;
        }
      }
      drop_.push_back(id);
    });
    return in_the_way;
  }

  // A stream's pending frees complete in queue order (poll_pending stops at
  // the first incomplete fence), so wait for every fence up to the last
  // entry of a block in the way.
  void wait_for_pending_frees(const std::vector<uint32_t>& in_the_way) {
    for (const device::PendingQueue& q : pool_.pending.queues()) {
      size_t last = 0;
      for (size_t i = 0; i < q.entries.size(); ++i) {
        if (std::find(in_the_way.begin(), in_the_way.end(), q.entries[i].block) != in_the_way.end()) last = i + 1;
      }
      for (size_t i = 0; i < last; ++i) {
        // A fence that could not be recorded yet is retried by poll_pending;
        // until then there is nothing to wait on.
        if (q.entries[i].fence == kNoFence) {
          throw DevicePoolError(Status::backend_error, where() +
                                                           ": a fence guarding memory the checkpoint needs "
                                                           "could not be recorded");
        }
        wait_.push_back(q.entries[i].fence);
      }
    }
  }

  // A dropped block in the way of a needed one that other streams used: its
  // memory is free for the checkpoint only once those streams are done.
  void synchronize_dropped_blocks() {
    for (const uint32_t id : drop_) {
      const device::Block& x = pool_.blocks[id];
      const StreamHandle owner = pool_.arenas[x.arena]->owner->stream;
      const bool foreign = x.stream != owner || std::any_of(x.other_streams.begin(), x.other_streams.end(),
                                                            [&](StreamHandle s) { return s != owner; });
      if (!foreign || !overlaps_needed(x) || synchronized(x)) continue;
      if (x.stream != owner) sync_on(x, x.stream);
      for (const StreamHandle s : x.other_streams) {
        if (s != owner) sync_on(x, s);
      }
      synchronized_[x.address] = x.handle;
    }
  }

  bool synchronized(const device::Block& x) const {
    const auto done = synchronized_.find(x.address);
    return done != synchronized_.end() && done->second == x.handle;
  }

  void sync_on(const device::Block& x, StreamHandle s) {
    const FenceId f = pool_.backend->fences().record(pool_.device, s);
    if (f == kNoFence) {
      throw DevicePoolError(Status::backend_error, "unipool: restore could not record a fence on device " +
                                                       std::to_string(pool_.device) + " to free " +
                                                       hex_string(x.address));
    }
    recorded_.push_back(f);
    wait_.push_back(f);
  }

  // 3. Carry the plan out, in this one lock hold.
  DeviceRestoreResult carry_out() {
    DeviceRestoreResult result;
    for (const uint32_t id : keep_) {
      device::Block& x = pool_.blocks[id];
      const DeviceCheckpointBlock& b = *needed_[needed_at_.at(x.address)].block;
      for (const StreamHandle s : b.other_streams) {  // the checkpoint's uses too: more fences, never fewer
        if (s != x.stream && std::find(x.other_streams.begin(), x.other_streams.end(), s) == x.other_streams.end()) {
          x.other_streams.push_back(s);
        }
      }
      result.kept.push_back(reinterpret_cast<void*>(x.address));
      needed_at_.erase(x.address);
    }
    for (const uint32_t id : drop_) {
      const device::Block& x = pool_.blocks[id];
      const uint64_t address = x.address;
      pool_.release_block(id, synchronized(x));
      result.freed.push_back(reinterpret_cast<void*>(address));
    }
    for (const Needed& n : needed_) {
      if (needed_at_.count(n.block->address) == 0) continue;  // kept
      result.allocated.push_back(pool_.carve_at(*n.arena, *n.block));
    }
    return result;
  }

  DevicePool::Impl& pool_;
  const DeviceCheckpoint& cp_;
  std::vector<Needed> needed_;
  std::unordered_map<uint64_t, size_t> needed_at_;  // address -> index in needed_
  std::vector<uint32_t> keep_, drop_;
  std::vector<FenceId> wait_;
  std::vector<FenceId> recorded_;  // fences this restore recorded itself
  // Blocks (address -> handle) whose other streams this restore has waited
  // for: they are freed without new fences.
  std::unordered_map<uint64_t, uint64_t> synchronized_;
};

}  // namespace

DeviceRestoreResult DevicePool::Impl::restore(const DeviceCheckpoint& cp) {
  if (cp.pool != serial) {
    throw DevicePoolError(Status::bad_argument, "unipool: restore of a checkpoint of another device pool (device " +
                                                    std::to_string(cp.device) + ") into the pool of device " +
                                                    std::to_string(device));
  }
  std::unique_lock lock(mutex);
  if (asleep_mask != 0) {
    throw DevicePoolError(Status::asleep, "unipool: restore of device " + std::to_string(device) +
                                              "'s pool while a tag is asleep: wake it first");
  }
  return Restore(*this, cp).run(lock);
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
                                                    std::to_string(b.size) + " bytes at " + hex_string(b.address) +
                                                    " (" + to_string(range.status) + ")");
  }
  device::stat_change(stats.inactive_split, a.kind, a.split_count() - split_count);
  device::stat_change(stats.inactive_split_bytes, a.kind, a.split_bytes() - split_bytes);
  refit(a);
  const Request r{b.requested, b.size, a.kind, a.whole_only, b.stream, a.tag};
  void* p = publish(a, range, b.size, r);
  device::Block& block = blocks[live.find(b.address)];
  for (const StreamHandle s : b.other_streams) {
    if (s != b.stream) block.other_streams.push_back(s);
  }
  return p;
}

}  // namespace unipool
