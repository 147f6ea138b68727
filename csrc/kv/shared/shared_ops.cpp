// unipool kv shared: handing blocks out, taking them back, handing them
// over. Each call is one lock; the index moves with kv_ids.hpp's word-at-a-
// time code, then the owners change under a journal entry (shared_state.hpp).
#include <algorithm>

#include "kv/kv_ids.hpp"
#include "kv/kv_state.hpp"
#include "kv/shared/shared_members.hpp"
#include "kv/shared/shared_state.hpp"

namespace unipool {

using kv_shared::Counters;
using kv_shared::Lock;
namespace owner = kv_shared::owner;

namespace kv_shared {

bool attached_here(const Local& l, const char* call) noexcept {
  if (l.fork_generation == fork_generation()) return true;
  kv_set_error(
      "SharedKVBlockPool.%s: this pool was attached by the parent of this forked process; "
      "attach it again here",
      call);
  return false;
}

}  // namespace kv_shared

namespace {

Status refuse_alloc(SharedKVBlockPool::Local& l, size_t n, size_t being_freed) noexcept {
  const kv_shared::Header& h = *l.header;
  ++l.counters().failed_allocs;
  if (h.closed.load(std::memory_order_acquire)) {
    kv_set_error("SharedKVBlockPool: the pool is closed (its creator, which chose lifetime=creator, exited)");
    return Status::out_of_space;
  }
  kv_set_error(
      "SharedKVBlockPool exhausted: %zu blocks asked, %llu free%s, %llu live, %llu waiting on fences "
      "(of %llu blocks of %llu bytes)%s",
      n, static_cast<unsigned long long>(l.index.free.count()), being_freed ? " (with the ones being freed)" : "",
      static_cast<unsigned long long>(h.counters.live), static_cast<unsigned long long>(h.counters.deferred),
      static_cast<unsigned long long>(h.num_blocks), static_cast<unsigned long long>(h.block_bytes),
      being_freed ? "; nothing was freed" : "");
  return Status::out_of_space;
}

// Names the first id of a refused free, by the owners (release_ids changed
// nothing). Only the ids before it that passed are live and unrepeated.
template <class Id>
Status refuse_free(SharedKVBlockPool::Local& l, const Id* ids, size_t n, const char* call) noexcept {
  ++l.counters().misuse_errors;
  for (size_t i = 0; i < n; ++i) {
    const uint64_t id = static_cast<uint64_t>(ids[i]);
    const char* what = nullptr;
    if (id >= l.num_blocks()) {
      what = "is out of range";
    } else if (owner::is_free(l.owners[id])) {
      what = "is not allocated: double free";
    } else if (owner::is_deferred(l.owners[id])) {
      what = "is already freed (waiting on a fence): double free";
    } else if (std::find(ids, ids + i, ids[i]) != ids + i) {
      what = "appears twice in the batch";
    }
    if (!what) continue;
    kv_set_error("SharedKVBlockPool.%s: block %lld %s (pool of %llu blocks); nothing was freed", call,
                 static_cast<long long>(ids[i]), what, static_cast<unsigned long long>(l.num_blocks()));
    return Status::not_live;
  }
  kv_set_error("SharedKVBlockPool.%s: batch refused; nothing was freed", call);
  return Status::not_live;
}

// Frees completed deferred batches of this process; lock held.
size_t collect_ready(SharedKVBlockPool::Local& l) noexcept {
  size_t freed = 0;
  auto done = [&](SharedKVBlockPool::Local::Batch& b) {
    if (!kv_fence_done(*b.source, b.fence)) return false;
    kv_release_fence(*b.source, b.fence);
    const size_t n = b.ids.size();
    for (uint32_t id : b.ids) l.index.free.insert(id / 64, uint64_t{1} << (id % 64), 1);
    kv_shared::add_group(l, b.ids.data(), n, owner::kFree);
    Counters after = l.counters();
    after.deferred -= n;
    after.frees += n;
    kv_shared::commit(l, after);
    freed += n;
    return true;
  };
  l.batches.erase(std::remove_if(l.batches.begin(), l.batches.end(), done), l.batches.end());
  return freed;
}

// Lock held: makes room for n blocks if it can (completed fences, dead
// members), without an open journal entry.
void make_room(SharedKVBlockPool::Local& l, size_t n) noexcept {
  if (n <= l.index.free.count()) return;
  collect_ready(l);
  if (n > l.index.free.count()) kv_shared::reclaim_dead_members(l);
}

template <class Id>
Status free_after_ids(SharedKVBlockPool::Local& l, const Id* ids, size_t n, FenceSource& source,
                      FenceId fence) noexcept {
  if (!kv_shared::attached_here(l, "free_after")) return Status::bad_argument;
  if (fence == kNoFence || !kv_fence_known(source, fence)) {
    kv_set_error(
        "SharedKVBlockPool.free_after: fence %llu is not one of its source's (0, never recorded, or "
        "released); nothing was freed",
        static_cast<unsigned long long>(fence));
    return Status::bad_argument;
  }
  if (n == 0) {  // no batch would ever be reclaimed to give it back
    kv_release_fence(source, fence);
    return Status::ok;
  }
  Lock lock(l);
  if (!kv::release_ids(l.index, l.num_blocks(), ids, n, /*to_free=*/false)) {
    kv_release_fence(source, fence);
    return refuse_free(l, ids, n, "free_after");
  }
  SharedKVBlockPool::Local::Batch batch{&source, fence, std::vector<uint32_t>(n)};
  for (size_t i = 0; i < n; ++i) batch.ids[i] = static_cast<uint32_t>(ids[i]);
  l.batches.push_back(std::move(batch));
  kv_shared::add_group(l, ids, n, owner::live(l.member) | owner::kDeferred);
  Counters after = l.counters();
  after.live -= n;
  after.deferred += n;
  kv_shared::commit(l, after);
  return Status::ok;
}

template <class Id>
Status shared_alloc(SharedKVBlockPool::Local& l, size_t n, Id* out) noexcept {
  if (!kv_shared::attached_here(l, "allocate")) return Status::bad_argument;
  Lock lock(l);
  make_room(l, n);
  if (l.header->closed.load(std::memory_order_acquire) || n > l.index.free.count()) return refuse_alloc(l, n, 0);
  kv::take_lowest(l.index, n, out);
  kv_shared::add_group(l, out, n, owner::live(l.member));
  Counters after = l.counters();
  after.live += n;
  after.allocs += n;
  after.peak_live = std::max(after.peak_live, after.live);
  kv_shared::commit(l, after);
  return Status::ok;
}

template <class Id>
Status shared_free(SharedKVBlockPool::Local& l, const Id* ids, size_t n) noexcept {
  if (!kv_shared::attached_here(l, "free")) return Status::bad_argument;
  Lock lock(l);
  if (!kv::release_ids(l.index, l.num_blocks(), ids, n, /*to_free=*/true)) return refuse_free(l, ids, n, "free");
  kv_shared::add_group(l, ids, n, owner::kFree);
  Counters after = l.counters();
  after.live -= n;
  after.frees += n;
  kv_shared::commit(l, after);
  return Status::ok;
}

}  // namespace

template <class FreeId, class OutId>
Status SharedKVBlockPool::deallocate_and_allocate(const FreeId* ids_to_free, size_t n_free, size_t n,
                                                  OutId* out) noexcept {
  Local& l = *local_;
  if (!kv_shared::attached_here(l, "free_and_alloc")) return Status::bad_argument;
  Lock lock(l);
  if (n > n_free) make_room(l, n - n_free);
  if (!kv::release_ids(l.index, l.num_blocks(), ids_to_free, n_free, /*to_free=*/true)) {
    return refuse_free(l, ids_to_free, n_free, "free_and_alloc");
  }
  if (l.header->closed.load(std::memory_order_acquire) || n > l.index.free.count()) {
    kv::relive(l.index, ids_to_free, n_free, /*from_free=*/true);
    return refuse_alloc(l, n, n_free);
  }
  kv_shared::add_group(l, ids_to_free, n_free, owner::kFree);
  kv::take_lowest(l.index, n, out);  // the ids to free were all read above: out may alias them
  kv_shared::add_group(l, out, n, owner::live(l.member));
  Counters after = l.counters();
  after.live = after.live - n_free + n;
  after.frees += n_free;
  after.allocs += n;
  after.peak_live = std::max(after.peak_live, after.live);
  kv_shared::commit(l, after);
  return Status::ok;
}

#define UNIPOOL_SHARED_FREE_AND_ALLOC(FreeId, OutId)                                                       \
  template Status SharedKVBlockPool::deallocate_and_allocate<FreeId, OutId>(const FreeId*, size_t, size_t, \
                                                                            OutId*) noexcept;
UNIPOOL_SHARED_FREE_AND_ALLOC(int64_t, int64_t)
UNIPOOL_SHARED_FREE_AND_ALLOC(int64_t, int32_t)
UNIPOOL_SHARED_FREE_AND_ALLOC(int64_t, uint32_t)
UNIPOOL_SHARED_FREE_AND_ALLOC(int32_t, int64_t)
UNIPOOL_SHARED_FREE_AND_ALLOC(int32_t, int32_t)
UNIPOOL_SHARED_FREE_AND_ALLOC(int32_t, uint32_t)
UNIPOOL_SHARED_FREE_AND_ALLOC(uint32_t, int64_t)
UNIPOOL_SHARED_FREE_AND_ALLOC(uint32_t, int32_t)
UNIPOOL_SHARED_FREE_AND_ALLOC(uint32_t, uint32_t)
#undef UNIPOOL_SHARED_FREE_AND_ALLOC

Status SharedKVBlockPool::deallocate_after(const int64_t* ids, size_t n, FenceSource& source, FenceId fence) noexcept {
  return free_after_ids(*local_, ids, n, source, fence);
}
Status SharedKVBlockPool::deallocate_after(const uint32_t* ids, size_t n, FenceSource& source, FenceId fence) noexcept {
  return free_after_ids(*local_, ids, n, source, fence);
}

size_t SharedKVBlockPool::collect_deferred() noexcept {
  if (!kv_shared::attached_here(*local_, "collect_deferred")) return 0;
  Lock lock(*local_);
  return collect_ready(*local_);
}

Status SharedKVBlockPool::allocate(size_t n, uint32_t* out) noexcept { return shared_alloc(*local_, n, out); }
Status SharedKVBlockPool::allocate(size_t n, int64_t* out) noexcept { return shared_alloc(*local_, n, out); }
Status SharedKVBlockPool::allocate(size_t n, int32_t* out) noexcept { return shared_alloc(*local_, n, out); }
Status SharedKVBlockPool::deallocate(const uint32_t* ids, size_t n) noexcept { return shared_free(*local_, ids, n); }
Status SharedKVBlockPool::deallocate(const int64_t* ids, size_t n) noexcept { return shared_free(*local_, ids, n); }
Status SharedKVBlockPool::deallocate(const int32_t* ids, size_t n) noexcept { return shared_free(*local_, ids, n); }

}  // namespace unipool
