// unipool malloc face: which pool serves malloc, and getting it safely.
//
// Every call goes to HostPool::default_pool_nothrow(), configured from
// UNIPOOL_HOST_CONF. The pointer is cached in a global once built, so the
// hot path is one load and a test. Before that, allocations come from the
// BootstrapArena:
//   - while the process's requests so far fit its start-up share, so that a
//     process that allocates little (/bin/true: only the C++ runtime's
//     emergency exception buffer, allocated at load) builds no pool at all:
//     no address-space reservation, no metadata, no first segment faulted;
//   - while the calling thread is building the pool (building it must not
//     recurse into building it).
#pragma once

#include <atomic>

#include "unipool/host_pool.hpp"

namespace unipool::malloc_face {

extern std::atomic<HostPool*> g_pool;
// g_pool's engine, set before g_pool: malloc and free call its inlined fast
// paths (face_alloc.hpp) rather than HostPool's members, a call and a load
// fewer on a chain that is most of their cost; non-null means the pool is
// built.
extern std::atomic<host::Engine*> g_engine;

// The pool for a request of `size` bytes, built if it must be; nullptr when
// the bootstrap arena serves it (see above). Aborts with a message when
// UNIPOOL_HOST_CONF is bad.
HostPool* pool_slow(size_t size) noexcept;

inline HostPool* pool(size_t size) noexcept {
  HostPool* p = g_pool.load(std::memory_order_acquire);
  return p != nullptr ? p : pool_slow(size);
}

// True on a thread inside the engine: building the pool, or in the
// engine's InternalScope (its own containers allocate there).
bool inside_engine() noexcept;

// The pool if it exists yet, without building it (free and usable_size of a
// pointer need no pool that does not exist).
inline HostPool* existing_pool() noexcept { return g_pool.load(std::memory_order_acquire); }

}  // namespace unipool::malloc_face
