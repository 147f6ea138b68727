// unipool C ABI: the host pool.
#include <cstddef>
#include <cstring>
#include <exception>
#include <new>
#include <string>

#include "capi/c_fence.hpp"
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

unipool_status_t null_out(const char* call) {
  unipool::capi::set_last_error(std::string(call) + ": out is NULL");
  return UNIPOOL_BAD_ARGUMENT;
}

// The block goes to *out (nullptr on failure), the reason to the status.
unipool_status_t hand_out(unipool::HostAllocation a, void** out) {
  *out = a.ptr;
  return report(a.status);
}

}  // namespace

extern "C" {

unipool_status_t unipool_host_create(const char* config, unipool_host_pool_t** out) {
  if (out == nullptr) return null_out("unipool_host_create");
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

unipool_status_t unipool_host_alloc(unipool_host_pool_t* pool, size_t size, void** out) {
  if (out == nullptr) return null_out("unipool_host_alloc");
  if (pool == nullptr) return *out = nullptr, null_pool();
  return hand_out(pool_of(pool)->allocate(size), out);
}

unipool_status_t unipool_host_alloc_aligned(unipool_host_pool_t* pool, size_t size, size_t alignment, void** out) {
  if (out == nullptr) return null_out("unipool_host_alloc_aligned");
  if (pool == nullptr) return *out = nullptr, null_pool();
  return hand_out(pool_of(pool)->allocate(size, alignment), out);
}

unipool_status_t unipool_host_alloc_zeroed(unipool_host_pool_t* pool, size_t size, void** out) {
  if (out == nullptr) return null_out("unipool_host_alloc_zeroed");
  if (pool == nullptr) return *out = nullptr, null_pool();
  return hand_out(pool_of(pool)->allocate_zeroed(size), out);
}

unipool_status_t unipool_host_realloc(unipool_host_pool_t* pool, void* ptr, size_t size, void** out) {
  if (out == nullptr) return null_out("unipool_host_realloc");
  if (pool == nullptr) return *out = nullptr, null_pool();
  return hand_out(pool_of(pool)->reallocate(ptr, size), out);
}

unipool_status_t unipool_host_free(unipool_host_pool_t* pool, void* ptr) {
  if (pool == nullptr) return null_pool();
  return report(pool_of(pool)->deallocate(ptr));
}

unipool_status_t unipool_host_free_after(unipool_host_pool_t* pool, void* ptr, const unipool_host_fence_t* source,
                                         uint64_t fence) {
  if (pool == nullptr) return null_pool();
  if (source == nullptr || source->completed == nullptr) {
    unipool::capi::set_last_error("unipool_host_free_after: the fence source needs a completed() callback");
    return UNIPOOL_BAD_ARGUMENT;
  }
  auto* adapter = new (std::nothrow) unipool::capi::CFence(*source);
  if (adapter == nullptr) {
    unipool::capi::set_last_error("unipool_host_free_after: out of memory");
    return UNIPOOL_OUT_OF_SPACE;
  }
  const Status s = pool_of(pool)->deallocate_after(ptr, *adapter, fence);
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

// The C enum mirrors the C++ one value for value: the cast above relies on it.
static_assert(UNIPOOL_PINNING_PAGEABLE == static_cast<int>(unipool::PinningState::pageable));
static_assert(UNIPOOL_PINNING_PAGEABLE_NO_GPU == static_cast<int>(unipool::PinningState::pageable_no_gpu));
static_assert(UNIPOOL_PINNING_PINNED == static_cast<int>(unipool::PinningState::pinned));
static_assert(UNIPOOL_PINNING_PARTIALLY_PINNED == static_cast<int>(unipool::PinningState::partially_pinned));

// Checked before the cast: unipool::PinningState is 8 bits wide, so a C
// caller's 256 would read as "pageable".
const char* unipool_pinning_state_string(unipool_pinning_state_t state) {
  const auto value = static_cast<long long>(state);
  if (value < UNIPOOL_PINNING_PAGEABLE || value > UNIPOOL_PINNING_PARTIALLY_PINNED) return "unknown pinning state";
  return unipool::to_string(static_cast<unipool::PinningState>(state));
}

unipool_pinning_state_t unipool_host_pinning_state(unipool_host_pool_t* pool) {
  const auto s = pool ? pool_of(pool)->pinning_state() : unipool::PinningState::pageable;
  return static_cast<unipool_pinning_state_t>(s);
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

// The layout is part of the ABI: fields are only appended, never moved.
static_assert(offsetof(unipool_host_stats_t, size) == 0);
static_assert(offsetof(unipool_host_stats_t, requested_bytes) == 8);
static_assert(offsetof(unipool_host_stats_t, peak_requested_bytes) == 16);
static_assert(offsetof(unipool_host_stats_t, allocated_bytes) == 24);
static_assert(offsetof(unipool_host_stats_t, peak_allocated_bytes) == 32);
static_assert(offsetof(unipool_host_stats_t, committed_bytes) == 40);
static_assert(offsetof(unipool_host_stats_t, peak_committed_bytes) == 48);
static_assert(offsetof(unipool_host_stats_t, pinned_bytes) == 56);
static_assert(offsetof(unipool_host_stats_t, peak_pinned_bytes) == 64);
static_assert(offsetof(unipool_host_stats_t, cached_bytes) == 72);
static_assert(offsetof(unipool_host_stats_t, peak_cached_bytes) == 80);
static_assert(offsetof(unipool_host_stats_t, deferred_bytes) == 88);
static_assert(offsetof(unipool_host_stats_t, peak_deferred_bytes) == 96);
static_assert(offsetof(unipool_host_stats_t, deferred_blocks) == 104);
static_assert(offsetof(unipool_host_stats_t, arena_free_bytes) == 112);
static_assert(offsetof(unipool_host_stats_t, overhead_bytes) == 120);
static_assert(offsetof(unipool_host_stats_t, reserved_bytes) == 128);
static_assert(offsetof(unipool_host_stats_t, small_blocks) == 136);
static_assert(offsetof(unipool_host_stats_t, middle_blocks) == 144);
static_assert(offsetof(unipool_host_stats_t, large_blocks) == 152);
static_assert(offsetof(unipool_host_stats_t, huge_blocks) == 160);
static_assert(offsetof(unipool_host_stats_t, huge_cache_hits) == 168);
static_assert(offsetof(unipool_host_stats_t, huge_cache_misses) == 176);
static_assert(offsetof(unipool_host_stats_t, pin_registrations) == 184);
static_assert(offsetof(unipool_host_stats_t, pin_failures) == 192);
static_assert(offsetof(unipool_host_stats_t, pageable_bytes) == 200);
static_assert(offsetof(unipool_host_stats_t, hugetlb_fallbacks) == 208);
static_assert(offsetof(unipool_host_stats_t, misuse_errors) == 216);
static_assert(offsetof(unipool_host_stats_t, pin_thread_registrations) == 224);
static_assert(offsetof(unipool_host_stats_t, pin_thread_waits) == 232);
static_assert(sizeof(unipool_host_stats_t) == 240);

// The caller's struct may be older (smaller) than ours: fill what it has
// room for, as its `size` says, and never write past it.
unipool_status_t unipool_host_stats(unipool_host_pool_t* pool, unipool_host_stats_t* out) {
  if (out == nullptr) return null_out("unipool_host_stats");
  if (pool == nullptr) return null_pool();
  if (out->size < offsetof(unipool_host_stats_t, requested_bytes) + sizeof(uint64_t)) {
    unipool::capi::set_last_error("unipool_host_stats: out->size must be sizeof(unipool_host_stats_t)");
    return UNIPOOL_BAD_ARGUMENT;
  }
  const unipool::HostPoolStats s = pool_of(pool)->stats();
  const unipool_host_stats_t full{sizeof(unipool_host_stats_t),
                                  s.requested_bytes,
                                  s.peak_requested_bytes,
                                  s.allocated_bytes,
                                  s.peak_allocated_bytes,
                                  s.committed_bytes,
                                  s.peak_committed_bytes,
                                  s.pinned_bytes,
                                  s.peak_pinned_bytes,
                                  s.cached_bytes,
                                  s.peak_cached_bytes,
                                  s.deferred_bytes,
                                  s.peak_deferred_bytes,
                                  s.deferred_blocks,
                                  s.arena_free_bytes,
                                  s.overhead_bytes,
                                  s.reserved_bytes,
                                  s.small_blocks,
                                  s.middle_blocks,
                                  s.large_blocks,
                                  s.huge_blocks,
                                  s.huge_cache_hits,
                                  s.huge_cache_misses,
                                  s.pin_registrations,
                                  s.pin_failures,
                                  s.pageable_bytes,
                                  s.hugetlb_fallbacks,
                                  s.misuse_errors,
                                  s.pin_thread_registrations,
                                  s.pin_thread_waits};
  const size_t size = out->size < sizeof(full) ? out->size : sizeof(full);
  std::memcpy(out, &full, size);
  out->size = size;
  return UNIPOOL_OK;
}

void unipool_host_reset_peak_stats(unipool_host_pool_t* pool) {
  if (pool) pool_of(pool)->reset_peak_stats();
}

unipool_status_t unipool_host_validate(unipool_host_pool_t* pool) {
  if (pool == nullptr) return null_pool();
  std::string why;
  if (pool_of(pool)->validate(&why)) return UNIPOOL_OK;
  unipool::capi::set_last_error("unipool_host_validate: " + why);
  return UNIPOOL_BAD_ARGUMENT;
}

unipool_status_t unipool_host_record_history(unipool_host_pool_t* pool, size_t max_entries) {
  if (pool == nullptr) return null_pool();
  if (pool_of(pool)->record_history(max_entries)) return UNIPOOL_OK;
  unipool::capi::set_last_error("unipool_host_record_history: cannot map a ring of " + std::to_string(max_entries) +
                                " entries");
  return UNIPOOL_OUT_OF_SPACE;
}

unipool_status_t unipool_host_history_json(unipool_host_pool_t* pool, char* buf, size_t capacity, size_t* needed) {
  if (pool == nullptr) return null_pool();
  std::string json;
  try {
    json = pool_of(pool)->history_json();
  } catch (const std::bad_alloc&) {
    unipool::capi::set_last_error("unipool_host_history_json: out of memory building the text");
    return UNIPOOL_OUT_OF_SPACE;
  }
  if (needed != nullptr) *needed = json.size() + 1;
  if (buf == nullptr || capacity < json.size() + 1) {
    unipool::capi::set_last_error("unipool_host_history_json: the text needs " + std::to_string(json.size() + 1) +
                                  " bytes, the buffer has " + std::to_string(buf == nullptr ? 0 : capacity));
    return UNIPOOL_OUT_OF_SPACE;
  }
  std::memcpy(buf, json.c_str(), json.size() + 1);
  return UNIPOOL_OK;
}

}  // extern "C"
