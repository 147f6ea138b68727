/* unipool C ABI: the host pool (see include/unipool/host_pool.hpp and
 * docs/host_pool.md). Every call is thread-safe; on failure the call returns
 * NULL or a status and unipool_last_error() says why. */
#ifndef UNIPOOL_C_HOST_H
#define UNIPOOL_C_HOST_H

#include "unipool/c/common.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct unipool_host_pool unipool_host_pool_t;

/* Same fields as unipool::HostPoolStats (bytes unless named otherwise).
 * Set `size` to sizeof(unipool_host_stats_t) before the call: a newer
 * library fills only the fields an older caller's struct has, and sets
 * `size` to the bytes it wrote. Fields are only ever appended. */
typedef struct unipool_host_stats_s {
  uint64_t size;
  uint64_t requested_bytes, peak_requested_bytes;
  uint64_t allocated_bytes, peak_allocated_bytes;
  uint64_t committed_bytes, peak_committed_bytes;
  uint64_t pinned_bytes, peak_pinned_bytes;
  uint64_t cached_bytes, peak_cached_bytes;
  uint64_t deferred_bytes, peak_deferred_bytes;
  uint64_t deferred_blocks;
  uint64_t arena_free_bytes;
  uint64_t overhead_bytes;
  uint64_t reserved_bytes;
  uint64_t small_blocks, middle_blocks, large_blocks, huge_blocks;
  uint64_t huge_cache_hits, huge_cache_misses;
  uint64_t pin_registrations, pin_failures, pageable_bytes, hugetlb_fallbacks;
  uint64_t misuse_errors;
  uint64_t pin_thread_registrations, pin_thread_waits;
} unipool_host_stats_t;

/* The fence of a deferred free: unipool_fence_t (common.h), by its older name. */
typedef unipool_fence_t unipool_host_fence_t;

/* A pool configured by `config` (UNIPOOL_HOST_CONF syntax; NULL or "" for
 * the defaults). UNIPOOL_BAD_ARGUMENT names the bad key in the last error. */
unipool_status_t unipool_host_create(const char* config, unipool_host_pool_t** out);
/* Returns every byte to the OS; blocks still live become invalid. */
void unipool_host_destroy(unipool_host_pool_t* pool);
/* The process-wide pool (configured from UNIPOOL_HOST_CONF); never destroy it.
 * NULL when that string is bad. */
unipool_host_pool_t* unipool_host_default(void);
/* Checks a config string without making a pool. */
unipool_status_t unipool_host_config_check(const char* config);

/* At least `size` bytes aligned to 16 (alignment 0) or to `alignment` (a
 * power of two), to *out. On failure *out is NULL and the status says why:
 * UNIPOOL_ZERO_SIZE, UNIPOOL_BAD_ALIGNMENT, UNIPOOL_TOO_LARGE,
 * UNIPOOL_OUT_OF_SPACE (limit reached, no memory, pinning failed). */
unipool_status_t unipool_host_alloc(unipool_host_pool_t* pool, size_t size, void** out);
unipool_status_t unipool_host_alloc_aligned(unipool_host_pool_t* pool, size_t size, size_t alignment, void** out);
/* `size` zero bytes, aligned to 16 (calloc; multiply and check count * size
 * yourself). Blocks new from the OS read zero and are not written, so their
 * pages are not faulted in. Fails as unipool_host_alloc does. */
unipool_status_t unipool_host_alloc_zeroed(unipool_host_pool_t* pool, size_t size, void** out);
/* realloc: *out gets a block of at least `size` bytes holding ptr's first
 * bytes, aligned to 16 (an alignment ptr was allocated with is not kept);
 * ptr stays when it still fits, a huge block is remapped where it can be,
 * else the bytes move and ptr is freed. ptr NULL allocates. On failure
 * *out is NULL and ptr stays live: UNIPOOL_NOT_LIVE for a pointer that is not
 * a live block, else unipool_host_alloc's reasons. */
unipool_status_t unipool_host_realloc(unipool_host_pool_t* pool, void* ptr, size_t size, void** out);
/* UNIPOOL_NOT_LIVE for a foreign, interior or already freed pointer. */
unipool_status_t unipool_host_free(unipool_host_pool_t* pool, void* ptr);
/* Frees `ptr` once `fence` completes; it is not reused before. */
unipool_status_t unipool_host_free_after(unipool_host_pool_t* pool, void* ptr, const unipool_host_fence_t* source,
                                         uint64_t fence);
/* Frees deferred blocks whose fences completed; returns how many. */
size_t unipool_host_collect_deferred(unipool_host_pool_t* pool);
/* Usable bytes of a live block, 0 if `ptr` is not one. */
size_t unipool_host_usable_size(unipool_host_pool_t* pool, const void* ptr);
int unipool_host_is_pinned(unipool_host_pool_t* pool, const void* ptr);
/* UNIPOOL_PINNING_PAGEABLE for a NULL pool. */
unipool_pinning_state_t unipool_host_pinning_state(unipool_host_pool_t* pool);

/* With pin_thread=on: returns once the pinning thread has no request taken
 * or waiting (for tests and benchmarks that want a settled pool). */
void unipool_host_wait_for_pinning(unipool_host_pool_t* pool);
void unipool_host_flush_thread_cache(unipool_host_pool_t* pool);
void unipool_host_trim(unipool_host_pool_t* pool);
unipool_status_t unipool_host_stats(unipool_host_pool_t* pool, unipool_host_stats_t* out);
void unipool_host_reset_peak_stats(unipool_host_pool_t* pool);
/* UNIPOOL_OK, or UNIPOOL_BAD_ARGUMENT with the broken invariant in the last
 * error. Wants no concurrent use of the pool. */
unipool_status_t unipool_host_validate(unipool_host_pool_t* pool);

/* History: from now on keeps the last max_entries alloc, free and pinning
 * events (dropping what was recorded before); 0 stops and drops. Off by
 * default. UNIPOOL_OUT_OF_SPACE when the ring could not be mapped. */
unipool_status_t unipool_host_record_history(unipool_host_pool_t* pool, size_t max_entries);
/* The history as JSON, NUL-terminated, into buf when it fits in capacity
 * bytes; *needed (if not NULL) gets the bytes it takes, NUL included.
 * UNIPOOL_OUT_OF_SPACE when it does not fit (buf is then untouched): call
 * again with *needed bytes. buf may be NULL with capacity 0.
 *   {"max_entries": N, "entries": [{"action": "alloc", "address": A,
 *     "size": S, "time_ns": T}, ...]}   actions: alloc free pin unpin pin_failed */
unipool_status_t unipool_host_history_json(unipool_host_pool_t* pool, char* buf, size_t capacity, size_t* needed);

#ifdef __cplusplus
}
#endif

#endif /* UNIPOOL_C_HOST_H */
