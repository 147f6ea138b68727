#include "malloc/face_pool.hpp"

#include "malloc/fatal.hpp"

namespace unipool::malloc_face {

std::atomic<HostPool*> g_pool{nullptr};

namespace {
// initial-exec: the face is preloaded, so its TLS is in the static block and
// reading it never calls __tls_get_addr (which may allocate).
[[gnu::tls_model("initial-exec")]] thread_local bool t_building = false;
}  // namespace

HostPool* pool_slow() noexcept {
  if (t_building) return nullptr;
  t_building = true;
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
