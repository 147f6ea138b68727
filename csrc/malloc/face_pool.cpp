#include "malloc/face_pool.hpp"

#include <cstdlib>

#include "host/errors.hpp"
#include "host/thread_state.hpp"
#include "malloc/bootstrap_arena.hpp"
#include "malloc/fatal.hpp"

namespace unipool::malloc_face {

std::atomic<HostPool*> g_pool{nullptr};
std::atomic<host::Engine*> g_engine{nullptr};

namespace {
// initial-exec: the face is preloaded, so its TLS is in the static block and
// reading it never calls __tls_get_addr (which may allocate).
[[gnu::tls_model("initial-exec")]] thread_local bool t_building = false;

// A free block written after it was freed: the engine found it and will not
// follow its link. glibc aborts on its own heap checks, and a free cannot
// return an error: so does the face, naming the block.
void on_heap_corruption(const char* message) noexcept { fatal(message); }

// A bad UNIPOOL_HOST_CONF stops the program at its first allocation, whether
// or not the bootstrap arena serves it and the pool is built later.
std::atomic<bool> g_config_checked{false};

// The parser never allocates (host_config.hpp), so it cannot recurse here.
void check_config_once() noexcept {
  if (g_config_checked.load(std::memory_order_acquire)) return;
  HostPoolConfig config;
  char error[256] = "";
  const Status s = parse_host_config(std::getenv("UNIPOOL_HOST_CONF"), &config, error, sizeof(error));
  if (s != Status::ok) fatal("cannot build the default host pool: ", error);
  g_config_checked.store(true, std::memory_order_release);
}
}  // namespace

bool inside_engine() noexcept { return t_building || host::t_internal != 0; }

HostPool* pool_slow(size_t size) noexcept {
  if (t_building) return nullptr;
  check_config_once();
  if (BootstrapArena::fits_startup_share(size)) return nullptr;
  t_building = true;
  host::set_corruption_handler(&on_heap_corruption);
  // A function-local static inside: other threads wait for this one.
  HostPool* p = HostPool::default_pool_nothrow();
  t_building = false;
  if (p == nullptr) {
    fatal("cannot build the default host pool: ", HostPool::default_pool_error());
  }
  // Both published: the face's fast paths read g_engine alone.
  g_engine.store(&host::engine_of(*p), std::memory_order_release);
  g_pool.store(p, std::memory_order_release);
  return p;
}

}  // namespace unipool::malloc_face
