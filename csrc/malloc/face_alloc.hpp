// unipool malloc face: the operations behind the C and C++ entry points.
//
// Both malloc_api.cpp and operator_new.cpp include this, so each entry point
// compiles to a direct call into the pool. Conventions (glibc's):
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

// Before the pool exists (see face_pool.hpp): the bootstrap arena. Threads
// racing within the start-up share can fill it: the pool then, built now
// (unless this thread is building it).
inline void* bootstrap_allocate(size_t size, size_t alignment) noexcept {
  void* block = BootstrapArena::allocate(size, alignment);
  if (block != nullptr) return block;
  HostPool* p = pool_slow(SIZE_MAX);  // past any share: builds the pool
  if (p == nullptr) {
    errno = ENOMEM;
    return nullptr;
  }
  const HostAllocation a = alignment <= kNaturalAlignment ? p->allocate(size) : p->allocate(size, alignment);
  if (a.ptr == nullptr) allocation_failed(p, a.status);
  return a.ptr;
}

// The pool's engine, once pool() or existing_pool() returned the pool: its
// release store published this.
inline host::Engine& engine() noexcept { return *g_engine.load(std::memory_order_relaxed); }

// The engine's answer (the engine reports a failure through the thread's
// last status, as HostPool does), with errno set on a failure.
inline void* checked(HostPool* p, void* block) noexcept {
  if (block == nullptr) allocation_failed(p, host::thread_last_status());
  return block;
}

// Each allocation goes to the engine's member, or with history on to
// HostPool's, which records it.
inline void* allocate(size_t size) noexcept {
  if (size == 0) size = 1;
  HostPool* p = pool(size);
  if (p == nullptr) return bootstrap_allocate(size, kNaturalAlignment);
  host::Engine& e = engine();
  return checked(p, UNIPOOL_LIKELY(!e.history().on()) ? e.allocate(size) : p->allocate(size).ptr);
}

// alignment: a power of two (callers check).
inline void* allocate_aligned(size_t alignment, size_t size) noexcept {
  if (alignment <= kNaturalAlignment) return allocate(size);
  if (size == 0) size = 1;
  // The alignment's padding counts against the bootstrap arena's share.
  HostPool* p = pool(size < SIZE_MAX - alignment ? size + alignment : SIZE_MAX);
  if (p == nullptr) return bootstrap_allocate(size, alignment);
  host::Engine& e = engine();
  return checked(
      p, UNIPOOL_LIKELY(!e.history().on()) ? e.allocate_aligned(size, alignment) : p->allocate(size, alignment).ptr);
}

// calloc: the pool clears only memory that may hold old data.
inline void* allocate_zeroed(size_t size) noexcept {
  if (size == 0) size = 1;
  HostPool* p = pool(size);
  if (p == nullptr) {
    void* block = bootstrap_allocate(size, kNaturalAlignment);
    if (block != nullptr) std::memset(block, 0, size);
    return block;
  }
  host::Engine& e = engine();
  return checked(p, UNIPOOL_LIKELY(!e.history().on()) ? e.allocate_zeroed(size) : p->allocate_zeroed(size).ptr);
}

[[noreturn]] void report_bad_free(const char* call, void* block) noexcept;

inline void release(void* block, const char* call) noexcept {
  if (block == nullptr || BootstrapArena::contains(block)) return;  // bootstrap blocks are never reused
  HostPool* p = existing_pool();
  if (p != nullptr) {
    host::Engine& e = engine();
    if ((UNIPOOL_LIKELY(!e.history().on()) ? e.free(block) : p->deallocate(block)) == Status::ok) return;
  }
  report_bad_free(call, block);
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
