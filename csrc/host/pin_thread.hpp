// unipool host: a pool's pinning thread (pin_thread=on): the thread, its
// queue of arenas that want chunks ahead, and the waits around a job.
//
// The job itself (claim, commit and register chunks at an arena's end, then
// append them) is the engine's: Engine::pin_ahead, handed over at start().
// Invariants:
//   - at most one job runs, for arena busy() - 1; a job starts only while
//     nobody paused the thread (validate());
//   - an arena's bit in the queue is taken and busy set in one step under
//     the lock, so wait_idle() never sees the thread idle with a request
//     taken and not done;
//   - pending() counts bytes claimed and not yet appended (they count
//     against the pool's limit).
// The lock is a leaf: nothing else is taken while it is held. A plain
// pthread mutex and conditions, constant-initialized: nothing here
// allocates, and the fork handlers take and drop the lock from outside.
#pragma once

#include <pthread.h>

#include <atomic>
#include <cstdint>

namespace unipool::host {

class PinThread {
 public:
  // The job: pins ahead for `arena`; true when that arena wants more.
  using Job = bool (*)(void* context, uint32_t arena);
  static constexpr uint32_t kMaxArenas = 32;  // one bit each in the queue

  // Starts the thread (every signal blocked in it). False when it could not
  // be created: every allocation then pins for itself.
  bool start(Job job, void* context) noexcept;
  void stop() noexcept;  // joins it; what it pinned stays
  bool running() const noexcept { return running_.load(std::memory_order_acquire); }

  // Queues `arena` (a no-op when queued already) and wakes the thread.
  void want(uint32_t arena) noexcept;
  // Returns once no job for `arena` is in flight.
  void wait_for_claim(uint32_t arena) noexcept;
  // Returns once nothing is queued or in flight (at once without a thread).
  void wait_idle() const noexcept;
  // validate(): no job starts or runs until resume().
  void pause() const noexcept;
  void resume() const noexcept;

  // fork(): the lock is held across it; the child has no thread.
  void fork_lock() noexcept { pthread_mutex_lock(&lock_); }
  void after_fork(bool child) noexcept;

  // Bytes a job claimed and has not appended yet.
  void add_pending(uint64_t bytes) noexcept { pending_.fetch_add(bytes, std::memory_order_relaxed); }
  void drop_pending(uint64_t bytes) noexcept { pending_.fetch_sub(bytes, std::memory_order_relaxed); }
  uint64_t pending() const noexcept { return pending_.load(std::memory_order_relaxed); }
  void count_registrations(uint64_t n) noexcept { registrations_.fetch_add(n, std::memory_order_relaxed); }
  void count_wait() noexcept { waits_.fetch_add(1, std::memory_order_relaxed); }
  uint64_t registrations() const noexcept { return registrations_.load(std::memory_order_relaxed); }
  uint64_t waits() const noexcept { return waits_.load(std::memory_order_relaxed); }

 private:
  static void* main(void* self) noexcept;
  void loop() noexcept;

  mutable pthread_mutex_t lock_ = PTHREAD_MUTEX_INITIALIZER;
  mutable pthread_cond_t wake_ = PTHREAD_COND_INITIALIZER;  // work, stop or resume for the thread
  mutable pthread_cond_t done_ = PTHREAD_COND_INITIALIZER;  // a job finished (waiters of busy_)
  pthread_t thread_{};
  Job job_ = nullptr;
  void* context_ = nullptr;
  std::atomic<bool> running_{false};  // the thread exists (not in a forked child)
  // Under lock_:
  bool stop_ = false;
  mutable uint32_t paused_ = 0;  // validate() in progress: start no job
  uint32_t busy_ = 0;            // arena index + 1 of the job in flight, 0 when idle
  // Arenas that want chunks ahead, a bit each; set without the lock.
  std::atomic<uint32_t> wanted_{0};
  std::atomic<uint64_t> pending_{0};
  std::atomic<uint64_t> registrations_{0};  // made by the thread
  std::atomic<uint64_t> waits_{0};          // allocations that waited for a claim
};

}  // namespace unipool::host
