// unipool: how a host pool is configured, and the UNIPOOL_HOST_CONF string
// that says it.
//
//   pinned=best_effort,thread_cache=performance,numa_node=0,huge_pages=thp
//
// Comma-separated key=value pairs; sizes take an optional K/M/G/T suffix
// (1024-based; "KiB", "KB", "K" mean the same). Unknown keys and bad values are
// errors that name the key. docs/host_pool.md lists every key.
//
// The parser never allocates (the malloc face parses UNIPOOL_HOST_CONF before
// any heap exists): parse_host_config() writes into a caller's struct and a
// caller's message buffer.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "unipool/status.hpp"

namespace unipool {

// Whether committed memory is page-locked (registered with CUDA).
enum class HostPinned : uint8_t {
  off,          // pageable memory; no CUDA call is made
  on,           // every block is pinned; an allocation that cannot be fails
  best_effort,  // pinned when registration works, else served pageable and counted
};

// Where a pool's memory stands with respect to pinning (HostPool, KVBlockPool).
// C: unipool_pinning_state_t; Python: the to_string() text.
enum class PinningState : uint8_t {
  pageable,          // pinned=off
  pageable_no_gpu,   // pinned asked, but no CUDA runtime with a device
  pinned,            // every committed chunk so far is pinned
  partially_pinned,  // best_effort and some registrations failed
};
const char* to_string(PinningState s) noexcept;

// How much free memory a thread keeps for itself (after rpmalloc's study).
enum class HostThreadCache : uint8_t {
  unlimited,    // keep every empty page; give back at thread exit only; a 4 MiB large cache
  performance,  // keep a few MiB of empty pages per thread; share half-free pages of blocks <= 8 KiB;
                // a 1 MiB large cache (freed large blocks up to 256 KiB, kept by the thread)
  size,         // keep no empty page; share quarter-free pages; free segments go back at once; no large cache
  none,         // no thread caches: shared per-class lists under one lock each
};

enum class HostHugePages : uint8_t {
  off,
  thp,      // madvise(MADV_HUGEPAGE) on the arenas ("on" is accepted for it)
  hugetlb,  // MAP_HUGETLB pages; falls back to normal pages, counted in stats
  // "auto": thp for each arena's memory past its first kHostAutoThpAfter
  // bytes, and for each segment of blocks up to 1 KiB that starts past
  // the first kHostAutoThpSmallAfter bytes of arena 0. A huge page is backed
  // whole at its first touch, so a small pool would pay a few MiB it does
  // not use; a large one saves the page walks of a working set the TLB
  // cannot map in 4 KiB pages. Blocks up to 1 KiB fill their 64 KiB pages
  // densely and a set of them is where page walks cost most, so their
  // segments get huge pages sooner (docs/host_pool.md, Configuration).
  automatic,
};
inline constexpr uint64_t kHostAutoThpAfter = uint64_t{128} << 20;
inline constexpr uint64_t kHostAutoThpSmallAfter = uint64_t{16} << 20;

struct HostPoolConfig {
  HostPinned pinned = HostPinned::off;
  HostThreadCache thread_cache = HostThreadCache::performance;
  HostHugePages huge_pages = HostHugePages::automatic;
  // NUMA node the arenas are bound to (mbind MPOL_BIND); -1 = no binding.
  int numa_node = -1;
  // Touch every page of a chunk when it is committed, so the pages are placed
  // (and faulted) by the pool, not by the first user. -1 = on when numa_node
  // is set, 0 off, 1 on.
  int first_touch = -1;
  // Virtual address space reserved per arena (more arenas are reserved when
  // one is full). Reserving costs no memory.
  uint64_t reserve = uint64_t{64} << 30;
  // Commit granularity: arenas grow by multiples of it. >= 2 MiB, a multiple
  // of 2 MiB.
  uint64_t chunk = uint64_t{4} << 20;
  // Largest single pinning registration (cudaHostRegister); commits larger
  // than this are registered in pieces.
  uint64_t max_pin = uint64_t{1} << 30;
  // Register new chunks from a background thread (one per pool) ahead of
  // demand, so allocations rarely pay for cudaHostRegister themselves. Needs
  // pinned=on or best_effort. docs/host_pool.md, "Background pinning".
  bool pin_thread = false;
  // Largest size served by thread-local pages (classes up to 8 KiB on
  // 64 KiB pages, larger ones on 256 KiB pages); larger sizes take the
  // large path. 1 KiB .. 128 KiB; 0 = the policy's default
  // (middle_max_or_default()).
  uint64_t middle_max = 0;
  // Requests above this get their own mapping, returned to the OS on free.
  uint64_t huge_threshold = uint64_t{32} << 20;
  // Recently freed huge mappings kept for reuse (a cache of whole mappings,
  // so a buffer freed and asked for again skips mmap): at most this many, and
  // at most huge_cache_bytes in all.
  uint32_t huge_cache = 8;
  uint64_t huge_cache_bytes = uint64_t{1} << 30;
  // Free committed arena bytes kept before whole free chunks are decommitted
  // (pageable pools only; pinned chunks stay registered). ~0 = the policy's
  // default (thread_cache=size/none: 0, otherwise 256 MiB).
  uint64_t retain = ~uint64_t{0};
  // Cap on committed bytes (arenas + huge mappings); 0 = none. Past it an
  // allocation fails with Status::out_of_space.
  uint64_t limit = 0;
  // Encode every free-list link of small and middle pages with a per-page
  // secret key and check each link and block before following it, so a
  // write after free is reported (Status::corrupted; the malloc face aborts
  // with a message) instead of being followed. Off by default: it costs a
  // few percent on small-object churn (docs/host_pool.md, "Hardened free
  // lists"); without it only a link that leaves its page is caught.
  bool hardened = false;

  // Throws std::invalid_argument naming the offending key. "" = defaults.
  static HostPoolConfig parse(std::string_view text);
  // parse(getenv("UNIPOOL_HOST_CONF")), or the defaults when it is unset.
  static HostPoolConfig from_env();
  // The config as a string parse() accepts.
  std::string to_string() const;
  // Checks the combination of values (parse() calls it too): Status::ok or
  // Status::bad_argument with *why naming the key.
  Status check(const char** why = nullptr) const noexcept;
  // middle_max, or when it is 0 the policy's: 32 KiB under
  // thread_cache=size/none, 128 KiB otherwise (faster for 32-128 KiB blocks,
  // which a thread then reuses from its block cache, for more resident
  // memory: docs/host_pool.md).
  uint64_t middle_max_or_default() const noexcept {
    if (middle_max != 0) return middle_max;
    const bool lean = thread_cache == HostThreadCache::size || thread_cache == HostThreadCache::none;
    return (lean ? uint64_t{32} : uint64_t{128}) << 10;
  }
};

// Non-allocating parse: fills *out (starting from its current values) from
// `text` (NUL-terminated; nullptr or "" change nothing). On error returns
// Status::bad_argument and writes a message naming the key into `error`
// (truncated to error_size, always NUL-terminated when error_size > 0).
Status parse_host_config(const char* text, HostPoolConfig* out, char* error,
                         size_t error_size) noexcept;

const char* to_string(HostPinned v) noexcept;
const char* to_string(HostThreadCache v) noexcept;
const char* to_string(HostHugePages v) noexcept;

}  // namespace unipool
