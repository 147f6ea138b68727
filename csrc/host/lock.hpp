// unipool host: the engine's mutex. A bare pthread mutex: it never
// allocates, it is constant-initialized (usable before any constructor ran),
// and the fork handlers can take and drop it from outside.
#pragma once

#include <linux/futex.h>
#include <pthread.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#if __has_include(<sys/single_threaded.h>)
#include <sys/single_threaded.h>
#endif

#include "core/thread_safety.hpp"

namespace unipool::host {

class UNIPOOL_CAPABILITY("mutex") Mutex {
 public:
  void lock() noexcept UNIPOOL_ACQUIRE() { pthread_mutex_lock(&m_); }
  void unlock() noexcept UNIPOOL_RELEASE() { pthread_mutex_unlock(&m_); }

 private:
  pthread_mutex_t m_ = PTHREAD_MUTEX_INITIALIZER;
};

inline void cpu_relax() noexcept {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

// A lock of the large-block path, inline (Drepper's three-state futex
// mutex: 0 free, 1 taken, 2 taken with waiters). An uncontended lock and
// unlock are one atomic exchange each in the caller's code: a large
// allocation between bursts of the caller's own work finds libc's pthread
// code and its TLB entries cold, and the profile of hakmem_mixed put ~13% of
// the run on the entries of pthread_mutex_trylock/lock/unlock. Never
// allocates; the fork handlers may take and drop it from outside.
//
// In a process with one thread (glibc's __libc_single_threaded, which
// pthread_create clears before the new thread exists and nothing sets
// again) lock and unlock are plain stores, as glibc's own arenas do: a
// locked instruction waits for every store the program has in flight, and
// no other thread can take the lock meanwhile. The unlock looks again: a
// thread made while the lock was held (none is, on the paths that take it)
// may be waiting, and gets the exchange and its wake-up.
class UNIPOOL_CAPABILITY("mutex") FutexMutex {
 public:
  void lock() noexcept UNIPOOL_ACQUIRE() {
    // Held already in a process of one thread: a signal handler that came
    // back in. It takes the locked path and waits for the lock, rather than
    // run the range allocator inside the section it interrupted.
    if (single_threaded() && state_.load(std::memory_order_relaxed) == 0) {
      state_.store(1, std::memory_order_relaxed);
      std::atomic_signal_fence(std::memory_order_seq_cst);  // the section's accesses stay after it
      return;
    }
    uint32_t s = 0;
    if (state_.compare_exchange_strong(s, 1, std::memory_order_acquire, std::memory_order_relaxed)) return;
    lock_slow(s);
  }
  void unlock() noexcept UNIPOOL_RELEASE() {
    if (single_threaded()) {
      state_.store(0, std::memory_order_release);
      return;
    }
    if (state_.exchange(0, std::memory_order_release) == 2) {
      syscall(SYS_futex, reinterpret_cast<uint32_t*>(&state_), FUTEX_WAKE_PRIVATE, 1, nullptr, nullptr, 0);
    }
  }

 private:
  static bool single_threaded() noexcept {
#if __has_include(<sys/single_threaded.h>)
    return __libc_single_threaded != 0;
#else
    return false;
#endif
  }
  void lock_slow(uint32_t s) noexcept {
    // Critical sections are a few range-allocator steps: spin a little first.
    for (int i = 0; i < 100 && s != 0; ++i) {
      cpu_relax();
      s = state_.load(std::memory_order_relaxed);
      if (s == 0 && state_.compare_exchange_strong(s, 1, std::memory_order_acquire, std::memory_order_relaxed)) return;
    }
    if (s != 2) s = state_.exchange(2, std::memory_order_acquire);
    while (s != 0) {
      syscall(SYS_futex, reinterpret_cast<uint32_t*>(&state_), FUTEX_WAIT_PRIVATE, 2, nullptr, nullptr, 0);
      s = state_.exchange(2, std::memory_order_acquire);
    }
  }
  std::atomic<uint32_t> state_{0};
};
static_assert(sizeof(std::atomic<uint32_t>) == sizeof(uint32_t));

template <class M>
class UNIPOOL_SCOPED_CAPABILITY BasicLockGuard {
 public:
  explicit BasicLockGuard(M& m) noexcept UNIPOOL_ACQUIRE(m) : m_(m) { m_.lock(); }
  ~BasicLockGuard() UNIPOOL_RELEASE() { m_.unlock(); }
  BasicLockGuard(const BasicLockGuard&) = delete;
  BasicLockGuard& operator=(const BasicLockGuard&) = delete;

 private:
  M& m_;
};

using FutexGuard = BasicLockGuard<FutexMutex>;

class UNIPOOL_SCOPED_CAPABILITY LockGuard {
 public:
  explicit LockGuard(Mutex& m) noexcept UNIPOOL_ACQUIRE(m) : m_(m) { m_.lock(); }
  ~LockGuard() UNIPOOL_RELEASE() { m_.unlock(); }
  LockGuard(const LockGuard&) = delete;
  LockGuard& operator=(const LockGuard&) = delete;

 private:
  Mutex& m_;
};

}  // namespace unipool::host
