// unipool host: the engine's mutex. A bare pthread mutex: it never
// allocates, it is constant-initialized (usable before any constructor ran),
// and the fork handlers can take and drop it from outside.
#pragma once

#include <pthread.h>

namespace unipool::host {

class Mutex {
 public:
  void lock() noexcept { pthread_mutex_lock(&m_); }
  void unlock() noexcept { pthread_mutex_unlock(&m_); }

 private:
  pthread_mutex_t m_ = PTHREAD_MUTEX_INITIALIZER;
};

class LockGuard {
 public:
  explicit LockGuard(Mutex& m) noexcept : m_(m) { m_.lock(); }
  ~LockGuard() { m_.unlock(); }
  LockGuard(const LockGuard&) = delete;
  LockGuard& operator=(const LockGuard&) = delete;

 private:
  Mutex& m_;
};

}  // namespace unipool::host
