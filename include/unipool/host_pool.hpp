// unipool: the host pool, a thread-scalable allocator of (optionally pinned)
// host memory for inference servers: KV-cache offload buffers, staging of
// async copies, general host allocations.
//
// Size paths (docs/host_pool.md):
//   small  (<= 8 KiB)          fixed-size slabs per size class, in 64 KiB pages
//   middle (<= middle_max)     per-thread pages in 256 KiB pages
//   large  (<= huge_threshold) exact-size blocks from a RangeAllocator over the arenas
//   huge                       their own mapping, cached a little, then returned to the OS
// Small and middle pages belong to a thread: allocation pops the page's free
// list with no lock and no atomic read-modify-write, a free by the owner
// pushes it back the same way, a free by another thread goes to the page's
// atomic remote list. With thread_cache=none every page is shared and each
// size class has one lock.
//
// The engine never calls malloc or operator new on its allocation paths
// (metadata comes from mmap), so it can sit under a malloc replacement.
//
// Thread safety: every member is thread-safe except validate(), which wants
// no concurrent allocation or free in this pool.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "unipool/fence.hpp"
#include "unipool/host_config.hpp"
#include "unipool/host_history.hpp"
#include "unipool/host_stats.hpp"
#include "unipool/status.hpp"

namespace unipool {

// A piece of host memory the pool just pinned (registered with the CUDA
// driver) or is about to unpin and unmap: what a transfer engine (NIXL, UCX)
// registers too.
struct HostRegionEvent {
  void* address = nullptr;
  uint64_t bytes = 0;
};

// Every piece the pool pins (an arena's growth, in pieces of at most max_pin
// bytes; the chunks the pinning thread pins ahead; a huge block's mapping) is
// reported once by on_map, after it is pinned and before any block of it is
// handed out, and once by before_unmap, before it is unpinned. Pageable
// memory is never reported. The hooks run on the thread that pins, possibly
// with the pool's locks held: they must be quick, must not call into a host
// pool, and must not wait for a thread that may be using one. An exception
// from a hook is swallowed: the pool's books never depend on a hook.
struct HostRegionHooks {
  std::function<void(const HostRegionEvent&)> on_map;
  std::function<void(const HostRegionEvent&)> before_unmap;
};

class HostPool;
namespace host {
class Engine;  // csrc/host/engine.hpp
// The pool's engine, for the library's own faces (the malloc face calls its
// inlined fast paths directly); not an API.
Engine& engine_of(HostPool& pool) noexcept;
}  // namespace host

// What HostPool::allocate returns: the block, or nullptr and the reason.
// It converts to the pointer, so `void* p = pool.allocate(n);` reads as
// malloc does; `status` says why a nullptr came back.
struct HostAllocation {
  void* ptr = nullptr;
  Status status = Status::ok;

  operator void*() const noexcept { return ptr; }  // NOLINT: malloc-like use is the point
  explicit operator bool() const noexcept { return ptr != nullptr; }
};

class HostPool {
 public:
  // Throws std::invalid_argument for a bad config (the message names the key).
  explicit HostPool(const HostPoolConfig& config = {});
  explicit HostPool(std::string_view config_string)
      : HostPool(HostPoolConfig::parse(config_string)) {}
  // Returns every byte to the OS. Blocks still live become invalid.
  ~HostPool();

  HostPool(const HostPool&) = delete;
  HostPool& operator=(const HostPool&) = delete;

  // The process-wide pool, configured from UNIPOOL_HOST_CONF on first use.
  // Throws std::invalid_argument when that string is bad.
  static HostPool& default_pool();
  // The same without throwing (for a malloc replacement): nullptr when the
  // config is bad; then default_pool_error() says why. Never allocates.
  static HostPool* default_pool_nothrow() noexcept;
  static const char* default_pool_error() noexcept;

  // A block of at least `size` bytes, aligned to 16 (alignment 0) or to
  // `alignment` (a power of two). On failure ptr is nullptr, status says why
  // (zero_size, bad_alignment, too_large, out_of_space: limit reached, mmap
  // failed, or pinning failed with pinned=on) and last_error() gives details.
  HostAllocation allocate(size_t size) noexcept;
  HostAllocation allocate(size_t size, size_t alignment) noexcept;
  // A block of `size` zero bytes (calloc). Blocks above middle_max that are
  // new from the OS are not cleared (they read zero), so their pages are not
  // faulted in until used.
  HostAllocation allocate_zeroed(size_t size) noexcept;

  // realloc: a block of at least `size` bytes holding p's first bytes (as
  // many as both have), aligned to 16 (as realloc: an alignment p was
  // allocated with is not kept). p stays when it still fits and wastes at
  // most half; a huge block grows or shrinks by remapping where it can (not
  // when pinned, on hugetlb pages, growing under a limit, or with history
  // on); anything else moves, p freed. nullptr p allocates. On failure p
  // stays live and unchanged: not_live for a pointer that is not a live
  // block, else allocate()'s reasons.
  HostAllocation reallocate(void* p, size_t size) noexcept;

  // Frees a block. nullptr is a no-op. A pointer the pool did not give out, a
  // double free or an interior pointer returns Status::not_live and changes
  // nothing (last_error() names which).
  Status deallocate(void* p) noexcept;

  // Frees a block once `fence` (recorded on `source`) completes; until then
  // the block is not reused. The pool owns the fence from here on and
  // releases it to `source`, which must outlive the deferral. Deferred blocks
  // are reclaimed by collect_deferred() and by the pool's slow paths.
  Status deallocate_after(void* p, FenceSource& source, FenceId fence) noexcept;
  // Frees the deferred blocks whose fences completed; returns how many.
  size_t collect_deferred() noexcept;

  // Bytes usable at p (>= the size asked), 0 if p is not a live block.
  size_t usable_size(const void* p) const noexcept;
  // True when p is a live block of this pool.
  bool owns(const void* p) const noexcept;
  // True when p is a live block in pinned memory.
  bool is_pinned(const void* p) const noexcept;

  // Gives the calling thread's cached memory (its block cache, its pages)
  // back to the shared pool (what thread exit does).
  void flush_thread_cache() noexcept;
  // flush_thread_cache(), asks every other thread to give its block cache
  // back (at its next refill or free into a full cache), frees completed deferrals,
  // returns the huge cache to the OS and decommits whole free chunks of
  // pageable arenas.
  void trim() noexcept;

  // Installs region hooks (above) in place of the current ones (empty hooks:
  // none), then tells the new on_map of every piece pinned now, so a piece
  // is reported once whether it was pinned before or after. The old hooks are
  // told nothing. Status::bad_argument for a pool that pins nothing
  // (pinned=off, or no CUDA device): last_error() says which.
  Status set_region_hooks(HostRegionHooks hooks);

  HostPoolStats stats() const noexcept;
  void reset_peak_stats() noexcept;
  PinningState pinning_state() const noexcept;
  const HostPoolConfig& config() const noexcept;
  // With pin_thread=on: returns once the pinning thread has done what it was
  // asked (the chunks ahead of each arena are registered, or failed and
  // counted) and has nothing in flight; stats() are then exact. At once
  // without a pinning thread. E.g. after a warm-up allocation, before serving.
  void wait_for_pinning() const noexcept;

  // History (unipool/host_history.hpp): from now on keeps the last
  // `max_entries` alloc, free and pinning events, dropping what was recorded
  // before; 0 stops and drops. Off by default; off, allocate and deallocate
  // pay one branch. False when the ring's memory could not be mapped (the
  // history is then off). Blocks of the malloc face are not recorded.
  bool record_history(size_t max_entries) noexcept;
  bool history_enabled() const noexcept;
  size_t history_max_entries() const noexcept;    // 0 when off
  std::vector<HostHistoryEntry> history() const;  // oldest first
  // {"max_entries": N, "entries": [{"action": "alloc", "address": A, "size": S, "time_ns": T}, ...]}
  std::string history_json() const;

  // Checks every invariant (exact accounting: allocated + deferred + cached +
  // arena free + overhead == committed, every page and list consistent, every
  // arena's range allocator valid). Wants no concurrent use of the pool.
  bool validate(std::string* why = nullptr) const;

  // The message of this thread's last failed call on any host pool (which
  // key of a config, which block a bad free named, why a mapping failed).
  static const char* last_error() noexcept;

 private:
  friend host::Engine& host::engine_of(HostPool& pool) noexcept;
  host::Engine* engine_;
};

}  // namespace unipool
