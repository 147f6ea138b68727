// unipool kv: handing block ids out and taking them back. Both directions are
// one lock and one pass over the batch (free: a check pass, then a commit
// pass, so a refused batch changes nothing).
#include <cstdarg>
#include <cstdio>

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

const char* KVBlockPool::last_error() noexcept { return t_error; }

template <class Id>
Status KVBlockPool::alloc_ids(size_t n, Id* out) noexcept {
  State& s = *state_;
  std::lock_guard lock(s.mutex);
  if (n > s.free_ids.size() && s.deferred_count != 0) s.reclaim_completed();
  const size_t available = s.free_ids.size();
  if (n > available) {
    ++s.failed_allocs;
    kv_set_error("KVBlockPool exhausted: %zu blocks asked, %zu free, %llu live, %llu waiting on fences "
                 "(of %llu blocks of %llu bytes)",
                 n, available, static_cast<unsigned long long>(s.live_count),
                 static_cast<unsigned long long>(s.deferred_count), static_cast<unsigned long long>(num_blocks_),
                 static_cast<unsigned long long>(block_bytes_));
    return Status::out_of_space;
  }
  const uint32_t* top = s.free_ids.data() + available;
  uint8_t* state = s.block_state.data();
  for (size_t i = 0; i < n; ++i) {
    const uint32_t id = top[-1 - static_cast<ptrdiff_t>(i)];
    state[id] = State::live;
    out[i] = static_cast<Id>(id);
  }
  s.free_ids.resize(available - n);
  s.live_count += n;
  s.allocs += n;
  if (s.live_count > s.peak_live) s.peak_live = s.live_count;
  return Status::ok;
}

template <class Id>
Status KVBlockPool::free_ids(const Id* ids, size_t n, FenceSource* source, FenceId fence) noexcept {
  State& s = *state_;
  std::lock_guard lock(s.mutex);
  uint8_t* state = s.block_state.data();
  // Check pass: mark each id `freeing`, so a repeat in the batch is refused too.
  for (size_t i = 0; i < n; ++i) {
    const int64_t id = static_cast<int64_t>(ids[i]);
    const bool in_range = id >= 0 && static_cast<uint64_t>(id) < num_blocks_;
    if (!in_range || state[id] != State::live) {
      const char* what = !in_range                          ? "is out of range"
                         : state[id] == State::freeing      ? "appears twice in the batch"
                         : state[id] == State::deferred     ? "is already freed (waiting on a fence): double free"
                                                            : "is not allocated: double free";
      kv_set_error("KVBlockPool.free: block %lld %s (pool of %llu blocks); nothing was freed",
                   static_cast<long long>(id), what, static_cast<unsigned long long>(num_blocks_));
      for (size_t j = 0; j < i; ++j) state[ids[j]] = State::live;
      ++s.misuse_errors;
      if (source) source->release(fence);
      return Status::not_live;
    }
    state[id] = State::freeing;
  }
  if (source) {
    s.batches.push_back({source, fence, s.deferred_ids.size(), n});
    for (size_t i = 0; i < n; ++i) {
      state[ids[i]] = State::deferred;
      s.deferred_ids.push_back(static_cast<uint32_t>(ids[i]));
    }
    s.deferred_count += n;
  } else {
    for (size_t i = 0; i < n; ++i) {
      state[ids[i]] = State::free_block;
      s.free_ids.push_back(static_cast<uint32_t>(ids[i]));
    }
    s.frees += n;
  }
  s.live_count -= n;
  return Status::ok;
}

size_t KVBlockPool::State::reclaim_completed() {
  size_t freed = 0;
  size_t kept = 0;
  std::vector<uint32_t> keep_ids;
  for (DeferredBatch& b : batches) {
    if (b.source->completed(b.fence)) {
      b.source->release(b.fence);
      for (size_t i = 0; i < b.count; ++i) {
        const uint32_t id = deferred_ids[b.first + i];
        block_state[id] = free_block;
        free_ids.push_back(id);
      }
      freed += b.count;
    } else {
      const size_t first = keep_ids.size();
      keep_ids.insert(keep_ids.end(), deferred_ids.begin() + static_cast<ptrdiff_t>(b.first),
                      deferred_ids.begin() + static_cast<ptrdiff_t>(b.first + b.count));
      batches[kept++] = {b.source, b.fence, first, b.count};
    }
  }
  batches.resize(kept);
  deferred_ids.swap(keep_ids);
  deferred_count -= freed;
  frees += freed;
  return freed;
}

Status KVBlockPool::alloc(size_t n, uint32_t* out) noexcept { return alloc_ids(n, out); }
Status KVBlockPool::alloc(size_t n, int64_t* out) noexcept { return alloc_ids(n, out); }
Status KVBlockPool::alloc(size_t n, int32_t* out) noexcept { return alloc_ids(n, out); }
Status KVBlockPool::free(const uint32_t* ids, size_t n) noexcept { return free_ids(ids, n, nullptr, kNoFence); }
Status KVBlockPool::free(const int64_t* ids, size_t n) noexcept { return free_ids(ids, n, nullptr, kNoFence); }
Status KVBlockPool::free(const int32_t* ids, size_t n) noexcept { return free_ids(ids, n, nullptr, kNoFence); }

Status KVBlockPool::free_after(const int64_t* ids, size_t n, FenceSource& source, FenceId fence) noexcept {
  return free_ids(ids, n, &source, fence);
}
Status KVBlockPool::free_after(const uint32_t* ids, size_t n, FenceSource& source, FenceId fence) noexcept {
  return free_ids(ids, n, &source, fence);
}

size_t KVBlockPool::collect_deferred() noexcept {
  std::lock_guard lock(state_->mutex);
  return state_->deferred_count ? state_->reclaim_completed() : 0;
}

size_t KVBlockPool::free_blocks() const noexcept {
  std::lock_guard lock(state_->mutex);
  return state_->free_ids.size();
}

bool KVBlockPool::is_live(uint64_t id) const noexcept {
  std::lock_guard lock(state_->mutex);
  return id < num_blocks_ && state_->block_state[id] == State::live;
}

KVBlockPoolStats KVBlockPool::stats() const noexcept {
  const State& s = *state_;
  std::lock_guard lock(s.mutex);
  KVBlockPoolStats st;
  st.num_blocks = num_blocks_;
  st.block_bytes = block_bytes_;
  st.stride = stride_;
  st.free_blocks = s.free_ids.size();
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

void KVBlockPool::reset_peaks() noexcept {
  std::lock_guard lock(state_->mutex);
  state_->peak_live = state_->live_count;
}

}  // namespace unipool
