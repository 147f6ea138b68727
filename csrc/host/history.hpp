// unipool host: the pool's history ring (unipool/host_history.hpp). Its
// entries live in a metadata mapping, never on the heap: the engine may sit
// under a malloc replacement. Off, recording costs callers one relaxed load
// and a branch (on()); on, a lock and a copy into the ring.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "host/lock.hpp"
#include "unipool/host_history.hpp"

namespace unipool::host {

class History {
 public:
  History() = default;
  ~History();
  History(const History&) = delete;
  History& operator=(const History&) = delete;

  // Keeps the last `max_entries` entries from now on, dropping what was
  // recorded; 0 stops and drops. False when the ring's mapping failed (the
  // history is then off).
  bool start(size_t max_entries) noexcept;
  bool on() const noexcept { return on_.load(std::memory_order_relaxed); }
  void record(HostHistoryAction action, const void* address, uint64_t size) noexcept;
  std::vector<HostHistoryEntry> entries() const;  // oldest first
  size_t capacity() const noexcept;
  // Its lock is the innermost of the engine's: fork takes it last.
  void fork_lock() noexcept UNIPOOL_ACQUIRE(mutex_) { mutex_.lock(); }
  void fork_unlock() noexcept UNIPOOL_RELEASE(mutex_) { mutex_.unlock(); }

 private:
  mutable Mutex mutex_;
  std::atomic<bool> on_{false};
  HostHistoryEntry* ring_ = nullptr;  // capacity_ entries, mapped
  size_t capacity_ = 0;
  size_t size_ = 0;
  size_t next_ = 0;  // the slot written next; once full, the oldest entry
};

// {"max_entries": N, "entries": [{"action": ..., "address": ..., "size": ..., "time_ns": ...}, ...]}
std::string history_json(const std::vector<HostHistoryEntry>& entries, size_t max_entries);

}  // namespace unipool::host
