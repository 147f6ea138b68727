// unipool malloc face: the operations behind the C and C++ entry points.
//
// Both malloc_api.cpp and operator_new.cpp include this, so each entry point
// compiles to the engine's inlined fast path, and a call out of line for
// everything else. Conventions (glibc's):
//   - size 0 gets a unique block of the smallest size, as malloc(1);
//   - failure returns nullptr with errno = ENOMEM (EINVAL for a bad
//     alignment, where POSIX says so);
//   - free(nullptr) does nothing; freeing anything that is not a live block
//     of ours aborts with a message naming the call and the pointer.
#pragma once

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "core/align.hpp"
#include "host/engine_fast.hpp"
#include "malloc/bootstrap_arena.hpp"
#include "malloc/face_pool.hpp"
#include "malloc/fatal.hpp"

namespace unipool::malloc_face {

// The pool's own alignment without asking (HostPool: "aligned to 16").
inline constexpr size_t kNaturalAlignment = 16;

// errno = ENOMEM, and once per process a line on stderr when the pool's
// `limit` was the reason (out of line: only failures pay for it).
void allocation_failed(HostPool* pool, Status why) noexcept;

// The pool's engine, once pool() or existing_pool() returned the pool:
// g_engine was published before g_pool.
inline host::Engine& engine() noexcept { return *g_engine.load(std::memory_order_relaxed); }

// Each entry point tries the engine's inlined fast path first, with nothing
// else on the way (no test of the pool, of size 0, of the bootstrap arena):
// those cases fail the fast path and go out of line. The face's blocks are
// never recorded in a history (host_pool.hpp), so it calls the engine, not
// HostPool.
void* allocate_slow(size_t size, size_t alignment) noexcept;
void release_slow(void* block, const char* call) noexcept;

inline void* allocate(size_t size) noexcept {
  if (host::Engine* e = g_engine.load(std::memory_order_acquire); UNIPOOL_LIKELY(e != nullptr)) {
    if (void* block = e->allocate_fast(size); UNIPOOL_LIKELY(block != nullptr)) return block;
  }
  return allocate_slow(size, kNaturalAlignment);
}

// alignment: a power of two. Every caller checks or rounds it first
// (aligned_alloc, posix_memalign, memalign, valloc, pvalloc, the aligned
// operator new): the engine's aligned fast path indexes a table by it.
inline void* allocate_aligned(size_t alignment, size_t size) noexcept {
  UNIPOOL_ASSERT(unipool::is_power_of_two(alignment), "callers check the alignment");
  if (alignment <= kNaturalAlignment) return allocate(size);
  if (host::Engine* e = g_engine.load(std::memory_order_acquire); UNIPOOL_LIKELY(e != nullptr)) {
    if (void* block = e->allocate_aligned_fast(size, alignment); UNIPOOL_LIKELY(block != nullptr)) return block;
  }
  return allocate_slow(size, alignment);
}

// calloc: the pool clears only memory that may hold old data.
void* allocate_zeroed(size_t size) noexcept;

[[noreturn]] void report_bad_free(const char* call, void* block) noexcept;

inline void release(void* block, const char* call) noexcept {
  if (host::Engine* e = g_engine.load(std::memory_order_acquire);
      UNIPOOL_LIKELY(e != nullptr) && e->free_owned(block)) {
    return;
  }
  release_slow(block, call);
}

// Bytes usable at block; 0 for nullptr and for anything that is not ours.
inline size_t usable_size(const void* block) noexcept {
  if (block == nullptr) return 0;
  if (BootstrapArena::contains(block)) return BootstrapArena::size_of(block);
  HostPool* p = existing_pool();
  return p != nullptr ? p->usable_size(block) : 0;
}

// `call` names the entry point in the message of a bad free.
void* reallocate(void* block, size_t size, const char* call = "realloc") noexcept;

}  // namespace unipool::malloc_face
