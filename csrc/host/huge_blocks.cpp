#include "host/huge_blocks.hpp"

namespace unipool::host {

void HugeBlocks::set_cache_limits(uint32_t max_mappings, uint64_t max_bytes) noexcept {
  max_mappings_ = max_mappings < kMaxHugeCache ? max_mappings : kMaxHugeCache;
  max_bytes_ = max_bytes;
}

bool HugeBlocks::insert(const HugeEntry& e) noexcept {
  LockGuard guard(lock_);
  if (!table_.insert(e)) return false;
  count_.fetch_add(1, std::memory_order_relaxed);
  return true;
}

bool HugeBlocks::find(const void* p, HugeEntry* out) const noexcept {
  LockGuard guard(lock_);
  const HugeEntry* e = table_.find(reinterpret_cast<uintptr_t>(p));
  if (e == nullptr) return false;
  *out = *e;
  return true;
}

bool HugeBlocks::remove(const void* p, HugeEntry* out) noexcept {
  LockGuard guard(lock_);
  HugeEntry* e = table_.find(reinterpret_cast<uintptr_t>(p));
  if (e == nullptr) return false;
  *out = *e;
  table_.erase(e);
  count_.fetch_sub(1, std::memory_order_relaxed);
  return true;
}

bool HugeBlocks::take_cached(uint64_t bytes, uint64_t align, HugeEntry* e) noexcept {
  LockGuard guard(lock_);
  uint32_t best = kMaxHugeCache;
  for (uint32_t i = 0; i < cache_count_; ++i) {
    const HugeMapping& m = cache_[i];
    if (m.bytes >= bytes && m.bytes - bytes <= bytes / 4 && reinterpret_cast<uintptr_t>(m.base) % align == 0 &&
        (best == kMaxHugeCache || m.bytes < cache_[best].bytes)) {
      best = i;
    }
  }
  if (best == kMaxHugeCache) return false;
  const HugeMapping& m = cache_[best];
  e->ptr = reinterpret_cast<uintptr_t>(m.base);
  e->map_bytes = m.bytes;
  e->pinned = m.pinned;
  e->pin_failed = m.pin_failed;
  cache_bytes_ -= m.bytes;
  for (uint32_t i = best + 1; i < cache_count_; ++i) cache_[i - 1] = cache_[i];
  --cache_count_;
  hits_.fetch_add(1, std::memory_order_relaxed);
  return true;
}

void HugeBlocks::pop_oldest(HugeMapping* out) noexcept {
  *out = cache_[0];
  cache_bytes_ -= cache_[0].bytes;
  for (uint32_t i = 1; i < cache_count_; ++i) cache_[i - 1] = cache_[i];
  --cache_count_;
}

uint32_t HugeBlocks::cache(const HugeMapping& m, HugeMapping out[kMaxHugeCache]) noexcept {
  if (max_mappings_ == 0 || m.bytes > max_bytes_) {
    out[0] = m;
    return 1;
  }
  LockGuard guard(lock_);
  uint32_t n = 0;
  while (cache_count_ > 0 && (cache_count_ >= max_mappings_ || cache_bytes_ + m.bytes > max_bytes_)) {
    pop_oldest(&out[n++]);
  }
  cache_[cache_count_++] = m;
  cache_bytes_ += m.bytes;
  return n;
}

uint32_t HugeBlocks::drop_cache(HugeMapping out[kMaxHugeCache]) noexcept {
  LockGuard guard(lock_);
  uint32_t n = 0;
  while (cache_count_ > 0) pop_oldest(&out[n++]);
  return n;
}

uint64_t HugeBlocks::cached_bytes() const noexcept {
  LockGuard guard(lock_);
  return cache_bytes_;
}

HugeTally HugeBlocks::tally() const noexcept {
  LockGuard guard(lock_);
  const auto live = table_.tally([](const HugeEntry& e) { return e.map_bytes; });
  HugeTally t;
  t.blocks = live.entries;
  t.block_bytes = live.bytes;
  for (uint32_t i = 0; i < cache_count_; ++i) t.cached_bytes += cache_[i].bytes;
  return t;
}

}  // namespace unipool::host
