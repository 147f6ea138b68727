// unipool transfer: the registration cache's book-keeping
// (include/unipool/registration_cache.hpp): chunks by address, each cut into
// regions of at most max_region_bytes, and a map from each 2 MiB granule to
// the few regions that touch it, so locate() reads one hash entry.
#include "unipool/registration_cache.hpp"

#include <algorithm>
#include <mutex>
#include <stdexcept>

namespace unipool {
namespace {

constexpr unsigned kGranuleShift = 21;

template <typename F>
void for_granules(uintptr_t address, uint64_t bytes, F&& f) {
  for (uint64_t g = address >> kGranuleShift, last = (address + bytes - 1) >> kGranuleShift; g <= last; ++g) f(g);
}

}  // namespace

RegistrationCache::RegistrationCache(Registrar registrar, uint64_t max_region_bytes)
    : registrar_(std::move(registrar)), max_region_(max_region_bytes) {
  if (!registrar_.register_region || !registrar_.deregister_region) {
    throw std::invalid_argument("RegistrationCache: the registrar needs register_region and deregister_region");
  }
  if (max_region_ == 0) throw std::invalid_argument("RegistrationCache: max_region_bytes must be at least 1");
  gate_ = std::make_shared<HookGate>();
  gate_->cache = this;
}

RegistrationCache::~RegistrationCache() {
  {
    std::unique_lock gate(gate_->mutex);  // waits for hook calls in flight
    gate_->cache = nullptr;
  }
  detach_all();
  std::unique_lock lock(mutex_);
  while (!chunks_.empty()) drop_chunk_locked(chunks_.begin());
}

void RegistrationCache::on_map(void* address, uint64_t bytes, int device, uint64_t piece_bytes) {
  const uint64_t piece = piece_bytes == 0 ? max_region_ : piece_bytes;
  if (address == nullptr || bytes == 0) throw std::invalid_argument("RegistrationCache::on_map: an empty chunk");
  if (piece > max_region_) {
    throw std::invalid_argument("RegistrationCache::on_map: piece_bytes passes max_region_bytes");
  }
  const auto start = reinterpret_cast<uintptr_t>(address);
  std::unique_lock lock(mutex_);
  auto next = chunks_.lower_bound(start);
  if ((next != chunks_.end() && next->first < start + bytes) ||
      (next != chunks_.begin() && std::prev(next)->second.end > start)) {
    throw std::invalid_argument("RegistrationCache::on_map: the chunk overlaps a registered one");
  }
  map_locked(start, bytes, device, piece);
}

// Registers [start, start + bytes) as one chunk (lock held, no overlap).
// All or nothing: on any failure every region made is deregistered again.
void RegistrationCache::map_locked(uintptr_t start, uint64_t bytes, int device, uint64_t piece) {
  Chunk chunk{start + bytes, device, {}};
  chunk.regions.reserve((bytes + piece - 1) / piece);
  try {
    for (uintptr_t at = start; at < start + bytes; at += piece) {
      const uint64_t n = std::min<uint64_t>(piece, start + bytes - at);
      const uint64_t handle = registrar_.register_region(reinterpret_cast<void*>(at), n, device);
      ++registrations_;
      try {
        chunk.regions.push_back(add_region_locked(at, n, device, handle));
      } catch (...) {
        ++deregistrations_;
        registrar_.deregister_region(handle);
        throw;
      }
    }
    chunks_.emplace(start, chunk);
  } catch (...) {
    drop_regions_locked(chunk.regions);
    throw;
  }
}

size_t RegistrationCache::add_region_locked(uintptr_t address, uint64_t bytes, int device, uint64_t handle) {
  size_t idx = regions_.size();
  if (!spare_.empty()) {
    idx = spare_.back();
    spare_.pop_back();
  } else {
    regions_.emplace_back();
  }
  regions_[idx] = RegisteredRegion{reinterpret_cast<void*>(address), bytes, device, handle};
  for_granules(address, bytes, [&](uint64_t g) { granules_[g].push_back(idx); });
  return idx;
}

// Deregisters the regions and forgets them. A deregistration that throws
// still leaves the region out of the books: the memory is going, whatever
// the engine says.
void RegistrationCache::drop_regions_locked(const std::vector<size_t>& regions) {
  for (const size_t idx : regions) {
    const RegisteredRegion r = *regions_[idx];
    for_granules(reinterpret_cast<uintptr_t>(r.address), r.bytes, [&](uint64_t g) {
      auto& list = granules_[g];
      list.erase(std::find(list.begin(), list.end(), idx));
      if (list.empty()) granules_.erase(g);
    });
    regions_[idx].reset();
    spare_.push_back(idx);
    ++deregistrations_;
    try {
      registrar_.deregister_region(r.handle);
    } catch (...) {
    }
  }
}

void RegistrationCache::drop_chunk_locked(std::map<uintptr_t, Chunk>::iterator it) {
  drop_regions_locked(it->second.regions);
  chunks_.erase(it);
}

void RegistrationCache::before_unmap(void* address, uint64_t bytes) {
  const auto from = reinterpret_cast<uintptr_t>(address);
  const uintptr_t to = from + bytes;
  std::unique_lock lock(mutex_);
  auto it = chunks_.lower_bound(from);
  if (it != chunks_.begin() && std::prev(it)->second.end > from) --it;
  std::vector<std::pair<uintptr_t, Chunk>> touched;
  while (it != chunks_.end() && it->first < to) {
    touched.emplace_back(it->first, it->second);
    ++it;
  }
  for (const auto& [start, chunk] : touched) {
    drop_chunk_locked(chunks_.find(start));
    // What stays mapped is registered again; a failure there cannot stop
    // the unmap, so it leaves that part unregistered.
    for (const auto& [lo, hi] :
         {std::pair{start, std::min(from, chunk.end)}, std::pair{std::max(to, start), chunk.end}}) {
      if (lo >= hi) continue;
      try {
        map_locked(lo, hi - lo, chunk.device, max_region_);
      } catch (...) {
      }
    }
  }
}

std::optional<RegionLocation> RegistrationCache::locate(const void* address) const {
  const auto a = reinterpret_cast<uintptr_t>(address);
  std::shared_lock lock(mutex_);
  const auto g = granules_.find(a >> kGranuleShift);
  if (g == granules_.end()) return std::nullopt;
  for (const size_t idx : g->second) {
    const RegisteredRegion& r = *regions_[idx];
    const auto start = reinterpret_cast<uintptr_t>(r.address);
    if (a >= start && a < start + r.bytes) return RegionLocation{r, a - start};
  }
  return std::nullopt;
}

std::vector<RegisteredRegion> RegistrationCache::regions() const {
  std::shared_lock lock(mutex_);
  std::vector<RegisteredRegion> out;
  for (const auto& [start, chunk] : chunks_) {
    for (const size_t idx : chunk.regions) out.push_back(*regions_[idx]);
  }
  return out;
}

uint64_t RegistrationCache::registrations() const {
  std::shared_lock lock(mutex_);
  return registrations_;
}

uint64_t RegistrationCache::deregistrations() const {
  std::shared_lock lock(mutex_);
  return deregistrations_;
}

uint64_t RegistrationCache::hook_failures() const {
  std::shared_lock lock(mutex_);
  return hook_failures_;
}

std::string RegistrationCache::last_hook_failure() const {
  std::shared_lock lock(mutex_);
  return last_hook_failure_;
}

}  // namespace unipool
