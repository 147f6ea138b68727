// unipool host: huge blocks, each its own mapping, returned to the OS on free
// except for a few kept in a cache (seed 001's BigCache) so that a workload
// that frees and re-allocates big buffers does not fault every page again.
#include <cerrno>
#include <cstring>

#include "backend/host_pinner.hpp"
#include "host/engine.hpp"

namespace unipool::host {
namespace {

constexpr uint64_t kHugeTlbPage = uint64_t{2} << 20;

}  // namespace

void Engine::unmap_huge(char* base, uint64_t bytes, bool pinned) noexcept {
  if (pinned && pinner_ != nullptr) {
    for (uint64_t off = 0; off < bytes; off += config_.max_pin) pinner_->unpin(base + off);
  }
  backend::os::release(base, bytes);
  committed_.add(-static_cast<int64_t>(bytes));
  if (pinned) pinned_.add(-static_cast<int64_t>(bytes));
}

void Engine::fail_commit(size_t size, uint64_t bytes, const backend::os::CommitResult& c) const noexcept {
  if (c.error == ENOMEM && std::strcmp(c.what, "mprotect") == 0) {
    fail(Status::out_of_space, Message{}.add("unipool host pool: cannot allocate ").add_dec(size)
                                   .add(" bytes: more than this machine's memory and swap can back (the kernel "
                                        "refused to commit ").add_dec(bytes).add(" bytes: ENOMEM)"));
    return;
  }
  fail(Status::out_of_space, Message{}.add("unipool host pool: ").add(c.what).add(" failed for ")
                                 .add_dec(bytes).add(" bytes (errno ").add_dec(static_cast<uint64_t>(c.error)).add(")"));
}

char* Engine::map_huge(size_t size, uint64_t bytes, uint64_t align, bool internal) noexcept {
  if (bytes > headroom()) {
    fail(Status::out_of_space, Message{}.add("unipool host pool: cannot allocate ").add_dec(size)
                                   .add(" bytes: the pool's limit on committed bytes is reached"));
    return nullptr;
  }
  // Accounted (backend/os/os_memory.hpp): a mapping no memory can back is
  // refused by the kernel's overcommit heuristic here, as glibc's would be,
  // instead of killing the process when its pages are touched.
  char* base = static_cast<char*>(backend::os::reserve(bytes, align, true));
  if (base == nullptr) {
    // The address space itself has no room (an address-space limit, or a
    // sanitizer's memory layout): say so, the size alone explains nothing.
    fail(Status::out_of_space, Message{}.add("unipool host pool: cannot allocate ").add_dec(size)
                                   .add(" bytes: no room in the process's address space for a mapping of ")
                                   .add_dec(bytes).add(" bytes"));
    return nullptr;
  }
  backend::os::CommitOptions options = arena_settings_.commit;
  if (internal) options = {};
  options.accounted = true;
  const backend::os::CommitResult c = backend::os::commit(base, bytes, options);
  if (!c.ok) {
    backend::os::release(base, bytes);
    fail_commit(size, bytes, c);
    return nullptr;
  }
  if (c.hugetlb_fallback) hugetlb_fallbacks_.fetch_add(1, std::memory_order_relaxed);
  committed_.add(static_cast<int64_t>(bytes));
  return base;
}

void* Engine::allocate_huge(size_t size, size_t alignment, bool internal, bool* fresh) noexcept {
  const uint64_t granule = config_.huge_pages == HostHugePages::hugetlb && !internal ? kHugeTlbPage
                                                                                    : backend::os::page_size();
  const uint64_t bytes = round_up(size, granule);
  const uint64_t align = alignment > granule ? alignment : granule;
  if (!internal) {
    ensure_pinner();
    Message why;
    if (cannot_pin(&why)) {
      fail(Status::backend_error, why.add(": cannot map ").add_dec(size).add(" bytes"));
      return nullptr;
    }
  }
  char* base = nullptr;
  uint64_t map_bytes = 0;
  bool from_cache = false;  // a cached mapping holds what its last user wrote
  bool pinned = false;
  bool pin_failed = false;
  if (!internal) {
    // The smallest cached mapping that fits without wasting over a quarter.
    LockGuard lock(huge_lock_);
    uint32_t best = kMaxHugeCache;
    for (uint32_t i = 0; i < huge_cache_count_; ++i) {
      const CachedMapping& m = huge_cache_[i];
      if (m.bytes >= bytes && m.bytes - bytes <= bytes / 4 && reinterpret_cast<uintptr_t>(m.base) % align == 0 &&
          (best == kMaxHugeCache || m.bytes < huge_cache_[best].bytes)) {
        best = i;
      }
    }
    if (best != kMaxHugeCache) {
      base = huge_cache_[best].base;
      map_bytes = huge_cache_[best].bytes;
      pinned = huge_cache_[best].pinned;
      pin_failed = huge_cache_[best].pin_failed;
      huge_cache_bytes_ -= map_bytes;
      for (uint32_t i = best + 1; i < huge_cache_count_; ++i) huge_cache_[i - 1] = huge_cache_[i];
      --huge_cache_count_;
      huge_hits_.fetch_add(1, std::memory_order_relaxed);
      from_cache = true;
    }
  }
  if (base == nullptr) {
    // With a limit, checking the headroom and counting the mapping are one
    // step, as for arenas. Not for the pool's own requests: they may come
    // while this thread holds the lock (the CUDA runtime inside a growth).
    const bool serial = config_.limit != 0 && !internal;
    if (serial) setup_lock_.lock();
    base = map_huge(size, bytes, align, internal);
    if (serial) setup_lock_.unlock();
    if (base == nullptr) return nullptr;
    map_bytes = bytes;
    if (!internal) huge_misses_.fetch_add(1, std::memory_order_relaxed);
    if (!internal && pin_available_) {
      // Registered in pieces of at most max_pin bytes.
      uint64_t done = 0;
      const char* error = nullptr;
      for (; done < map_bytes; done += config_.max_pin) {
        const uint64_t n = map_bytes - done < config_.max_pin ? map_bytes - done : config_.max_pin;
        const BackendStatus st = pinner_->pin(base + done, n);
        if (!st.is_ok()) {
          error = st.message;
          break;
        }
        registrations_.fetch_add(1, std::memory_order_relaxed);
      }
      if (error == nullptr) {
        pinned = true;
        pinned_.add(static_cast<int64_t>(map_bytes));
      } else {
        pin_failures_.fetch_add(1, std::memory_order_relaxed);
        for (uint64_t off = 0; off < done; off += config_.max_pin) pinner_->unpin(base + off);
        if (config_.pinned == HostPinned::on) {
          unmap_huge(base, map_bytes, false);
          fail(Status::out_of_space, Message{}.add("unipool host pool: pinning ").add_dec(map_bytes)
                                         .add(" bytes failed (pinned=on): ").add(error));
          return nullptr;
        }
        pageable_bytes_.fetch_add(map_bytes, std::memory_order_relaxed);
        pin_failed = true;
      }
    }
  }
  HugeEntry entry;
  entry.ptr = reinterpret_cast<uintptr_t>(base);
  entry.map_bytes = map_bytes;
  entry.requested = size;
  entry.pinned = pinned;
  entry.internal = internal;
  entry.pin_failed = pin_failed;
  {
    LockGuard lock(huge_lock_);
    if (huge_.insert(entry)) {
      huge_count_.fetch_add(1, std::memory_order_relaxed);
      requested_.add(static_cast<int64_t>(size));
      allocated_.add(static_cast<int64_t>(map_bytes));
      if (fresh != nullptr) *fresh = !from_cache;
      return base;
    }
  }
  if (pin_failed) pageable_bytes_.fetch_sub(map_bytes, std::memory_order_relaxed);
  unmap_huge(base, map_bytes, pinned);
  fail(Status::out_of_space, "unipool host pool: no memory for the huge block table");
  return nullptr;
}

Status Engine::free_huge(void* p) noexcept {
  CachedMapping evicted[kMaxHugeCache];
  uint32_t evicted_count = 0;
  {
    LockGuard lock(huge_lock_);
    HugeEntry* e = huge_.find(reinterpret_cast<uintptr_t>(p));
    if (e == nullptr) {
      return misuse("free of a pointer that is not a live block of this pool (foreign, interior or double free)", p);
    }
    const HugeEntry entry = *e;
    huge_.erase(e);
    huge_count_.fetch_sub(1, std::memory_order_relaxed);
    requested_.add(-static_cast<int64_t>(entry.requested));
    allocated_.add(-static_cast<int64_t>(entry.map_bytes));
    const CachedMapping freed{reinterpret_cast<char*>(entry.ptr), entry.map_bytes, entry.pinned, entry.pin_failed};
    const bool cacheable = !entry.internal && config_.huge_cache > 0 && entry.map_bytes <= config_.huge_cache_bytes;
    if (cacheable) {
      // Oldest first out, until the new one fits both limits.
      while (huge_cache_count_ > 0 && (huge_cache_count_ >= config_.huge_cache ||
                                       huge_cache_bytes_ + entry.map_bytes > config_.huge_cache_bytes)) {
        evicted[evicted_count++] = huge_cache_[0];
        huge_cache_bytes_ -= huge_cache_[0].bytes;
        for (uint32_t i = 1; i < huge_cache_count_; ++i) huge_cache_[i - 1] = huge_cache_[i];
        --huge_cache_count_;
      }
      huge_cache_[huge_cache_count_++] = freed;
      huge_cache_bytes_ += freed.bytes;
    } else {
      evicted[evicted_count++] = freed;
    }
  }
  for (uint32_t i = 0; i < evicted_count; ++i) {
    if (evicted[i].pin_failed) pageable_bytes_.fetch_sub(evicted[i].bytes, std::memory_order_relaxed);
    unmap_huge(evicted[i].base, evicted[i].bytes, evicted[i].pinned);
  }
  return Status::ok;
}

void Engine::drop_huge_cache() noexcept {
  CachedMapping dropped[kMaxHugeCache];
  uint32_t n = 0;
  {
    LockGuard lock(huge_lock_);
    for (uint32_t i = 0; i < huge_cache_count_; ++i) dropped[n++] = huge_cache_[i];
    huge_cache_count_ = 0;
    huge_cache_bytes_ = 0;
  }
  for (uint32_t i = 0; i < n; ++i) {
    if (dropped[i].pin_failed) pageable_bytes_.fetch_sub(dropped[i].bytes, std::memory_order_relaxed);
    unmap_huge(dropped[i].base, dropped[i].bytes, dropped[i].pinned);
  }
}

}  // namespace unipool::host
