// unipool host: the pinning thread (pin_thread=on). One per pool, started
// with the pinner (the first allocation that needs an arena), joined by the
// pool's destructor. It keeps the free range at the end of each arena at its
// target by growing the arena ahead of demand (arena_ahead.cpp), so an
// allocation that needs a new chunk normally finds one already registered
// instead of paying for cudaHostRegister itself (~0.1 s/GB).
//
// What it is asked: an allocation that leaves an arena short of its target
// sets the arena's bit in pin_.wanted and wakes it. A request that needs
// more than the free end while a claim is in flight waits for that claim;
// with none in flight it grows (and pins) the arena itself, as without the
// thread. A chunk is appended only after its registration succeeded, or as
// pageable and counted with best_effort; with pinned=on a failed one is
// dropped and the arena is not pinned ahead again until an allocation has
// grown it itself.
#include <signal.h>

#include "host/engine.hpp"

namespace unipool::host {
namespace {

struct PinLock {
  explicit PinLock(PinThread& p) noexcept : pin(p) { pthread_mutex_lock(&pin.lock); }
  ~PinLock() { pthread_mutex_unlock(&pin.lock); }
  PinThread& pin;
};

}  // namespace

void Engine::start_pin_thread() noexcept {
  // Every signal blocked in the thread: the process's handlers run on the
  // process's own threads, never on this one.
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  // pthread_create allocates (TLS): served on the side, like the pinner's.
  const bool ok = pthread_create(&pin_.thread, nullptr, pin_thread_main, this) == 0;
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
  // Without a thread every allocation pins for itself, as with pin_thread=off.
  if (!ok) return;
  pthread_setname_np(pin_.thread, "unipool-pin");
  pin_.running.store(true, std::memory_order_release);
}

void Engine::stop_pin_thread() noexcept {
  if (!pin_.running.load(std::memory_order_acquire)) return;
  {
    PinLock lock(pin_);
    pin_.stop = true;
    pthread_cond_signal(&pin_.wake);
  }
  InternalScope internal;  // pthread_join frees the thread's TLS block from here
  pthread_join(pin_.thread, nullptr);
  pin_.running.store(false, std::memory_order_release);
}

void* Engine::pin_thread_main(void* engine) noexcept {
  // Its whole life: what the CUDA runtime allocates on this thread is served
  // on the side, never from a pool's locked paths (the malloc face).
  ++t_internal;
  static_cast<Engine*>(engine)->pin_thread_loop();
  --t_internal;
  return nullptr;
}

void Engine::pin_thread_loop() noexcept {
  PinLock lock(pin_);
  uint32_t next = 0;  // arenas in turn, so one that keeps asking starves no other
  for (;;) {
    uint32_t wanted = 0;
    while (!pin_.stop && (pin_.paused != 0 || (wanted = pin_.wanted.load(std::memory_order_acquire)) == 0)) {
      pthread_cond_wait(&pin_.wake, &pin_.lock);
    }
    if (pin_.stop) break;
    uint32_t i = next;
    while ((wanted & (uint32_t{1} << i)) == 0) i = (i + 1) % kMaxArenas;
    next = (i + 1) % kMaxArenas;
    const uint32_t bit = uint32_t{1} << i;
    // The bit goes and `busy` comes under the lock: wait_for_pinning() never
    // sees the thread idle with a request taken and not done.
    pin_.wanted.fetch_and(~bit, std::memory_order_acq_rel);
    pin_.busy = i + 1;  // before the claim: whoever sees the claim finds it busy
    pthread_mutex_unlock(&pin_.lock);
    const bool more = pin_ahead(i);
    pthread_mutex_lock(&pin_.lock);
    if (more) pin_.wanted.fetch_or(bit, std::memory_order_relaxed);
    pin_.busy = 0;
    pthread_cond_broadcast(&pin_.done);
  }
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
  if (bytes != 0) pin_.pending.fetch_add(bytes, std::memory_order_relaxed);
  arena.mutex().unlock();
  if (serial) setup_lock_.unlock();
  if (bytes == 0) return false;

  AheadWork work = Arena::prepare_ahead(start, bytes, arena_settings_);

  if (serial) setup_lock_.lock();
  arena.mutex().lock();
  ArenaDelta delta;
  const Status s = arena.finish_ahead(work, arena_settings_, &delta);
  // Under the arena's lock: validate() sees the arena and the gauges agree.
  counters_.apply(delta);
  pin_.pending.fetch_sub(bytes, std::memory_order_relaxed);
  const bool more = s == Status::ok && arena.ahead_wanted(arena_settings_, headroom()) != 0;
  arena.mutex().unlock();
  if (serial) setup_lock_.unlock();
  pin_.registrations.fetch_add(delta.registrations, std::memory_order_relaxed);
  return more;
}

void Engine::want_ahead(uint32_t i) noexcept {
  if (!pin_.running.load(std::memory_order_relaxed)) return;
  if (arenas_[i].ahead_wanted(arena_settings_, headroom()) == 0) return;
  const uint32_t bit = uint32_t{1} << i;
  if ((pin_.wanted.load(std::memory_order_relaxed) & bit) != 0) return;
  if ((pin_.wanted.fetch_or(bit, std::memory_order_acq_rel) & bit) != 0) return;
  PinLock lock(pin_);
  pthread_cond_signal(&pin_.wake);
}

void Engine::wait_for_claim(uint32_t i) noexcept {
  PinLock lock(pin_);
  while (pin_.busy == i + 1) pthread_cond_wait(&pin_.done, &pin_.lock);
}

void Engine::wait_for_pinning() const noexcept {
  if (!pin_.running.load(std::memory_order_acquire)) return;
  PinLock lock(pin_);
  while (!pin_.stop && (pin_.busy != 0 || pin_.wanted.load(std::memory_order_acquire) != 0)) {
    pthread_cond_wait(&pin_.done, &pin_.lock);
  }
}

void Engine::pause_pin_thread() const noexcept {
  PinLock lock(pin_);
  ++pin_.paused;
  while (pin_.busy != 0) pthread_cond_wait(&pin_.done, &pin_.lock);
}

void Engine::resume_pin_thread() const noexcept {
  PinLock lock(pin_);
  if (--pin_.paused == 0) pthread_cond_signal(&pin_.wake);
}

void Engine::pin_thread_after_fork(bool child) noexcept {
  if (!child) {
    pthread_mutex_unlock(&pin_.lock);
    return;
  }
  // The child has no pinning thread: its claim, if any, will never be
  // appended (the range is committed again when an allocation grows over
  // it), and every allocation pins for itself, as with pin_thread=off.
  pin_.running.store(false, std::memory_order_relaxed);
  pin_.busy = 0;
  pin_.paused = 0;
  pin_.wanted.store(0, std::memory_order_relaxed);
  pin_.pending.store(0, std::memory_order_relaxed);
  for (Arena& a : arenas_) a.drop_ahead();
  // The parent's thread may have been waiting on these: start them afresh.
  pin_.wake = PTHREAD_COND_INITIALIZER;
  pin_.done = PTHREAD_COND_INITIALIZER;
  pthread_mutex_unlock(&pin_.lock);
}

}  // namespace unipool::host
