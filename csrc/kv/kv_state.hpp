// unipool kv: the bookkeeping of a KVBlockPool behind its one lock.
//
// A block is in exactly one of three states: free (its bit is set in `free`),
// live (set in `live`) or deferred (in neither; its id sits in a deferred
// batch until the batch's fence completes). Two bitmaps instead of a byte per
// block let alloc and free work a 64-bit word (64 blocks) at a time.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "kv/kv_id_bitmap.hpp"
#include "kv/kv_pinning.hpp"
#include "kv/kv_spin_lock.hpp"
#include "unipool/fence.hpp"
#include "unipool/kv_block_pool.hpp"

namespace unipool {

struct KVBlockPool::State {
  // A batch freed with free_after: its ids sit in `deferred_ids` from `first`.
  struct DeferredBatch {
    FenceSource* source;
    FenceId fence;
    size_t first;
    size_t count;
  };

  mutable KVSpinLock mutex;
  KVIdBitmap free;                   // free blocks, with summary levels to find the lowest
  std::vector<uint64_t> live;        // one bit per block: handed out, not freed
  std::vector<DeferredBatch> batches;
  std::vector<uint32_t> deferred_ids;
  uint64_t live_count = 0, peak_live = 0, deferred_count = 0;
  uint64_t allocs = 0, frees = 0, failed_allocs = 0, misuse_errors = 0;

  KVPinning pinning;

  bool is_live(uint64_t id) const noexcept { return (live[id / 64] >> (id % 64)) & 1; }
  // Frees completed deferred batches; lock held. Returns blocks freed.
  size_t reclaim_completed() noexcept;
};

// A fence source throws for a fence it does not know (never recorded, or
// released); the pool's calls are noexcept, so every call into a source goes
// through these. free_after asks first and refuses such a fence; one that
// throws later has been lost by its source: nothing is left to wait for, so
// it counts as completed (as in the host pool).
inline bool kv_fence_known(FenceSource& source, FenceId fence) noexcept {
  try {
    source.completed(fence);
    return true;
  } catch (...) {
    return false;
  }
}

inline bool kv_fence_done(FenceSource& source, FenceId fence) noexcept {
  try {
    return source.completed(fence);
  } catch (...) {
    return true;
  }
}

inline void kv_release_fence(FenceSource& source, FenceId fence) noexcept {
  try {
    source.release(fence);
  } catch (...) {  // lost already: nothing to give back
  }
}

// Sets this thread's KVBlockPool::last_error() (printf-style).
void kv_set_error(const char* format, ...) noexcept __attribute__((format(printf, 1, 2)));

}  // namespace unipool
