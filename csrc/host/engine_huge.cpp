// unipool host: huge blocks, each its own mapping, returned to the OS on free
// except for a few kept in a cache so that a workload
// that frees and re-allocates big buffers does not fault every page again.
#include <cerrno>
#include <cstring>

#include "backend/host_pinner.hpp"
#include "backend/pin_pieces.hpp"
#include "host/engine.hpp"

namespace unipool::host {
namespace {

constexpr uint64_t kHugeTlbPage = uint64_t{2} << 20;

}  // namespace

void Engine::unmap_huge(char* base, uint64_t bytes, bool pinned) noexcept {
  if (pinned && pinner_ != nullptr) backend::unpin_pieces(*pinner_, base, bytes, config_.max_pin);
  backend::os::release(base, bytes);
  counters_.committed.add(-static_cast<int64_t>(bytes));
  if (pinned) counters_.pinned.add(-static_cast<int64_t>(bytes));
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
  if (c.hugetlb_fallback) counters_.hugetlb_fallbacks.fetch_add(1, std::memory_order_relaxed);
  counters_.committed.add(static_cast<int64_t>(bytes));
  return base;
}

// Registers a new mapping in pieces of at most max_pin bytes. A failure
// undoes the pieces done; with pinned=on it also unmaps and fails the call
// (false), with best_effort the mapping is served pageable and counted.
bool Engine::pin_huge(HugeEntry* e) noexcept {
  char* base = reinterpret_cast<char*>(e->ptr);
  const backend::PinProgress p = backend::pin_pieces(*pinner_, base, e->map_bytes, config_.max_pin);
  counters_.registrations.fetch_add(p.registrations, std::memory_order_relaxed);
  if (p.pinned_bytes == e->map_bytes) {
    e->pinned = true;
    counters_.pinned.add(static_cast<int64_t>(e->map_bytes));
    return true;
  }
  counters_.pin_failures.fetch_add(1, std::memory_order_relaxed);
  backend::unpin_pieces(*pinner_, base, p.pinned_bytes, config_.max_pin);
  const char* error = p.failure.message;
  if (config_.pinned == HostPinned::on) {
    unmap_huge(base, e->map_bytes, false);
    fail(Status::out_of_space, Message{}
                                   .add("unipool host pool: pinning ")
                                   .add_dec(e->map_bytes)
                                   .add(" bytes failed (pinned=on): ")
                                   .add(error));
    return false;
  }
  counters_.pageable_bytes.fetch_add(e->map_bytes, std::memory_order_relaxed);
  e->pin_failed = true;
  return true;
}

// A new mapping for `e`, pinned as the pool is configured.
// setup_lock_ is taken with a limit only (not analysed).
UNIPOOL_NO_THREAD_SAFETY_ANALYSIS bool Engine::map_new_huge(size_t size, uint64_t bytes, uint64_t align,
                                                            HugeEntry* e) noexcept {
  // With a limit, checking the headroom and counting the mapping are one
  // step, as for arenas. Not for the pool's own requests: they may come
  // while this thread holds the lock (the CUDA runtime inside a growth).
  const bool serial = config_.limit != 0 && !e->internal;
  if (serial) setup_lock_.lock();
  char* base = map_huge(size, bytes, align, e->internal);
  if (serial) setup_lock_.unlock();
  if (base == nullptr) return false;
  e->ptr = reinterpret_cast<uintptr_t>(base);
  e->map_bytes = bytes;
  if (e->internal) return true;
  huge_.note_miss();
  return !pin_available_ || pin_huge(e);
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
  HugeEntry entry;
  entry.requested = size;
  entry.internal = internal;
  // A cached mapping holds what its last user wrote: not fresh.
  const bool from_cache = !internal && huge_.take_cached(bytes, align, &entry);
  if (!from_cache && !map_new_huge(size, bytes, align, &entry)) return nullptr;
  if (huge_.insert(entry)) {
    counters_.requested.add(static_cast<int64_t>(size));
    counters_.allocated.add(static_cast<int64_t>(entry.map_bytes));
    if (fresh != nullptr) *fresh = !from_cache;
    return reinterpret_cast<void*>(entry.ptr);
  }
  if (entry.pin_failed) counters_.pageable_bytes.fetch_sub(entry.map_bytes, std::memory_order_relaxed);
  unmap_huge(reinterpret_cast<char*>(entry.ptr), entry.map_bytes, entry.pinned);
  fail(Status::out_of_space, "unipool host pool: no memory for the huge block table");
  return nullptr;
}

Status Engine::free_huge(void* p) noexcept {
  HugeEntry entry;
  if (!huge_.remove(p, &entry)) {
    return misuse("free of a pointer that is not a live block of this pool (foreign, interior or double free)", p);
  }
  counters_.requested.add(-static_cast<int64_t>(entry.requested));
  counters_.allocated.add(-static_cast<int64_t>(entry.map_bytes));
  const HugeMapping freed{reinterpret_cast<char*>(entry.ptr), entry.map_bytes, entry.pinned, entry.pin_failed};
  HugeMapping out[kMaxHugeCache];
  uint32_t n = 0;
  if (entry.internal) {
    out[n++] = freed;  // the engine's own blocks are never cached
  } else {
    n = huge_.cache(freed, out);
  }
  unmap_huge_mappings(out, n);
  return Status::ok;
}

void Engine::unmap_huge_mappings(const HugeMapping* mappings, uint32_t n) noexcept {
  for (uint32_t i = 0; i < n; ++i) {
    if (mappings[i].pin_failed) counters_.pageable_bytes.fetch_sub(mappings[i].bytes, std::memory_order_relaxed);
    unmap_huge(mappings[i].base, mappings[i].bytes, mappings[i].pinned);
  }
}

// realloc of a huge block: mremap moves its page tables, not its bytes, and
// a shrink gives the tail back. nullptr, the block unchanged, when it cannot
// be done so and the caller copies:
//   - pinned: the registration covers the old range and cannot follow it;
//   - hugetlb pages, which mremap cannot grow;
//   - growth under a limit (the headroom check and the count are one step
//     only on the allocation path);
//   - the kernel refuses (no memory to account the growth).
// The books' lock is held across mremap so the entry is re-keyed in one step.
void* Engine::resize_huge(void* p, size_t size) noexcept {
  if (config_.huge_pages == HostHugePages::hugetlb) return nullptr;
  const uint64_t bytes = round_up(size, backend::os::page_size());
  void* result = nullptr;
  huge_.update(p, [&](HugeEntry& entry) {
    if (entry.pinned || entry.internal || (bytes > entry.map_bytes && config_.limit != 0)) return false;
    if (bytes != entry.map_bytes) {
      void* moved = backend::os::resize(p, entry.map_bytes, bytes);
      if (moved == nullptr) return false;
      const int64_t delta = static_cast<int64_t>(bytes) - static_cast<int64_t>(entry.map_bytes);
      counters_.committed.add(delta);
      counters_.allocated.add(delta);
      if (entry.pin_failed) counters_.pageable_bytes.fetch_add(static_cast<uint64_t>(delta), std::memory_order_relaxed);
      entry.ptr = reinterpret_cast<uintptr_t>(moved);
      entry.map_bytes = bytes;
    }
    counters_.requested.add(static_cast<int64_t>(size) - static_cast<int64_t>(entry.requested));
    entry.requested = size;
    result = reinterpret_cast<void*>(entry.ptr);
    return true;
  });
  return result;
}

void Engine::drop_huge_cache() noexcept {
  HugeMapping dropped[kMaxHugeCache];
  unmap_huge_mappings(dropped, huge_.drop_cache(dropped));
}

}  // namespace unipool::host
