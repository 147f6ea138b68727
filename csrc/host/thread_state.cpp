// unipool host: thread states, the pool registry, thread exit and fork.
#include "host/thread_state.hpp"

#include <pthread.h>

#include <atomic>

#include "backend/os/os_memory.hpp"
#include "host/engine.hpp"

namespace unipool::host {

ThreadState g_empty_thread{};
constinit thread_local ThreadState* t_thread __attribute__((tls_model("initial-exec"))) = &g_empty_thread;
constinit thread_local HeapRef t_recent_heap __attribute__((tls_model("initial-exec"))) = {0, nullptr};
constinit thread_local int t_internal __attribute__((tls_model("initial-exec"))) = 0;

namespace {

struct EngineSlot {
  Engine* engine;
  uint64_t generation;
};

Mutex g_registry_lock;
EngineSlot g_slots[kMaxEngines];
uint64_t g_next_generation = 1;
ThreadState* g_free_states = nullptr;  // recycled thread states, under the lock

pthread_key_t g_exit_key;
pthread_once_t g_key_once = PTHREAD_ONCE_INIT;
bool g_key_ok = false;
pthread_once_t g_fork_once = PTHREAD_ONCE_INIT;
std::atomic<uint32_t> g_next_seed{0};

void on_thread_exit(void* arg) noexcept {
  auto* state = static_cast<ThreadState*>(arg);
  // From here on this thread's allocations go to the shared lists.
  t_thread = &g_empty_thread;
  t_recent_heap = HeapRef{0, nullptr};
  LockGuard lock(g_registry_lock);
  for (uint32_t i = 1; i < kMaxEngines; ++i) {
    const HeapRef ref = state->heaps[i];
    if (ref.heap != nullptr && g_slots[i].engine != nullptr && g_slots[i].generation == ref.generation) {
      g_slots[i].engine->retire_heap(ref.heap);
    }
  }
  *state = ThreadState{};
  state->next_free = g_free_states;
  g_free_states = state;
}

void make_key() noexcept { g_key_ok = pthread_key_create(&g_exit_key, on_thread_exit) == 0; }

// ---- fork: every lock of every pool is taken before fork, so the child
// never inherits a lock some vanished thread held mid-update.
// The registry lock is held from fork_prepare to fork_parent / fork_child.
UNIPOOL_NO_THREAD_SAFETY_ANALYSIS void fork_prepare() noexcept {
  g_registry_lock.lock();
  for (uint32_t i = 1; i < kMaxEngines; ++i) {
    if (g_slots[i].engine) g_slots[i].engine->fork_prepare();
  }
}
UNIPOOL_NO_THREAD_SAFETY_ANALYSIS void fork_parent() noexcept {
  for (uint32_t i = kMaxEngines; i-- > 1;) {
    if (g_slots[i].engine) g_slots[i].engine->fork_release(false);
  }
  g_registry_lock.unlock();
}
UNIPOOL_NO_THREAD_SAFETY_ANALYSIS void fork_child() noexcept {
  for (uint32_t i = kMaxEngines; i-- > 1;) {
    if (g_slots[i].engine) g_slots[i].engine->fork_release(true);
  }
  g_registry_lock.unlock();
}
void register_fork_handlers() noexcept { pthread_atfork(fork_prepare, fork_parent, fork_child); }

}  // namespace

ThreadState* current_thread_state() noexcept {
  if (t_thread != &g_empty_thread) return t_thread;
  pthread_once(&g_key_once, make_key);
  if (!g_key_ok) return nullptr;
  ThreadState* state = nullptr;
  {
    LockGuard lock(g_registry_lock);
    if (g_free_states != nullptr) {
      state = g_free_states;
      g_free_states = state->next_free;
    }
  }
  if (state == nullptr) {
    state = static_cast<ThreadState*>(backend::os::map_metadata(sizeof(ThreadState)));
    if (state == nullptr) return nullptr;
  }
  *state = ThreadState{};
  state->seed = g_next_seed.fetch_add(1, std::memory_order_relaxed);
  // Keys below 32 live in the thread descriptor, so this does not allocate.
  if (pthread_setspecific(g_exit_key, state) != 0) {
    LockGuard lock(g_registry_lock);
    state->next_free = g_free_states;
    g_free_states = state;
    return nullptr;
  }
  t_thread = state;
  return state;
}

std::atomic<bool> g_fork_handlers_ready{false};

void install_fork_handlers() noexcept {
  // Not from a pool's constructor: pthread_atfork may allocate, and under a
  // malloc replacement that would re-enter the pool being built.
  pthread_once(&g_fork_once, register_fork_handlers);
  g_fork_handlers_ready.store(true, std::memory_order_release);
}

bool registry_add(Engine* engine, uint32_t* slot, uint64_t* generation) noexcept {
  LockGuard lock(g_registry_lock);
  for (uint32_t i = 1; i < kMaxEngines; ++i) {
    if (g_slots[i].engine == nullptr) {
      g_slots[i].engine = engine;
      g_slots[i].generation = g_next_generation++;
      *slot = i;
      *generation = g_slots[i].generation;
      return true;
    }
  }
  return false;
}

void registry_remove(uint32_t slot) noexcept {
  LockGuard lock(g_registry_lock);
  g_slots[slot].engine = nullptr;
  g_slots[slot].generation = 0;
}

}  // namespace unipool::host
