// unipool C ABI: the KV block pools, one handle for both kinds.
#include <cstring>
#include <exception>
#include <new>
#include <stdexcept>
#include <string>

#include "capi/c_fence.hpp"
#include "capi/last_error.hpp"
#include "unipool/c/kv.h"
#include "unipool/kv_block_pool.hpp"
#include "unipool/shared_kv_block_pool.hpp"

namespace {

using unipool::KVPool;
using unipool::SharedKVBlockPool;
using unipool::Status;

KVPool* pool_of(unipool_kv_pool_t* p) { return reinterpret_cast<KVPool*>(p); }

unipool_status_t report(Status s) {
  if (s != Status::ok) unipool::capi::set_last_error(KVPool::last_error());
  return static_cast<unipool_status_t>(s);
}

unipool_status_t refuse(const std::string& why, unipool_status_t status = UNIPOOL_BAD_ARGUMENT) {
  unipool::capi::set_last_error(why);
  return status;
}

unipool::HostPinned pinned_of(unipool_kv_pinned_t p) {
  return p == UNIPOOL_KV_PINNED_OFF  ? unipool::HostPinned::off
         : p == UNIPOOL_KV_PINNED_ON ? unipool::HostPinned::on
                                     : unipool::HostPinned::best_effort;
}

uint64_t or_default(uint64_t v, uint64_t d) { return v ? v : d; }

// The fields both pools' options share, from the C options.
template <class Options>
Options options_of(const unipool_kv_options_t& o) {
  Options k;
  k.block_bytes = o.block_bytes;
  k.num_blocks = o.num_blocks;
  k.alignment = or_default(o.alignment, 256);
  k.pinned = pinned_of(o.pinned);
  k.numa_node = o.numa_node - 1;
  k.max_pin = or_default(o.max_pin, uint64_t{16} << 30);
  return k;
}

// Runs `make` (which returns a new pool) into *out; exceptions become
// statuses: bad options and refused attaches UNIPOOL_BAD_ARGUMENT, memory
// that cannot be had UNIPOOL_OUT_OF_SPACE.
template <class Make>
unipool_status_t make_pool(const char* call, unipool_kv_pool_t** out, Make make) {
  if (out == nullptr) return refuse(std::string(call) + ": out is NULL");
  *out = nullptr;
  try {
    *out = reinterpret_cast<unipool_kv_pool_t*>(make());
    return UNIPOOL_OK;
  } catch (const std::invalid_argument& e) {
    return refuse(e.what());
  } catch (const unipool::SharedKVRefused& e) {
    return refuse(e.what());
  } catch (const std::bad_alloc&) {
    return refuse(std::string(call) + ": out of memory", UNIPOOL_OUT_OF_SPACE);
  } catch (const std::exception& e) {
    return refuse(e.what(), UNIPOOL_OUT_OF_SPACE);
  }
}

SharedKVBlockPool* shared_or_refuse(unipool_kv_pool_t* pool, const char* call) {
  auto* shared = dynamic_cast<SharedKVBlockPool*>(pool_of(pool));
  if (!shared) unipool::capi::set_last_error(std::string(call) + ": not a shared pool");
  return shared;
}

#define UNIPOOL_KV_POOL(call)                                  \
  do {                                                         \
    if (pool == nullptr) return refuse(call ": pool is NULL"); \
  } while (0)

}  // namespace

extern "C" {

unipool_status_t unipool_kv_create(const unipool_kv_options_t* o, unipool_kv_pool_t** out) {
  if (o == nullptr) return refuse("unipool_kv_create: options is NULL");
  return make_pool("unipool_kv_create", out, [&] {
    return static_cast<KVPool*>(new unipool::KVBlockPool(options_of<unipool::KVBlockPoolOptions>(*o)));
  });
}

unipool_status_t unipool_kv_create_shared(const char* name, const unipool_kv_options_t* o, unipool_kv_pool_t** out) {
  if (name == nullptr || o == nullptr) return refuse("unipool_kv_create_shared: name or options is NULL");
  return make_pool("unipool_kv_create_shared", out, [&] {
    auto k = options_of<unipool::SharedKVBlockPoolOptions>(*o);
    k.lifetime = o->lifetime == UNIPOOL_KV_CREATOR ? unipool::SharedKVLifetime::creator
                                                   : unipool::SharedKVLifetime::while_attached;
    k.max_members = static_cast<uint32_t>(or_default(o->max_members, 64));
    return static_cast<KVPool*>(SharedKVBlockPool::create(name, k).release());
  });
}

unipool_status_t unipool_kv_attach(const char* name, const unipool_kv_options_t* o, unipool_kv_pool_t** out) {
  if (name == nullptr) return refuse("unipool_kv_attach: name is NULL");
  return make_pool("unipool_kv_attach", out, [&] {
    unipool::SharedKVAttachOptions k;
    if (o != nullptr) {
      k.pinned = pinned_of(o->pinned);
      k.max_pin = or_default(o->max_pin, uint64_t{16} << 30);
      k.block_bytes = o->block_bytes;
      k.num_blocks = o->num_blocks;
    }
    return static_cast<KVPool*>(SharedKVBlockPool::attach(name, k).release());
  });
}

void unipool_kv_destroy(unipool_kv_pool_t* pool) { delete pool_of(pool); }

unipool_status_t unipool_kv_alloc(unipool_kv_pool_t* pool, size_t n, int64_t* out) {
  UNIPOOL_KV_POOL("unipool_kv_alloc");
  if (out == nullptr && n != 0) return refuse("unipool_kv_alloc: out is NULL");
  return report(pool_of(pool)->allocate(n, out));
}

unipool_status_t unipool_kv_free(unipool_kv_pool_t* pool, const int64_t* ids, size_t n) {
  UNIPOOL_KV_POOL("unipool_kv_free");
  if (ids == nullptr && n != 0) return refuse("unipool_kv_free: ids is NULL");
  return report(pool_of(pool)->deallocate(ids, n));
}

unipool_status_t unipool_kv_free_and_alloc(unipool_kv_pool_t* pool, const int64_t* ids, size_t n_free, size_t n,
                                           int64_t* out) {
  UNIPOOL_KV_POOL("unipool_kv_free_and_alloc");
  if ((ids == nullptr && n_free != 0) || (out == nullptr && n != 0)) {
    return refuse("unipool_kv_free_and_alloc: ids or out is NULL");
  }
  return report(pool_of(pool)->deallocate_and_allocate(ids, n_free, n, out));
}

unipool_status_t unipool_kv_free_after(unipool_kv_pool_t* pool, const int64_t* ids, size_t n,
                                       const unipool_fence_t* source, uint64_t fence) {
  UNIPOOL_KV_POOL("unipool_kv_free_after");
  if (source == nullptr || source->completed == nullptr) {
    return refuse("unipool_kv_free_after: the fence source needs a completed() callback");
  }
  if (ids == nullptr && n != 0) return refuse("unipool_kv_free_after: ids is NULL");
  auto* adapter = new (std::nothrow) unipool::capi::CFence(*source);
  if (adapter == nullptr) return refuse("unipool_kv_free_after: out of memory", UNIPOOL_OUT_OF_SPACE);
  const Status s = pool_of(pool)->deallocate_after(ids, n, *adapter, fence);
  // The pool takes the fence unless it refuses it (bad_argument); a refused
  // batch gives it back at once (release() deletes the adapter).
  if (s == Status::bad_argument) delete adapter;
  return report(s);
}

size_t unipool_kv_collect_deferred(unipool_kv_pool_t* pool) {
  return pool == nullptr ? 0 : pool_of(pool)->collect_deferred();
}

void* unipool_kv_block(unipool_kv_pool_t* pool, uint64_t id) {
  if (pool == nullptr || id >= pool_of(pool)->num_blocks()) return nullptr;
  return pool_of(pool)->block(id);
}

int unipool_kv_is_live(unipool_kv_pool_t* pool, uint64_t id) {
  return pool != nullptr && pool_of(pool)->is_live(id) ? 1 : 0;
}

unipool_pinning_state_t unipool_kv_pinning_state(unipool_kv_pool_t* pool) {
  return pool == nullptr ? UNIPOOL_PINNING_PAGEABLE
                         : static_cast<unipool_pinning_state_t>(pool_of(pool)->pinning_state());
}

unipool_status_t unipool_kv_stats(unipool_kv_pool_t* pool, unipool_kv_stats_t* out) {
  UNIPOOL_KV_POOL("unipool_kv_stats");
  if (out == nullptr || out->size < sizeof(uint64_t)) return refuse("unipool_kv_stats: out is NULL or its size is 0");
  unipool::SharedKVBlockPoolStats s;
  if (auto* shared = dynamic_cast<SharedKVBlockPool*>(pool_of(pool))) {
    s = shared->stats();
  } else {
    static_cast<unipool::KVBlockPoolStats&>(s) = pool_of(pool)->stats();
  }
  const uint64_t fields[] = {s.num_blocks,     s.block_bytes,     s.stride,           s.free_blocks,
                             s.live_blocks,    s.deferred_blocks, s.peak_live_blocks, s.requested_bytes,
                             s.reserved_bytes, s.pinned_bytes,    s.allocs,           s.frees,
                             s.failed_allocs,  s.misuse_errors,   s.transit_blocks,   s.reclaimed_blocks,
                             s.owned_blocks,   s.members,         s.dead_members,     s.recoveries};
  static_assert(sizeof(fields) + sizeof(uint64_t) == sizeof(unipool_kv_stats_t));
  const size_t bytes = std::min<size_t>(out->size, sizeof(unipool_kv_stats_t)) - sizeof(uint64_t);
  std::memcpy(reinterpret_cast<char*>(out) + sizeof(uint64_t), fields, bytes / 8 * 8);
  out->size = sizeof(uint64_t) + bytes / 8 * 8;
  return UNIPOOL_OK;
}

void unipool_kv_reset_peak_stats(unipool_kv_pool_t* pool) {
  if (pool != nullptr) pool_of(pool)->reset_peak_stats();
}

unipool_status_t unipool_kv_validate(unipool_kv_pool_t* pool) {
  UNIPOOL_KV_POOL("unipool_kv_validate");
  std::string why;
  if (pool_of(pool)->validate(&why)) return UNIPOOL_OK;
  return refuse("unipool_kv_validate: " + why);
}

unipool_status_t unipool_kv_hand_over(unipool_kv_pool_t* pool, const int64_t* ids, size_t n, int to_pid) {
  UNIPOOL_KV_POOL("unipool_kv_hand_over");
  SharedKVBlockPool* shared = shared_or_refuse(pool, "unipool_kv_hand_over");
  if (!shared) return UNIPOOL_BAD_ARGUMENT;
  if (ids == nullptr && n != 0) return refuse("unipool_kv_hand_over: ids is NULL");
  return report(shared->hand_over(ids, n, to_pid));
}

unipool_status_t unipool_kv_take_over(unipool_kv_pool_t* pool, const int64_t* ids, size_t n) {
  UNIPOOL_KV_POOL("unipool_kv_take_over");
  SharedKVBlockPool* shared = shared_or_refuse(pool, "unipool_kv_take_over");
  if (!shared) return UNIPOOL_BAD_ARGUMENT;
  if (ids == nullptr && n != 0) return refuse("unipool_kv_take_over: ids is NULL");
  return report(shared->take_over(ids, n));
}

unipool_status_t unipool_kv_reclaim_dead(unipool_kv_pool_t* pool, size_t* freed) {
  UNIPOOL_KV_POOL("unipool_kv_reclaim_dead");
  SharedKVBlockPool* shared = shared_or_refuse(pool, "unipool_kv_reclaim_dead");
  if (!shared) return UNIPOOL_BAD_ARGUMENT;
  const size_t n = shared->reclaim_dead();
  if (freed) *freed = n;
  return UNIPOOL_OK;
}

unipool_status_t unipool_kv_owner_of(unipool_kv_pool_t* pool, uint64_t id, int* pid) {
  UNIPOOL_KV_POOL("unipool_kv_owner_of");
  SharedKVBlockPool* shared = shared_or_refuse(pool, "unipool_kv_owner_of");
  if (!shared) return UNIPOOL_BAD_ARGUMENT;
  if (pid == nullptr) return refuse("unipool_kv_owner_of: pid is NULL");
  if (id >= shared->num_blocks())
    return refuse("unipool_kv_owner_of: block " + std::to_string(id) + " is out of range");
  *pid = shared->owner_of(id);
  return UNIPOOL_OK;
}

}  // extern "C"
