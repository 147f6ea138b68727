// unipool host: the pinning thread's job (pin_thread=on; the thread and
// its queue: pin_thread.hpp). The thread keeps the free range at the end of
// each arena at its target by growing the arena ahead of demand
// (arena_ahead.cpp), so an allocation that needs a new chunk normally finds
// one already registered instead of paying for cudaHostRegister itself
// (~0.1 s/GB). A chunk is appended only after its registration succeeded,
// or as pageable and counted with best_effort; with pinned=on a failed one
// is dropped and the arena is not pinned ahead again until an allocation
// has grown it itself.
#include "host/engine.hpp"

namespace unipool::host {

void Engine::start_pin_thread() noexcept {
  // Without a thread every allocation pins for itself, as with pin_thread=off.
  (void)pin_.start([](void* engine, uint32_t arena) { return static_cast<Engine*>(engine)->pin_ahead(arena); }, this);
}

// setup_lock_ is taken with a limit only (not analysed).
UNIPOOL_NO_THREAD_SAFETY_ANALYSIS bool Engine::pin_ahead(uint32_t i) noexcept {
  Arena& arena = arenas_[i];
  // With a limit, claims and appends are serialized with the allocations
  // (setup_lock_), so the headroom check stays exact.
  const bool serial = config_.limit != 0;
  if (serial) setup_lock_.lock();
  arena.mutex().lock();
  const uint64_t bytes = arena.ahead_wanted(arena_settings_, headroom());
  char* start = bytes != 0 ? arena.claim_ahead(bytes) : nullptr;
  if (bytes != 0) pin_.add_pending(bytes);
  arena.mutex().unlock();
  if (serial) setup_lock_.unlock();
  if (bytes == 0) return false;

  AheadWork work = arena.prepare_ahead(start, bytes, arena_settings_);

  if (serial) setup_lock_.lock();
  arena.mutex().lock();
  ArenaDelta delta;
  const Status s = arena.finish_ahead(work, arena_settings_, &delta);
  // Under the arena's lock: validate() sees the arena and the gauges agree.
  counters_.apply(delta);
  pin_.drop_pending(bytes);
  const bool more = s == Status::ok && arena.ahead_wanted(arena_settings_, headroom()) != 0;
  arena.mutex().unlock();
  if (serial) setup_lock_.unlock();
  pin_.count_registrations(delta.registrations);
  return more;
}

void Engine::want_ahead(uint32_t i) noexcept {
  if (!pin_.running()) return;
  if (arenas_[i].ahead_wanted(arena_settings_, headroom()) == 0) return;
  pin_.want(i);
}

void Engine::wait_for_pinning() const noexcept { pin_.wait_idle(); }

}  // namespace unipool::host
