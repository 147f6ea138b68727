// unipool host: the pinning thread's queue and waits (pin_thread.hpp). What
// it is asked: an allocation that leaves an arena short of its target
// queues the arena (Engine::want_ahead). A request that needs more than the
// arena's free end while a claim is in flight waits for that claim.
#include "host/pin_thread.hpp"

#include <signal.h>

#include "host/thread_state.hpp"

namespace unipool::host {
namespace {

struct PinLock {
  explicit PinLock(pthread_mutex_t& m) noexcept : mutex(m) { pthread_mutex_lock(&mutex); }
  ~PinLock() { pthread_mutex_unlock(&mutex); }
  pthread_mutex_t& mutex;
};

}  // namespace

bool PinThread::start(Job job, void* context) noexcept {
  job_ = job;
  context_ = context;
  // Every signal blocked in the thread: the process's handlers run on the
  // process's own threads, never on this one.
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  // pthread_create allocates (TLS): served on the side, like the pinner's.
  const bool ok = pthread_create(&thread_, nullptr, main, this) == 0;
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
  if (!ok) return false;
  pthread_setname_np(thread_, "unipool-pin");
  running_.store(true, std::memory_order_release);
  return true;
}

void PinThread::stop() noexcept {
  if (!running()) return;
  {
    PinLock lock(lock_);
    stop_ = true;
    pthread_cond_signal(&wake_);
  }
  InternalScope internal;  // pthread_join frees the thread's TLS block from here
  pthread_join(thread_, nullptr);
  running_.store(false, std::memory_order_release);
}

void* PinThread::main(void* self) noexcept {
  // Its whole life: what the CUDA runtime allocates on this thread is served
  // on the side, never from a pool's locked paths (the malloc face).
  ++t_internal;
  static_cast<PinThread*>(self)->loop();
  --t_internal;
  return nullptr;
}

void PinThread::loop() noexcept {
  PinLock lock(lock_);
  uint32_t next = 0;  // arenas in turn, so one that keeps asking starves no other
  for (;;) {
    uint32_t wanted = 0;
    while (!stop_ && (paused_ != 0 || (wanted = wanted_.load(std::memory_order_acquire)) == 0)) {
      pthread_cond_wait(&wake_, &lock_);
    }
    if (stop_) break;
    uint32_t i = next;
    while ((wanted & (uint32_t{1} << i)) == 0) i = (i + 1) % kMaxArenas;
    next = (i + 1) % kMaxArenas;
    const uint32_t bit = uint32_t{1} << i;
    // The bit goes and busy_ comes under the lock: wait_idle() never sees
    // the thread idle with a request taken and not done.
    wanted_.fetch_and(~bit, std::memory_order_acq_rel);
    busy_ = i + 1;  // before the claim: whoever sees the claim finds it busy
    pthread_mutex_unlock(&lock_);
    const bool more = job_(context_, i);
    pthread_mutex_lock(&lock_);
    if (more) wanted_.fetch_or(bit, std::memory_order_relaxed);
    busy_ = 0;
    pthread_cond_broadcast(&done_);
  }
}

void PinThread::want(uint32_t arena) noexcept {
  const uint32_t bit = uint32_t{1} << arena;
  if ((wanted_.load(std::memory_order_relaxed) & bit) != 0) return;
  if ((wanted_.fetch_or(bit, std::memory_order_acq_rel) & bit) != 0) return;
  PinLock lock(lock_);
  pthread_cond_signal(&wake_);
}

void PinThread::wait_for_claim(uint32_t arena) noexcept {
  PinLock lock(lock_);
  while (busy_ == arena + 1) pthread_cond_wait(&done_, &lock_);
}

void PinThread::wait_idle() const noexcept {
  if (!running()) return;
  PinLock lock(lock_);
  while (!stop_ && (busy_ != 0 || wanted_.load(std::memory_order_acquire) != 0)) {
    pthread_cond_wait(&done_, &lock_);
  }
}

void PinThread::pause() const noexcept {
  PinLock lock(lock_);
  ++paused_;
  while (busy_ != 0) pthread_cond_wait(&done_, &lock_);
}

void PinThread::resume() const noexcept {
  PinLock lock(lock_);
  if (--paused_ == 0) pthread_cond_signal(&wake_);
}

void PinThread::after_fork(bool child) noexcept {
  if (child) {
    // The child has no pinning thread: every allocation pins for itself, as
    // with pin_thread=off (the engine drops the arenas' claims).
    running_.store(false, std::memory_order_relaxed);
    busy_ = 0;
    paused_ = 0;
    wanted_.store(0, std::memory_order_relaxed);
    pending_.store(0, std::memory_order_relaxed);
    // The parent's thread may have been waiting on these: start them afresh.
    wake_ = PTHREAD_COND_INITIALIZER;
    done_ = PTHREAD_COND_INITIALIZER;
  }
  pthread_mutex_unlock(&lock_);
}

}  // namespace unipool::host
