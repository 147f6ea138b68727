#include "host/deferred_frees.hpp"

#include "unipool/fence.hpp"

namespace unipool::host {

bool DeferredFrees::add_locked(const DeferredEntry& e) noexcept {
  if (!table_.insert(e)) return false;
  count_.fetch_add(1, std::memory_order_relaxed);
  return true;
}

uint32_t DeferredFrees::take_completed_locked(DeferredEntry* out, uint32_t max) noexcept {
  uint32_t n = 0;
  table_.erase_if([&](const DeferredEntry& e) {
    if (n == max) return false;
    bool done = true;
    try {
      done = e.source->completed(e.fence);
    } catch (...) {
    }
    if (done) out[n++] = e;
    return done;
  });
  count_.fetch_sub(n, std::memory_order_relaxed);
  return n;
}

bool DeferredFrees::contains(const void* p) const noexcept {
  LockGuard guard(lock_);
  return table_.find(reinterpret_cast<uintptr_t>(p)) != nullptr;
}

bool DeferredFrees::due() noexcept { return count() != 0 && ticks_.fetch_add(1, std::memory_order_relaxed) % 64 == 0; }

DeferredTally DeferredFrees::tally() const noexcept {
  LockGuard guard(lock_);
  const auto live = table_.tally([](const DeferredEntry& e) { return e.bytes; });
  return DeferredTally{live.entries, live.bytes};
}

}  // namespace unipool::host
