// unipool malloc face: which pool serves malloc, and getting it safely.
//
// Every call goes to HostPool::default_pool_nothrow(), configured from
// UNIPOOL_HOST_CONF. The pointer is cached in a global after the first call,
// so the hot path is one load and a test. While the calling thread is
// building the pool, its allocations come from the BootstrapArena instead
// (building the pool must not recurse into building the pool).
#pragma once

#include <atomic>

#include "unipool/host_pool.hpp"

namespace unipool::malloc_face {

extern std::atomic<HostPool*> g_pool;

// nullptr only while this thread is building the pool (use the bootstrap
// arena then). Aborts with a message when UNIPOOL_HOST_CONF is bad.
HostPool* pool_slow() noexcept;

inline HostPool* pool() noexcept {
  HostPool* p = g_pool.load(std::memory_order_acquire);
  return p != nullptr ? p : pool_slow();
}

// The pool if it exists yet, without building it (free and usable_size of a
// pointer need no pool that does not exist).
inline HostPool* existing_pool() noexcept { return g_pool.load(std::memory_order_acquire); }

}  // namespace unipool::malloc_face
