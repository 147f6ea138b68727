// unipool host: per-thread state and the registry of pools.
//
// A thread reaches its heap of a pool in two loads: t_thread (initial-exec
// TLS, usable before any constructor ran: it starts at a static empty state)
// and heaps[pool slot]; the heap it used last, in one (t_recent_heap). A slot's generation changes whenever a pool is
// destroyed, so a thread never follows a heap pointer of a dead pool.
//
// Thread exit (a pthread key destructor, not a C++ thread_local: those
// register through __cxa_thread_atexit, which allocates) hands each heap back
// to its pool. Fork handlers (pthread_atfork) take every lock of every pool
// before fork and release them in both processes after.
#pragma once

#include <atomic>
#include <cstdint>

#include "host/lock.hpp"

namespace unipool::host {

class Engine;
struct Heap;

inline constexpr uint32_t kMaxEngines = 128;  // slot 0 is never a pool's

struct HeapRef {
  uint64_t generation;  // the pool's at the time the heap was made
  Heap* heap;
};

struct ThreadState {
  HeapRef heaps[kMaxEngines];
  ThreadState* next_free;
  uint32_t seed;  // numbers threads in the order their states were made (large-block shard)
};

extern ThreadState g_empty_thread;
extern constinit thread_local ThreadState* t_thread __attribute__((tls_model("initial-exec")));

// The heap this thread's last fast allocation used, with its pool's
// generation. Why: an allocation that finds its pool here reaches the heap in
// one load from the thread pointer, where heaps[slot] waits for both t_thread
// and the pool's slot; a program's allocations mostly go to one pool (mimalloc
// keeps its default heap in TLS the same way). Generations are unique across
// pools and 0 is none's, so an entry of a destroyed pool never matches.
// Cleared at thread exit.
extern constinit thread_local HeapRef t_recent_heap __attribute__((tls_model("initial-exec")));
// Non-zero while the engine itself calls code that may allocate (the range
// allocator's node vectors, the CUDA pinner): those requests are served from
// their own mappings so they never wait on a lock the engine holds.
extern constinit thread_local int t_internal __attribute__((tls_model("initial-exec")));

struct InternalScope {
  InternalScope() noexcept { ++t_internal; }
  ~InternalScope() { --t_internal; }
};

// The calling thread's state, created on first use; nullptr when no memory
// for it could be mapped or the thread is exiting.
ThreadState* current_thread_state() noexcept;

// Installs the pthread_atfork handlers once; called from allocation slow
// paths, never while a pool is being constructed. Inline flag first: the
// slow paths of large blocks call it every time, and pthread_once is a call
// into libc's code (another page to fault into the TLB).
extern std::atomic<bool> g_fork_handlers_ready;
void install_fork_handlers() noexcept;
inline void ensure_fork_handlers() noexcept {
  if (!g_fork_handlers_ready.load(std::memory_order_acquire)) install_fork_handlers();
}

// Registers a pool: its slot (>= 1) and generation. Returns false when every
// slot is taken.
bool registry_add(Engine* engine, uint32_t* slot, uint64_t* generation) noexcept;
void registry_remove(uint32_t slot) noexcept;

}  // namespace unipool::host
