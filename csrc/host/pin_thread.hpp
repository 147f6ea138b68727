// unipool host: what a pool's pinning thread (pin_thread=on) shares with the
// threads that allocate. The thread itself is engine_pin_thread.cpp.
//
// `lock` is a leaf: nothing else is taken while it is held. A plain pthread
// mutex and conditions, constant-initialized: nothing here allocates, and
// the fork handlers take and drop the lock from outside.
#pragma once

#include <pthread.h>

#include <atomic>
#include <cstdint>

namespace unipool::host {

struct PinThread {
  pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
  pthread_cond_t wake = PTHREAD_COND_INITIALIZER;  // work, stop or resume for the thread
  pthread_cond_t done = PTHREAD_COND_INITIALIZER;  // a job finished (waiters of busy)
  pthread_t thread{};
  std::atomic<bool> running{false};  // the thread exists (not in a forked child)
  // Under `lock`:
  bool stop = false;
  uint32_t paused = 0;  // validate() in progress: start no job
  uint32_t busy = 0;    // arena index + 1 of the job in flight, 0 when idle
  // Arenas that want chunks ahead, a bit each; set without the lock.
  std::atomic<uint32_t> wanted{0};
  // Bytes claimed and not yet appended (counted against the pool's limit).
  std::atomic<uint64_t> pending{0};
  std::atomic<uint64_t> registrations{0};  // made by the thread
  std::atomic<uint64_t> waits{0};          // allocations that waited for a claim
};

}  // namespace unipool::host
