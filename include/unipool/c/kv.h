/* unipool C ABI: the KV block pools (see include/unipool/kv_pool.hpp and
 * docs/kv_offload.md): one handle type for the in-process pool
 * (unipool::KVBlockPool) and the pool shared by a node's processes
 * (unipool::SharedKVBlockPool), with the same calls. Every call is
 * thread-safe except unipool_kv_validate; a refused call changes nothing,
 * returns a status and leaves the reason in unipool_last_error(). */
#ifndef UNIPOOL_C_KV_H
#define UNIPOOL_C_KV_H

#include "unipool/c/common.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct unipool_kv_pool unipool_kv_pool_t;

typedef enum unipool_kv_pinned {
  UNIPOOL_KV_PINNED_BEST_EFFORT = 0, /* pinned where a CUDA device is present */
  UNIPOOL_KV_PINNED_OFF = 1,         /* pageable */
  UNIPOOL_KV_PINNED_ON = 2           /* pinned, or the pool is not made */
} unipool_kv_pinned_t;

typedef enum unipool_kv_lifetime {
  UNIPOOL_KV_WHILE_ATTACHED = 0, /* a shared pool lives while any process has it attached */
  UNIPOOL_KV_CREATOR = 1         /* ... or closes when its creator exits */
} unipool_kv_lifetime_t;

/* Zero means the default for every field but block_bytes and num_blocks. */
typedef struct unipool_kv_options {
  uint64_t block_bytes; /* bytes of one block (> 0); for an attach, the size expected (0: any) */
  uint64_t num_blocks;  /* 1 .. 2^31; for an attach, the count expected (0: any) */
  uint64_t alignment;   /* blocks start at multiples of it; 0: 256 */
  unipool_kv_pinned_t pinned;
  int numa_node;                  /* node + 1 to bind the memory to; 0: no binding */
  uint64_t max_pin;               /* largest single pinning registration; 0: 16 GiB */
  unipool_kv_lifetime_t lifetime; /* shared pools */
  uint32_t max_members;           /* shared pools: processes attached at once, 1 .. 255; 0: 64 */
} unipool_kv_options_t;

/* Same fields as unipool::SharedKVBlockPoolStats (blocks unless named
 * otherwise; the shared-only ones are 0 for an in-process pool). Set `size`
 * to sizeof(unipool_kv_stats_t) before the call; fields are only appended. */
typedef struct unipool_kv_stats_s {
  uint64_t size;
  uint64_t num_blocks, block_bytes, stride;
  uint64_t free_blocks, live_blocks, deferred_blocks, peak_live_blocks;
  uint64_t requested_bytes, reserved_bytes, pinned_bytes;
  uint64_t allocs, frees, failed_allocs, misuse_errors;
  uint64_t transit_blocks, reclaimed_blocks, owned_blocks, members, dead_members, recoveries;
} unipool_kv_stats_t;

/* An in-process pool. UNIPOOL_BAD_ARGUMENT for bad options,
 * UNIPOOL_OUT_OF_SPACE when the memory cannot be had. */
unipool_status_t unipool_kv_create(const unipool_kv_options_t* options, unipool_kv_pool_t** out);
/* Creates the shared pool `name` ([A-Za-z0-9._-], 1 to 64 characters) and
 * attaches the caller; UNIPOOL_BAD_ARGUMENT also when a live pool has the name. */
unipool_status_t unipool_kv_create_shared(const char* name, const unipool_kv_options_t* options,
                                          unipool_kv_pool_t** out);
/* Attaches to the shared pool `name`. options (may be NULL): pinned,
 * max_pin, and the block_bytes / num_blocks expected. UNIPOOL_BAD_ARGUMENT
 * when nobody serves it, its layout or version differs, or it is full. */
unipool_status_t unipool_kv_attach(const char* name, const unipool_kv_options_t* options, unipool_kv_pool_t** out);
/* Frees the pool; detaches from a shared one (its blocks owned by the caller
 * are freed). */
void unipool_kv_destroy(unipool_kv_pool_t* pool);

/* n ids, lowest free first, to out. UNIPOOL_OUT_OF_SPACE: fewer are free. */
unipool_status_t unipool_kv_alloc(unipool_kv_pool_t* pool, size_t n, int64_t* out);
/* UNIPOOL_NOT_LIVE: an id out of range, not allocated or repeated. */
unipool_status_t unipool_kv_free(unipool_kv_pool_t* pool, const int64_t* ids, size_t n);
/* Frees ids, then allocates n into out (which may be ids), under one lock;
 * refused whole. */
unipool_status_t unipool_kv_free_and_alloc(unipool_kv_pool_t* pool, const int64_t* ids, size_t n_free, size_t n,
                                           int64_t* out);
/* Frees ids once `fence` of `source` completes. */
unipool_status_t unipool_kv_free_after(unipool_kv_pool_t* pool, const int64_t* ids, size_t n,
                                       const unipool_fence_t* source, uint64_t fence);
/* Frees the deferred batches whose fences completed; returns the blocks freed. */
size_t unipool_kv_collect_deferred(unipool_kv_pool_t* pool);

/* The block's memory (base + id * stride), NULL for an id out of range. */
void* unipool_kv_block(unipool_kv_pool_t* pool, uint64_t id);
/* 1 when id is handed out and not freed, else 0. */
int unipool_kv_is_live(unipool_kv_pool_t* pool, uint64_t id);
unipool_pinning_state_t unipool_kv_pinning_state(unipool_kv_pool_t* pool);
unipool_status_t unipool_kv_stats(unipool_kv_pool_t* pool, unipool_kv_stats_t* out);
void unipool_kv_reset_peak_stats(unipool_kv_pool_t* pool);
/* UNIPOOL_OK, or UNIPOOL_BAD_ARGUMENT with the broken invariant in the last
 * error (as unipool_host_validate). Wants no concurrent use in this process. */
unipool_status_t unipool_kv_validate(unipool_kv_pool_t* pool);

/* Shared pools only (UNIPOOL_BAD_ARGUMENT for an in-process pool). */
/* Hands blocks the caller owns to the member process `to_pid`. */
unipool_status_t unipool_kv_hand_over(unipool_kv_pool_t* pool, const int64_t* ids, size_t n, int to_pid);
/* Makes blocks handed to the caller its own. */
unipool_status_t unipool_kv_take_over(unipool_kv_pool_t* pool, const int64_t* ids, size_t n);
/* Frees the blocks of members that died; the count to *freed (may be NULL). */
unipool_status_t unipool_kv_reclaim_dead(unipool_kv_pool_t* pool, size_t* freed);
/* The pid owning block id to *pid (0: free). */
unipool_status_t unipool_kv_owner_of(unipool_kv_pool_t* pool, uint64_t id, int* pid);

#ifdef __cplusplus
}
#endif

#endif /* UNIPOOL_C_KV_H */
