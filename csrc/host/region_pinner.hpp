// unipool host: a pinner that keeps the book of what is pinned and tells the
// pool's region hooks (HostPool::set_region_hooks) as pieces come and go:
// what a transfer engine (NIXL, UCX, ibverbs) registers. Like HistoryPinner,
// it wraps the one pinner that an arena's growth, the pinning thread and the
// huge mappings all call, so no pinning site needs a hook of its own.
//
// Invariant: `live_` holds exactly the pieces pinned and not yet unpinned,
// and the hooks installed now have been told each of them once by on_map.
// Both change under `lock_`, so a piece pinned while hooks are installed is
// reported exactly once, by the replay or by pin(), never by both.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>

#include "backend/host_pinner.hpp"
#include "host/lock.hpp"
#include "host/thread_state.hpp"
#include "unipool/host_pool.hpp"

namespace unipool::host {

class RegionPinner final : public backend::HostPinner {
 public:
  explicit RegionPinner(std::unique_ptr<backend::HostPinner> inner) : inner_(std::move(inner)) {}

  const char* name() const noexcept override { return inner_->name(); }
  bool available() override { return inner_->available(); }
  const char* unavailable_reason() const noexcept override { return inner_->unavailable_reason(); }

  // The hooks run inside InternalScope: what they allocate under a malloc
  // replacement comes from the side, never from this pool, whose locks (and
  // lock_) may be held here.
  BackendStatus pin(void* ptr, uint64_t bytes) override {
    const BackendStatus s = inner_->pin(ptr, bytes);
    if (!s.is_ok()) return s;
    LockGuard lock(lock_);
    InternalScope internal;
    try {
      live_[reinterpret_cast<uintptr_t>(ptr)] = bytes;
    } catch (...) {
      return s;  // no memory for the book: the piece goes unreported, before and after
    }
    tell(hooks_.on_map, ptr, bytes);
    return s;
  }

  BackendStatus unpin(void* ptr) override {
    {
      LockGuard lock(lock_);
      InternalScope internal;
      const auto it = live_.find(reinterpret_cast<uintptr_t>(ptr));
      if (it != live_.end()) {
        tell(hooks_.before_unmap, ptr, it->second);
        live_.erase(it);
      }
    }
    return inner_->unpin(ptr);
  }

  // Installs `hooks` and replays every live piece to their on_map.
  void set_hooks(HostRegionHooks hooks) {
    LockGuard lock(lock_);
    InternalScope internal;
    hooks_ = std::move(hooks);
    if (!hooks_.on_map) return;
    for (const auto& [address, bytes] : live_) tell(hooks_.on_map, reinterpret_cast<void*>(address), bytes);
  }

  // fork(): held across it by Engine::fork_prepare / fork_release.
  void fork_lock() noexcept UNIPOOL_ACQUIRE(lock_) { lock_.lock(); }
  void fork_unlock() noexcept UNIPOOL_RELEASE(lock_) { lock_.unlock(); }

 private:
  // A hook that throws must not break the pool's books (its callers are
  // noexcept): what it failed at is its own business.
  static void tell(const std::function<void(const HostRegionEvent&)>& hook, void* ptr, uint64_t bytes) noexcept {
    if (!hook) return;
    try {
      hook(HostRegionEvent{ptr, bytes});
    } catch (...) {
    }
  }

  std::unique_ptr<backend::HostPinner> inner_;
  mutable Mutex lock_;
  std::map<uintptr_t, uint64_t> live_;
  HostRegionHooks hooks_;
};

}  // namespace unipool::host
