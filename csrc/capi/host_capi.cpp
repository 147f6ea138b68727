// unipool C ABI: the host pool.
#include <exception>
#include <new>
#include <string>

#include "capi/last_error.hpp"
#include "unipool/c/host.h"
#include "unipool/host_pool.hpp"

namespace {

using unipool::HostPool;
using unipool::Status;

HostPool* pool_of(unipool_host_pool_t* p) { return reinterpret_cast<HostPool*>(p); }

unipool_status_t report(Status s) {
  if (s != Status::ok) unipool::capi::set_last_error(HostPool::last_error());
  return static_cast<unipool_status_t>(s);
}

unipool_status_t null_pool() {
  unipool::capi::set_last_error("unipool_host: pool is NULL");
  return UNIPOOL_BAD_ARGUMENT;
}

// A C fence as a FenceSource: one per deferral, gone once released.
class CFence final : public unipool::FenceSource {
 public:
  explicit CFence(const unipool_host_fence_t& f) : f_(f) {}
  unipool::FenceId record(int, unipool::StreamHandle) override { return unipool::kNoFence; }
  bool completed(unipool::FenceId fence) override { return f_.completed(f_.context, fence) != 0; }
  void wait(unipool::FenceId fence) override {
    while (!completed(fence)) {
    }
  }
  void release(unipool::FenceId fence) override {
    if (f_.release) f_.release(f_.context, fence);
    delete this;
  }

 private:
  unipool_host_fence_t f_;
};

}  // namespace

extern "C" {

unipool_status_t unipool_host_create(const char* config, unipool_host_pool_t** out) {
  if (out == nullptr) return null_pool();
  *out = nullptr;
  try {
    *out = reinterpret_cast<unipool_host_pool_t*>(new HostPool(std::string_view(config ? config : "")));
    return UNIPOOL_OK;
  } catch (const std::invalid_argument& e) {
    unipool::capi::set_last_error(e.what());
    return UNIPOOL_BAD_ARGUMENT;
  } catch (const std::exception& e) {
    unipool::capi::set_last_error(e.what());
    return UNIPOOL_OUT_OF_SPACE;
  }
}

void unipool_host_destroy(unipool_host_pool_t* pool) {
  if (pool != nullptr && pool_of(pool) != HostPool::default_pool_nothrow()) delete pool_of(pool);
}

unipool_host_pool_t* unipool_host_default(void) {
  HostPool* p = HostPool::default_pool_nothrow();
  if (p == nullptr) unipool::capi::set_last_error(HostPool::default_pool_error());
  return reinterpret_cast<unipool_host_pool_t*>(p);
}

unipool_status_t unipool_host_config_check(const char* config) {
  unipool::HostPoolConfig c;
  char error[256];
  const Status s = unipool::parse_host_config(config, &c, error, sizeof(error));
  if (s != Status::ok) unipool::capi::set_last_error(error);
  return static_cast<unipool_status_t>(s);
}

void* unipool_host_alloc(unipool_host_pool_t* pool, size_t size) {
  if (pool == nullptr) return null_pool(), nullptr;
  void* p = pool_of(pool)->allocate(size);
  if (p == nullptr) report(HostPool::last_status());
  return p;
}

void* unipool_host_alloc_aligned(unipool_host_pool_t* pool, size_t size, size_t alignment) {
  if (pool == nullptr) return null_pool(), nullptr;
  void* p = pool_of(pool)->allocate(size, alignment);
  if (p == nullptr) report(HostPool::last_status());
  return p;
}

void* unipool_host_alloc_zeroed(unipool_host_pool_t* pool, size_t size) {
  if (pool == nullptr) return null_pool(), nullptr;
  void* p = pool_of(pool)->allocate_zeroed(size);
  if (p == nullptr) report(HostPool::last_status());
  return p;
}

unipool_status_t unipool_host_free(unipool_host_pool_t* pool, void* ptr) {
  if (pool == nullptr) return null_pool();
  return report(pool_of(pool)->free(ptr));
}

unipool_status_t unipool_host_free_after(unipool_host_pool_t* pool, void* ptr, const unipool_host_fence_t* source,
                                         uint64_t fence) {
  if (pool == nullptr) return null_pool();
  if (source == nullptr || source->completed == nullptr) {
    unipool::capi::set_last_error("unipool_host_free_after: the fence source needs a completed() callback");
    return UNIPOOL_BAD_ARGUMENT;
  }
  auto* adapter = new (std::nothrow) CFence(*source);
  if (adapter == nullptr) {
    unipool::capi::set_last_error("unipool_host_free_after: out of memory");
    return UNIPOOL_OUT_OF_SPACE;
  }
  const Status s = pool_of(pool)->free_after(ptr, *adapter, fence);
  if (s != Status::ok) delete adapter;  // the pool did not take the fence
  return report(s);
}

size_t unipool_host_collect_deferred(unipool_host_pool_t* pool) {
  return pool ? pool_of(pool)->collect_deferred() : 0;
}

size_t unipool_host_usable_size(unipool_host_pool_t* pool, const void* ptr) {
  return pool ? pool_of(pool)->usable_size(ptr) : 0;
}

int unipool_host_is_pinned(unipool_host_pool_t* pool, const void* ptr) {
  return pool && pool_of(pool)->is_pinned(ptr) ? 1 : 0;
}

const char* unipool_host_pinning_state(unipool_host_pool_t* pool) {
  return pool ? unipool::to_string(pool_of(pool)->pinning_state()) : "";
}

void unipool_host_wait_for_pinning(unipool_host_pool_t* pool) {
  if (pool) pool_of(pool)->wait_for_pinning();
}

void unipool_host_flush_thread_cache(unipool_host_pool_t* pool) {
  if (pool) pool_of(pool)->flush_thread_cache();
}

void unipool_host_trim(unipool_host_pool_t* pool) {
  if (pool) pool_of(pool)->trim();
}

unipool_status_t unipool_host_get_stats(unipool_host_pool_t* pool, unipool_host_stats_t* out) {
  if (pool == nullptr || out == nullptr) return null_pool();
  const unipool::HostPoolStats s = pool_of(pool)->stats();
  *out = unipool_host_stats_t{s.requested_bytes, s.peak_requested_bytes, s.allocated_bytes, s.peak_allocated_bytes,
                              s.committed_bytes, s.peak_committed_bytes, s.pinned_bytes, s.peak_pinned_bytes,
                              s.cached_bytes, s.peak_cached_bytes, s.deferred_bytes, s.peak_deferred_bytes,
                              s.deferred_blocks, s.arena_free_bytes, s.overhead_bytes, s.reserved_bytes,
                              s.small_blocks, s.middle_blocks, s.large_blocks, s.huge_blocks,
                              s.huge_cache_hits, s.huge_cache_misses, s.pin_registrations, s.pin_failures,
                              s.pageable_bytes, s.hugetlb_fallbacks, s.misuse_errors,
                              s.pin_thread_registrations, s.pin_thread_waits};
  return UNIPOOL_OK;
}

void unipool_host_reset_peaks(unipool_host_pool_t* pool) {
  if (pool) pool_of(pool)->reset_peaks();
}

unipool_status_t unipool_host_validate(unipool_host_pool_t* pool) {
  if (pool == nullptr) return null_pool();
  std::string why;
  if (pool_of(pool)->validate(&why)) return UNIPOOL_OK;
  unipool::capi::set_last_error("unipool_host_validate: " + why);
  return UNIPOOL_BAD_ARGUMENT;
}

}  // extern "C"
