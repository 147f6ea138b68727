// unipool: ManualFenceSource, fences completed by hand (tests, CPU-only use).
#include <stdexcept>

#include "unipool/fence.hpp"

namespace unipool {

FenceId ManualFenceSource::record(int /*device*/, StreamHandle stream) {
  std::lock_guard lock(mutex_);
  const FenceId id = next_++;
  fences_.emplace(id, Entry{stream, false});
  return id;
}

bool ManualFenceSource::completed(FenceId fence) {
  std::lock_guard lock(mutex_);
  const auto it = fences_.find(fence);
  if (it == fences_.end()) throw std::invalid_argument("unipool::ManualFenceSource: unknown fence");
  return it->second.done;
}

void ManualFenceSource::wait(FenceId fence) { complete(fence); }

void ManualFenceSource::release(FenceId fence) {
  std::lock_guard lock(mutex_);
  fences_.erase(fence);
}

void ManualFenceSource::complete(FenceId fence) {
  std::lock_guard lock(mutex_);
  const auto it = fences_.find(fence);
  if (it == fences_.end()) throw std::invalid_argument("unipool::ManualFenceSource: unknown fence");
  it->second.done = true;
}

void ManualFenceSource::complete_stream(StreamHandle stream) {
  std::lock_guard lock(mutex_);
  for (auto& [id, entry] : fences_) {
    if (entry.stream == stream) entry.done = true;
  }
}

void ManualFenceSource::complete_all() {
  std::lock_guard lock(mutex_);
  for (auto& [id, entry] : fences_) entry.done = true;
}

uint64_t ManualFenceSource::outstanding() const {
  std::lock_guard lock(mutex_);
  return fences_.size();
}

}  // namespace unipool
