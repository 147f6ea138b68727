// unipool host: HostPool, the public face of the engine, and the process-wide
// default pool.
#include "unipool/host_pool.hpp"

#include <pthread.h>

#include <cstdlib>
#include <cstring>
#include <new>

#include "backend/os/os_memory.hpp"
#include "core/compiler.hpp"
#include "host/engine_fast.hpp"
#include "host/leak_roots.hpp"

namespace unipool {

// The engine lives in its own mapping, not on the heap: a malloc replacement
// builds its default pool before any heap exists.
HostPool::HostPool(const HostPoolConfig& config) {
  void* memory = backend::os::map_metadata(sizeof(host::Engine));
  if (memory == nullptr) throw std::bad_alloc();
  host::add_leak_root(memory, sizeof(host::Engine));
  try {
    engine_ = new (memory) host::Engine(config);
  } catch (...) {
    host::remove_leak_root(memory, sizeof(host::Engine));
    backend::os::unmap_metadata(memory, sizeof(host::Engine));
    throw;
  }
}

host::Engine& host::engine_of(HostPool& pool) noexcept { return *pool.engine_; }

HostPool::~HostPool() {
  engine_->~Engine();
  host::remove_leak_root(engine_, sizeof(host::Engine));
  backend::os::unmap_metadata(engine_, sizeof(host::Engine));
}

namespace {
// The engine reports a failure through the thread's last status (the malloc
// path has no room for more); it is read only when the block is nullptr.
inline HostAllocation result(void* p) noexcept {
  return p != nullptr ? HostAllocation{p, Status::ok} : HostAllocation{nullptr, host::thread_last_status()};
}

// With history off, the one branch an allocation pays for it.
UNIPOOL_ALWAYS_INLINE HostAllocation recorded(host::Engine& engine, void* p, size_t size) noexcept {
  if (UNIPOOL_UNLIKELY(engine.history().on()) && p != nullptr) {
    engine.history().record(HostHistoryAction::alloc, p, size);
  }
  return result(p);
}

// A free is recorded before it happens: once the block is back, another
// thread may be handed the same address and record its alloc first.
void record_free(host::Engine& engine, const void* p) noexcept {
  const size_t size = p != nullptr ? engine.usable_size(p) : 0;
  if (size != 0) engine.history().record(HostHistoryAction::free, p, size);  // 0: not live, refused below
}
}  // namespace

HostAllocation HostPool::allocate(size_t size) noexcept { return recorded(*engine_, engine_->allocate(size), size); }
HostAllocation HostPool::allocate(size_t size, size_t alignment) noexcept {
  return recorded(*engine_, engine_->allocate_aligned(size, alignment), size);
}
HostAllocation HostPool::allocate_zeroed(size_t size) noexcept {
  return recorded(*engine_, engine_->allocate_zeroed(size), size);
}
// With history on, a reallocation is an allocation and a free in the
// history's order (a huge block moved by the kernel would free its old
// address before it could be recorded), so it always moves.
HostAllocation HostPool::reallocate(void* p, size_t size) noexcept {
  if (p == nullptr) return allocate(size);
  if (UNIPOOL_LIKELY(!engine_->history().on())) return result(engine_->reallocate(p, size));
  const size_t usable = engine_->usable_size(p);
  if (usable == 0 || size == 0) return result(engine_->reallocate(p, size));  // refused, and says why
  const HostAllocation moved = allocate(size);
  if (moved.ptr == nullptr) return moved;
  std::memcpy(moved.ptr, p, size < usable ? size : usable);
  deallocate(p);
  return moved;
}
Status HostPool::deallocate(void* p) noexcept {
  if (UNIPOOL_UNLIKELY(engine_->history().on())) record_free(*engine_, p);
  return engine_->free(p);
}
Status HostPool::deallocate_after(void* p, FenceSource& source, FenceId fence) noexcept {
  if (UNIPOOL_UNLIKELY(engine_->history().on())) record_free(*engine_, p);
  return engine_->free_after(p, source, fence);
}
bool HostPool::record_history(size_t max_entries) noexcept { return engine_->history().start(max_entries); }
bool HostPool::history_enabled() const noexcept { return engine_->history().on(); }
size_t HostPool::history_max_entries() const noexcept { return engine_->history().capacity(); }
std::vector<HostHistoryEntry> HostPool::history() const { return engine_->history().entries(); }
std::string HostPool::history_json() const {
  return host::history_json(engine_->history().entries(), engine_->history().capacity());
}
size_t HostPool::collect_deferred() noexcept { return engine_->collect_deferred(); }
size_t HostPool::usable_size(const void* p) const noexcept { return engine_->usable_size(p); }
bool HostPool::owns(const void* p) const noexcept { return engine_->usable_size(p) != 0; }
bool HostPool::is_pinned(const void* p) const noexcept { return engine_->is_pinned(p); }
void HostPool::flush_thread_cache() noexcept { engine_->flush_thread_cache(); }
void HostPool::trim() noexcept { engine_->trim(); }
Status HostPool::set_region_hooks(HostRegionHooks hooks) { return engine_->set_region_hooks(std::move(hooks)); }
HostPoolStats HostPool::stats() const noexcept { return engine_->stats(); }
void HostPool::reset_peak_stats() noexcept { engine_->reset_peak_stats(); }
PinningState HostPool::pinning_state() const noexcept { return engine_->pinning_state(); }
const HostPoolConfig& HostPool::config() const noexcept { return engine_->config(); }
void HostPool::wait_for_pinning() const noexcept { engine_->wait_for_pinning(); }
bool HostPool::validate(std::string* why) const { return engine_->validate(why); }
const char* HostPool::last_error() noexcept { return host::thread_last_error(); }

// ---- the default pool ----------------------------------------------------------

namespace {

alignas(HostPool) unsigned char g_default_storage[sizeof(HostPool)];
HostPool* g_default = nullptr;
char g_default_error[256] = "";
pthread_once_t g_default_once = PTHREAD_ONCE_INIT;

void make_default_pool() noexcept {
  HostPoolConfig config;
  if (parse_host_config(std::getenv("UNIPOOL_HOST_CONF"), &config, g_default_error, sizeof(g_default_error)) !=
      Status::ok) {
    return;
  }
  try {
    // Never destroyed: blocks may be freed during static destruction.
    g_default = new (g_default_storage) HostPool(config);
  } catch (const std::exception& e) {
    std::strncpy(g_default_error, e.what(), sizeof(g_default_error) - 1);
  } catch (...) {
    std::strncpy(g_default_error, "unipool host pool: cannot create the default pool", sizeof(g_default_error) - 1);
  }
}

}  // namespace

HostPool* HostPool::default_pool_nothrow() noexcept {
  pthread_once(&g_default_once, make_default_pool);
  return g_default;
}

const char* HostPool::default_pool_error() noexcept {
  pthread_once(&g_default_once, make_default_pool);
  return g_default_error;
}

HostPool& HostPool::default_pool() {
  HostPool* pool = default_pool_nothrow();
  if (pool == nullptr) throw std::invalid_argument(g_default_error);
  return *pool;
}

}  // namespace unipool
