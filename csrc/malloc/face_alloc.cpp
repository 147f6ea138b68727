#include "malloc/face_alloc.hpp"

#include <atomic>

namespace unipool::malloc_face {

void report_bad_free(const char* call, void* block) noexcept {
  // The pool refused: its last error says which misuse it saw.
  const char* why = existing_pool() != nullptr ? HostPool::last_error() : nullptr;
  fatal(call, block, why != nullptr && *why != '\0' ? why : "not a block unipool gave out");
}

// A program the pool's limit refuses usually dies next, of its own NULL
// check, an uncaught std::bad_alloc (libstdc++ may even terminate without a
// word when it cannot allocate the exception) or a NULL dereference in a
// library: one line first says it was the limit. Never for other failures
// (impossible sizes, which glibc refuses silently too), and only once.
void allocation_failed(HostPool* pool, Status why) noexcept {
  if (pool->config().limit != 0 && why == Status::out_of_space) {
    static std::atomic<bool> told{false};
    if (!told.exchange(true, std::memory_order_relaxed)) {
      warn("an allocation failed: UNIPOOL_HOST_CONF sets a limit on committed bytes, and: ", HostPool::last_error());
    }
  }
  errno = ENOMEM;  // after write(2), which may set it
}

namespace {
// Before the pool exists (see face_pool.hpp): the bootstrap arena. Threads
// racing within the start-up share can fill it: the pool then, built now
// (unless this thread is building it).
void* bootstrap_allocate(size_t size, size_t alignment) noexcept {
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

// The engine's answer (the engine reports a failure through the thread's
// last status, as HostPool does), with errno set on a failure.
void* checked(HostPool* p, void* block) noexcept {
  if (block == nullptr) allocation_failed(p, host::thread_last_status());
  return block;
}
}  // namespace

// What the inlined fast path did not serve. The engine's fast path already
// failed for this request, so it goes to the engine's slow path directly.
// An alignment's padding counts against the bootstrap arena's share.
void* allocate_slow(size_t size, size_t alignment) noexcept {
  if (size == 0) size = 1;
  const size_t pad = alignment > kNaturalAlignment ? alignment : 0;
  HostPool* p = pool(size < SIZE_MAX - pad ? size + pad : SIZE_MAX);
  if (p == nullptr) return bootstrap_allocate(size, alignment);
  return checked(p, engine().allocate_slow(size, pad != 0 ? alignment : 0));
}

void* allocate_zeroed(size_t size) noexcept {
  if (size == 0) size = 1;
  HostPool* p = pool(size);
  if (p == nullptr) {
    void* block = bootstrap_allocate(size, kNaturalAlignment);
    if (block != nullptr) std::memset(block, 0, size);
    return block;
  }
  return checked(p, engine().allocate_zeroed(size));
}

void release_slow(void* block, const char* call) noexcept {
  if (block == nullptr || BootstrapArena::contains(block)) return;  // bootstrap blocks are never reused
  // free_owned() already said no: the engine's slow free judges the rest.
  if (existing_pool() != nullptr && engine().free_slow(block) == Status::ok) return;
  report_bad_free(call, block);
}

void* reallocate(void* block, size_t size, const char* call) noexcept {
  if (block == nullptr) return allocate(size);
  if (size == 0) {  // glibc: free and return nullptr
    release(block, call);
    return nullptr;
  }
  if (BootstrapArena::contains(block)) {  // never reused: always moves
    void* moved = allocate(size);
    if (moved == nullptr) return nullptr;
    const size_t usable = BootstrapArena::size_of(block);
    std::memcpy(moved, block, size < usable ? size : usable);
    return moved;
  }
  HostPool* p = existing_pool();
  if (p == nullptr) report_bad_free(call, block);
  // The pool keeps a block that still fits and remaps a big one (as glibc
  // does with mremap) instead of copying it. The engine, as for the other
  // calls: the face's blocks are never recorded in a history.
  void* moved = engine().reallocate(block, size);
  if (moved != nullptr) return moved;
  const Status why = host::thread_last_status();
  if (why == Status::not_live) report_bad_free(call, block);
  allocation_failed(p, why);
  return nullptr;  // the old block stays valid
}

}  // namespace unipool::malloc_face
