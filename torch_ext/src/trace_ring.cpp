// unipool torch extension: TraceRing (see trace_ring.hpp).
#include "trace_ring.hpp"

#include <algorithm>

namespace unipool::torch_ext {

void TraceRing::set_capacity(size_t capacity) {
  linearize();
  if (capacity == 0) capacity = 1;
  if (entries_.size() > capacity) {
    entries_.erase(entries_.begin(), entries_.begin() + static_cast<std::ptrdiff_t>(entries_.size() - capacity));
  }
  capacity_ = capacity;
}

void TraceRing::push(const TraceEntry& entry) {
  if (entries_.size() < capacity_) {
    entries_.push_back(entry);
    return;
  }
  entries_[next_] = entry;
  next_ = next_ + 1 == capacity_ ? 0 : next_ + 1;
}

void TraceRing::clear() noexcept {
  entries_.clear();
  next_ = 0;
}

std::vector<TraceEntry> TraceRing::entries() const {
  std::vector<TraceEntry> out;
  out.reserve(entries_.size());
  out.insert(out.end(), entries_.begin() + static_cast<std::ptrdiff_t>(next_), entries_.end());
  out.insert(out.end(), entries_.begin(), entries_.begin() + static_cast<std::ptrdiff_t>(next_));
  return out;
}

void TraceRing::linearize() {
  std::rotate(entries_.begin(), entries_.begin() + static_cast<std::ptrdiff_t>(next_), entries_.end());
  next_ = 0;
}

}  // namespace unipool::torch_ext
