// unipool kv: the lock of a KVBlockPool.
//
// Why not std::mutex: in a process with more than one thread (every Python
// process that imported torch) a glibc mutex lock+unlock is two locked
// read-modify-writes, ~13 ns here, where one batched alloc of 64 ids is a few
// ns of work; this lock is one exchange to take and a plain store to release
// (~6 ns). The pool holds it for O(batch) work and never across a system call
// other than the fence queries of deferred frees, so waiting is short:
// spin (with the CPU's pause hint) a little, then yield the core.
//
// Meets BasicLockable, so std::lock_guard works with it.
#pragma once

#include <atomic>
#include <thread>

namespace unipool {

class KVSpinLock {
 public:
  void lock() noexcept {
    if (!locked_.exchange(true, std::memory_order_acquire)) return;
    lock_slow();
  }
  void unlock() noexcept { locked_.store(false, std::memory_order_release); }

 private:
  void lock_slow() noexcept {
    int spins = 0;  // stops counting at the limit: a long wait cannot overflow it
    for (;;) {
      // Wait for a release with plain loads, so waiters do not fight over
      // the cache line, then try to take it.
      while (locked_.load(std::memory_order_relaxed)) {
        if (spins < 64) {
          ++spins;
          pause();
        } else {
          std::this_thread::yield();
        }
      }
      if (!locked_.exchange(true, std::memory_order_acquire)) return;
    }
  }

  static void pause() noexcept {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    asm volatile("yield");
#endif
  }

  std::atomic<bool> locked_{false};
};

}  // namespace unipool
