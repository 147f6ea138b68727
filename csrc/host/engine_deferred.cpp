// unipool host: deferred frees (the records: deferred_frees.hpp). While any
// record exists the fast free path steps aside (fast_span_ is 0), so a second
// free of the block is caught; a completed one is freed here and leaves the
// pool's deferred figures.
#include "host/engine.hpp"

namespace unipool::host {

void Engine::refresh_fast_span() noexcept {
  fast_span_.store(deferred_.count() == 0 ? arena0_reserved_ : 0, std::memory_order_seq_cst);
}

bool Engine::is_deferred(const void* p) const noexcept { return deferred_.contains(p); }

Status Engine::free_after(void* p, FenceSource& source, FenceId fence) noexcept {
  if (p == nullptr || fence == kNoFence) {
    return fail(Status::bad_argument, "unipool host pool: free_after needs a block and a fence");
  }
  if (deferred_.count() != 0 && is_deferred(p)) {
    return misuse("free_after of a block already freed with free_after (double free)", p);
  }
  const Located loc = locate(p);
  if (loc.kind == Kind::small) {
    const Status s = check_block(loc.page, p);
    if (s != Status::ok) return s;
  }
  const Footprint held = footprint(p);
  if (held.bytes == 0) {
    return misuse("free_after of a pointer that is not a live block of this pool", p);
  }
  DeferredEntry entry;
  entry.ptr = reinterpret_cast<uintptr_t>(p);
  entry.source = &source;
  entry.fence = fence;
  entry.bytes = held.bytes;
  entry.requested = held.requested;
  {
    LockGuard lock(deferred_.lock());
    if (!deferred_.add_locked(entry)) {
      return fail(Status::out_of_space, "unipool host pool: no memory for the deferred-free table");
    }
    refresh_fast_span();
  }
  counters_.deferred_bytes.add(static_cast<int64_t>(held.bytes));
  counters_.deferred_requested.add(static_cast<int64_t>(held.requested));
  return Status::ok;
}

size_t Engine::collect_deferred() noexcept {
  size_t total = 0;
  for (;;) {
    constexpr uint32_t kBatch = 64;
    DeferredEntry ready[kBatch];
    uint32_t n = 0;
    {
      LockGuard lock(deferred_.lock());
      if (deferred_.count() == 0) return total;
      n = deferred_.take_completed_locked(ready, kBatch);
      refresh_fast_span();
    }
    for (uint32_t i = 0; i < n; ++i) {
      try {
        ready[i].source->release(ready[i].fence);
      } catch (...) {
      }
      counters_.deferred_bytes.add(-static_cast<int64_t>(ready[i].bytes));
      counters_.deferred_requested.add(-static_cast<int64_t>(ready[i].requested));
      free_located(reinterpret_cast<void*>(ready[i].ptr));
    }
    total += n;
    if (n < kBatch) return total;
  }
}

void Engine::maybe_collect_deferred() noexcept {
  if (deferred_.due()) collect_deferred();
}

}  // namespace unipool::host
