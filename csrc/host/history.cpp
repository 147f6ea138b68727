// unipool host: History (see history.hpp).
#include "host/history.hpp"

#include <time.h>

#include <cstdint>

#include "backend/os/os_memory.hpp"

namespace unipool {

const char* to_string(HostHistoryAction action) noexcept {
  switch (action) {
    case HostHistoryAction::alloc: return "alloc";
    case HostHistoryAction::free: return "free";
    case HostHistoryAction::pin: return "pin";
    case HostHistoryAction::unpin: return "unpin";
    case HostHistoryAction::pin_failed: return "pin_failed";
  }
  return "unknown";
}

namespace host {

History::~History() {
  if (ring_ != nullptr) backend::os::unmap_metadata(ring_, capacity_ * sizeof(HostHistoryEntry));
}

bool History::start(size_t max_entries) noexcept {
  HostHistoryEntry* ring = nullptr;
  bool failed = false;
  // A count whose bytes wrap past 2^64 would map a few bytes for a ring
  // record() then writes far past: refused as a ring that cannot be mapped.
  if (max_entries > SIZE_MAX / sizeof(HostHistoryEntry)) {
    failed = true;
    max_entries = 0;
  } else if (max_entries > 0) {
    ring = static_cast<HostHistoryEntry*>(backend::os::map_metadata(max_entries * sizeof(HostHistoryEntry)));
    failed = ring == nullptr;
    if (failed) max_entries = 0;
  }
  HostHistoryEntry* old = nullptr;
  size_t old_capacity = 0;
  mutex_.lock();
  old = ring_;
  old_capacity = capacity_;
  ring_ = ring;
  capacity_ = max_entries;
  size_ = next_ = 0;
  on_.store(ring != nullptr, std::memory_order_relaxed);
  mutex_.unlock();
  if (old != nullptr) backend::os::unmap_metadata(old, old_capacity * sizeof(HostHistoryEntry));
  return !failed;
}

void History::record(HostHistoryAction action, const void* address, uint64_t size) noexcept {
  timespec now{};
  clock_gettime(CLOCK_REALTIME, &now);
  const HostHistoryEntry e{action, reinterpret_cast<uint64_t>(address), size,
                           static_cast<int64_t>(now.tv_sec) * 1000000000 + now.tv_nsec};
  mutex_.lock();
  if (ring_ != nullptr) {  // stopped between the caller's on() and here: dropped
    ring_[next_] = e;
    next_ = next_ + 1 == capacity_ ? 0 : next_ + 1;
    if (size_ < capacity_) ++size_;
  }
  mutex_.unlock();
}

std::vector<HostHistoryEntry> History::entries() const {
  std::vector<HostHistoryEntry> out;
  mutex_.lock();
  out.reserve(size_);
  const size_t oldest = size_ < capacity_ ? 0 : next_;
  for (size_t i = 0; i < size_; ++i) out.push_back(ring_[(oldest + i) % capacity_]);
  mutex_.unlock();
  return out;
}

size_t History::capacity() const noexcept {
  mutex_.lock();
  const size_t c = capacity_;
  mutex_.unlock();
  return c;
}

std::string history_json(const std::vector<HostHistoryEntry>& entries, size_t max_entries) {
  std::string out = "{\"max_entries\": " + std::to_string(max_entries) + ", \"entries\": [";
  for (size_t i = 0; i < entries.size(); ++i) {
    const HostHistoryEntry& e = entries[i];
    out += i == 0 ? "{" : ", {";
    out += "\"action\": \"" + std::string(to_string(e.action)) + "\", \"address\": " + std::to_string(e.address) +
           ", \"size\": " + std::to_string(e.size) + ", \"time_ns\": " + std::to_string(e.time_ns) + "}";
  }
  out += "]}";
  return out;
}

}  // namespace host
}  // namespace unipool
