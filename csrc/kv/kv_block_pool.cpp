// unipool kv: handing block ids out and taking them back, each call one lock
// and one pass over the batch (kv_ids.hpp). A refused call changes nothing.
#include <algorithm>
#include <cstdarg>
#include <cstdio>
#include <mutex>

#include "kv/kv_ids.hpp"
#include "kv/kv_state.hpp"

namespace unipool {
namespace {

thread_local char t_error[256] = "";

}  // namespace

void kv_set_error(const char* format, ...) noexcept {
  va_list args;
  va_start(args, format);
  std::vsnprintf(t_error, sizeof t_error, format, args);
  va_end(args);
}

const char* KVPool::last_error() noexcept { return t_error; }

Status KVBlockPool::refuse_alloc(size_t n, size_t available, size_t being_freed) noexcept {
  const State& s = *state_;
  ++state_->failed_allocs;
  kv_set_error("KVBlockPool exhausted: %zu blocks asked, %zu free%s, %llu live, %llu waiting on fences "
               "(of %llu blocks of %llu bytes)%s",
               n, available, being_freed ? " (with the ones being freed)" : "",
               static_cast<unsigned long long>(s.live_count), static_cast<unsigned long long>(s.deferred_count),
               static_cast<unsigned long long>(num_blocks_), static_cast<unsigned long long>(block_bytes_),
               being_freed ? "; nothing was freed" : "");
  return Status::out_of_space;
}

// Names the first id of a refused batch, in batch order, and why. The state
// is the one before the call (release_ids changed nothing). Live ids are
// cleared as they pass so a repeat shows up as not live; they are restored.
template <class Id>
Status KVBlockPool::refuse_free(const Id* ids, size_t n, const char* call) noexcept {
  State& s = *state_;
  size_t i = 0;
  const char* what = nullptr;
  for (; i < n; ++i) {
    const uint64_t id = static_cast<uint64_t>(ids[i]);
    if (id >= num_blocks_) {
      what = "is out of range";
    } else if (!s.is_live(id)) {
      what = s.free.test(id)                                               ? "is not allocated: double free"
             : std::find(ids, ids + i, ids[i]) != ids + i                  ? "appears twice in the batch"
                                                                           : "is already freed (waiting on a fence): double free";
    }
    if (what) break;
    s.live[id / 64] &= ~(uint64_t{1} << (id % 64));
  }
  kv::relive(s, ids, i, /*from_free=*/false);
  if (what) {
    kv_set_error("KVBlockPool.%s: block %lld %s (pool of %llu blocks); nothing was freed", call,
                 static_cast<long long>(ids[i]), what, static_cast<unsigned long long>(num_blocks_));
  } else {  // not reached: release_ids refuses only for one of the reasons above
    kv_set_error("KVBlockPool.%s: batch refused (pool of %llu blocks); nothing was freed", call,
                 static_cast<unsigned long long>(num_blocks_));
  }
  ++s.misuse_errors;
  return Status::not_live;
}

template <class Id>
Status KVBlockPool::alloc_ids(size_t n, Id* out) noexcept {
  State& s = *state_;
  std::lock_guard lock(s.mutex);
  if (n > s.free.count() && s.deferred_count != 0) s.reclaim_completed();
  if (n > s.free.count()) return refuse_alloc(n, s.free.count(), 0);
  kv::take_lowest(s, n, out);
  s.live_count += n;
  s.allocs += n;
  s.peak_live = std::max(s.peak_live, s.live_count);
  return Status::ok;
}

Status KVBlockPool::refuse_fence(FenceId fence) noexcept {
  std::lock_guard lock(state_->mutex);
  ++state_->misuse_errors;
  if (fence == kNoFence) {
    kv_set_error("KVBlockPool.free_after: fence 0 is no fence (did record() fail?); nothing was freed");
  } else {
    kv_set_error("KVBlockPool.free_after: fence %llu is not one of its source's (never recorded, or released); "
                 "nothing was freed",
                 static_cast<unsigned long long>(fence));
  }
  return Status::bad_argument;
}

template <class Id>
Status KVBlockPool::free_ids(const Id* ids, size_t n, FenceSource* source, FenceId fence) noexcept {
  // A fence is checked before the pool takes it: a bad one accepted here
  // would surface in a later collect, far from the caller. Asked outside the
  // lock: the source takes its own.
  if (source && (fence == kNoFence || !kv_fence_known(*source, fence))) return refuse_fence(fence);
  if (source && n == 0) {  // no batch would ever be reclaimed to give it back
    kv_release_fence(*source, fence);
    return Status::ok;
  }
  State& s = *state_;
  std::lock_guard lock(s.mutex);
  if (!kv::release_ids(s, num_blocks_, ids, n, /*to_free=*/source == nullptr)) {
    if (source) kv_release_fence(*source, fence);
    return refuse_free(ids, n, source ? "free_after" : "free");
  }
  if (source) {
    s.batches.push_back({source, fence, s.deferred_ids.size(), n});
    for (size_t i = 0; i < n; ++i) s.deferred_ids.push_back(static_cast<uint32_t>(ids[i]));
    s.deferred_count += n;
  } else {
    s.frees += n;
  }
  s.live_count -= n;
  return Status::ok;
}

template <class FreeId, class OutId>
Status KVBlockPool::deallocate_and_allocate(const FreeId* ids_to_free, size_t n_free, size_t n, OutId* out) noexcept {
  State& s = *state_;
  std::lock_guard lock(s.mutex);
  if (!kv::release_ids(s, num_blocks_, ids_to_free, n_free, /*to_free=*/true)) {
    return refuse_free(ids_to_free, n_free, "free_and_alloc");
  }
  if (n > s.free.count() && s.deferred_count != 0) s.reclaim_completed();
  if (n > s.free.count()) {
    const size_t available = s.free.count();
    kv::relive(s, ids_to_free, n_free, /*from_free=*/true);
    return refuse_alloc(n, available, n_free);
  }
  s.frees += n_free;
  kv::take_lowest(s, n, out);  // the ids to free were all read above: out may alias them
  s.live_count = s.live_count - n_free + n;
  s.allocs += n;
  s.peak_live = std::max(s.peak_live, s.live_count);
  return Status::ok;
}

#define UNIPOOL_KV_FREE_AND_ALLOC(FreeId, OutId) \
  template Status KVBlockPool::deallocate_and_allocate<FreeId, OutId>(const FreeId*, size_t, size_t, OutId*) noexcept;
UNIPOOL_KV_FREE_AND_ALLOC(int64_t, int64_t)
UNIPOOL_KV_FREE_AND_ALLOC(int64_t, int32_t)
UNIPOOL_KV_FREE_AND_ALLOC(int64_t, uint32_t)
UNIPOOL_KV_FREE_AND_ALLOC(int32_t, int64_t)
UNIPOOL_KV_FREE_AND_ALLOC(int32_t, int32_t)
UNIPOOL_KV_FREE_AND_ALLOC(int32_t, uint32_t)
UNIPOOL_KV_FREE_AND_ALLOC(uint32_t, int64_t)
UNIPOOL_KV_FREE_AND_ALLOC(uint32_t, int32_t)
UNIPOOL_KV_FREE_AND_ALLOC(uint32_t, uint32_t)
#undef UNIPOOL_KV_FREE_AND_ALLOC

// The kept batches' ids move down in place (a batch's new start is never
// past its old one), so reclaiming allocates nothing and cannot throw.
size_t KVBlockPool::State::reclaim_completed() noexcept {
  size_t freed = 0;
  size_t kept = 0;
  size_t kept_ids = 0;
  for (size_t k = 0; k < batches.size(); ++k) {
    const DeferredBatch b = batches[k];
    const auto from = deferred_ids.begin() + static_cast<ptrdiff_t>(b.first);
    if (kv_fence_done(*b.source, b.fence)) {
      kv_release_fence(*b.source, b.fence);
      for (auto it = from; it != from + static_cast<ptrdiff_t>(b.count); ++it) {
        free.insert(*it / 64, uint64_t{1} << (*it % 64), 1);
      }
      freed += b.count;
    } else {
      std::copy(from, from + static_cast<ptrdiff_t>(b.count), deferred_ids.begin() + static_cast<ptrdiff_t>(kept_ids));
      batches[kept++] = {b.source, b.fence, kept_ids, b.count};
      kept_ids += b.count;
    }
  }
  batches.resize(kept);
  deferred_ids.resize(kept_ids);
  deferred_count -= freed;
  frees += freed;
  return freed;
}

Status KVBlockPool::allocate(size_t n, uint32_t* out) noexcept { return alloc_ids(n, out); }
Status KVBlockPool::allocate(size_t n, int64_t* out) noexcept { return alloc_ids(n, out); }
Status KVBlockPool::allocate(size_t n, int32_t* out) noexcept { return alloc_ids(n, out); }
Status KVBlockPool::deallocate(const uint32_t* ids, size_t n) noexcept { return free_ids(ids, n, nullptr, kNoFence); }
Status KVBlockPool::deallocate(const int64_t* ids, size_t n) noexcept { return free_ids(ids, n, nullptr, kNoFence); }
Status KVBlockPool::deallocate(const int32_t* ids, size_t n) noexcept { return free_ids(ids, n, nullptr, kNoFence); }

Status KVBlockPool::deallocate_after(const int64_t* ids, size_t n, FenceSource& source, FenceId fence) noexcept {
  return free_ids(ids, n, &source, fence);
}
Status KVBlockPool::deallocate_after(const uint32_t* ids, size_t n, FenceSource& source, FenceId fence) noexcept {
  return free_ids(ids, n, &source, fence);
}

size_t KVBlockPool::collect_deferred() noexcept {
  std::lock_guard lock(state_->mutex);
  return state_->deferred_count ? state_->reclaim_completed() : 0;
}

size_t KVBlockPool::free_blocks() const noexcept {
  std::lock_guard lock(state_->mutex);
  return state_->free.count();
}

bool KVBlockPool::is_live(uint64_t id) const noexcept {
  std::lock_guard lock(state_->mutex);
  return id < num_blocks_ && state_->is_live(id);
}

KVBlockPoolStats KVBlockPool::pool_stats() const noexcept {
  const State& s = *state_;
  std::lock_guard lock(s.mutex);
  KVBlockPoolStats st;
  st.num_blocks = num_blocks_;
  st.block_bytes = block_bytes_;
  st.stride = stride_;
  st.free_blocks = s.free.count();
  st.live_blocks = s.live_count;
  st.deferred_blocks = s.deferred_count;
  st.peak_live_blocks = s.peak_live;
  st.requested_bytes = block_bytes_ * num_blocks_;
  st.reserved_bytes = mapped_bytes_;
  st.pinned_bytes = pinned_bytes_;
  st.allocs = s.allocs;
  st.frees = s.frees;
  st.failed_allocs = s.failed_allocs;
  st.misuse_errors = s.misuse_errors;
  return st;
}

void KVBlockPool::reset_peak_stats() noexcept {
  std::lock_guard lock(state_->mutex);
  state_->peak_live = state_->live_count;
}

}  // namespace unipool
