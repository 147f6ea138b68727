#include "malloc/face_pool.hpp"

#include "host/errors.hpp"
#include "malloc/fatal.hpp"

namespace unipool::malloc_face {

std::atomic<HostPool*> g_pool{nullptr};

namespace {
// initial-exec: the face is preloaded, so its TLS is in the static block and
// reading it never calls __tls_get_addr (which may allocate).
[[gnu::tls_model("initial-exec")]] thread_local bool t_building = false;

// A free block written after it was freed: the engine found it and will not
// follow its link. glibc aborts on its own heap checks, and a free cannot
// return an error: so does the face, naming the block.
void on_heap_corruption(const char* message) noexcept { fatal(message); }
}  // namespace

HostPool* pool_slow() noexcept {
  if (t_building) return nullptr;
  t_building = true;
  host::set_corruption_handler(&on_heap_corruption);
  // A function-local static inside: other threads wait for this one.
  HostPool* p = HostPool::default_pool_nothrow();
  t_building = false;
  if (p == nullptr) {
    fatal("cannot build the default host pool: ", HostPool::default_pool_error());
  }
  g_pool.store(p, std::memory_order_release);
  return p;
}

}  // namespace unipool::malloc_face
