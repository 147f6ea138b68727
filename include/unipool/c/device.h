/* unipool C ABI: the device pool.
 *
 * Every call takes a pools handle; NULL means the process-wide default pool,
 * created on first use from the UNIPOOL_DEVICE_CONF environment variable
 * (docs/device_pool.md). A stream is a cudaStream_t's value (NULL: the default
 * stream). Failures return NULL or a status; unipool_last_error() then holds
 * the message (the OOM report, the config key that was wrong, ...).
 *
 * The torch CUDAPluggableAllocator entry points are thin wrappers:
 *   void* unipool_alloc(size_t n, int dev, cudaStream_t s)
 *     { return unipool_device_alloc(NULL, n, dev, s, NULL); }
 *   void unipool_free(void* p, size_t n, int dev, cudaStream_t s)
 *     { unipool_device_free_on(NULL, p, dev); }
 */
#ifndef UNIPOOL_C_DEVICE_H
#define UNIPOOL_C_DEVICE_H

#include "unipool/c/common.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct unipool_device_pools unipool_device_pools_t;

/* A pool set of its own, from a config string ("backend=sim,..."; NULL or ""
 * for the defaults). */
unipool_status_t unipool_device_pools_create(const char* config, unipool_device_pools_t** out);
void unipool_device_pools_destroy(unipool_device_pools_t* pools);
/* The default pools (created on first use from UNIPOOL_DEVICE_CONF); NULL if
 * that config is bad, with the reason in unipool_last_error(). */
unipool_device_pools_t* unipool_device_default(void);
int unipool_device_count(unipool_device_pools_t* pools);

/* size bytes on `device`, stream-ordered on `stream`, to *out. On failure
 * *out is NULL and the status says why: UNIPOOL_ZERO_SIZE,
 * UNIPOOL_TOO_LARGE, UNIPOOL_OUT_OF_SPACE (out of memory),
 * UNIPOOL_BAD_ARGUMENT, UNIPOOL_BACKEND_ERROR (the backend failed for a
 * reason other than OOM). */
unipool_status_t unipool_device_alloc(unipool_device_pools_t* pools, size_t size, int device, void* stream, void** out);
/* UNIPOOL_NOT_LIVE for a double free, a foreign or interior pointer. */
unipool_status_t unipool_device_free(unipool_device_pools_t* pools, void* ptr);
/* The same, looking on `device` first. */
unipool_status_t unipool_device_free_on(unipool_device_pools_t* pools, void* ptr, int device);
unipool_status_t unipool_device_record_stream(unipool_device_pools_t* pools, void* ptr, void* stream);
/* device -1: every device. */
unipool_status_t unipool_device_empty_cache(unipool_device_pools_t* pools, int device);

/* A statistic by PyTorch's memory_stats() key, e.g.
 * "allocated_bytes.all.current", "num_ooms". UNIPOOL_BAD_ARGUMENT for an
 * unknown key or device. */
unipool_status_t unipool_device_stat(unipool_device_pools_t* pools, int device, const char* key,
                                     int64_t* value);
/* The i-th key (0-based) in memory_stats() order, NULL past the last. */
const char* unipool_device_stat_key(size_t index);
unipool_status_t unipool_device_reset_peak_stats(unipool_device_pools_t* pools, int device);
unipool_status_t unipool_device_reset_accumulated_stats(unipool_device_pools_t* pools, int device);

/* The snapshot as JSON (torch.cuda.memory._snapshot() shape), device -1 for
 * all. Writes at most `capacity` bytes including the terminating NUL and
 * returns the length the full text needs (without the NUL), like snprintf:
 * call with capacity 0 to size the buffer. Returns 0 on error. */
size_t unipool_device_snapshot_json(unipool_device_pools_t* pools, int device, char* buffer, size_t capacity);

/* Limits on reserved bytes, per device (-1: every device); 0 removes one. */
unipool_status_t unipool_device_set_memory_fraction(unipool_device_pools_t* pools, int device, double fraction);
unipool_status_t unipool_device_set_memory_limit(unipool_device_pools_t* pools, int device, uint64_t bytes);

/* Tags and sleep (docs/device_pool.md, "Sleep and wake"). The calling
 * thread's tag for new blocks: a name of 1 to 64 characters, NULL for
 * "default". UNIPOOL_BAD_ARGUMENT for a bad name or a 65th tag. */
unipool_status_t unipool_device_set_tag(const char* tag);

/* What one sleep or wake did. Set `size` to sizeof(unipool_device_sleep_result_t)
 * before the call; the library fills only what a struct of that size holds. */
typedef struct unipool_device_sleep_result {
  size_t size;
  uint64_t offloaded_bytes; /* copied to host (sleep) or back (wake) */
  uint64_t discarded_bytes; /* live blocks whose contents were dropped */
  uint64_t released_bytes;  /* device memory unmapped (sleep) or mapped again (wake) */
  double seconds;
} unipool_device_sleep_result_t;

/* Every device's blocks of the tags in offload[] keep their contents in host
 * memory (the default host pool), those of discard[] lose them; the device
 * memory of both goes back, their addresses stay. `result` may be NULL.
 * UNIPOOL_BAD_ARGUMENT: no tag, a tag in both lists, a backend that cannot
 * keep addresses (cuda_malloc). UNIPOOL_ASLEEP: a tag already asleep.
 * UNIPOOL_BACKEND_ERROR / UNIPOOL_OUT_OF_SPACE: a failure part way; the
 * message says whether the tag is unchanged or partly asleep (call again). */
unipool_status_t unipool_device_sleep(unipool_device_pools_t* pools, const char* const* offload, size_t offload_count,
                                      const char* const* discard, size_t discard_count,
                                      unipool_device_sleep_result_t* result);
/* Maps the tags' memory again at the same addresses and copies offloaded
 * contents back. count 0: every tag asleep. UNIPOOL_ASLEEP: a tag awake, or
 * none asleep. */
unipool_status_t unipool_device_wake(unipool_device_pools_t* pools, const char* const* tags, size_t count,
                                     unipool_device_sleep_result_t* result);
/* Per tag: [{"tag", "state", "allocated_bytes", "blocks", "reserved_bytes",
 * "offloaded_bytes", "discarded_bytes", "released_bytes", "host_bytes",
 * "sleeps", "wakes", "last_sleep_seconds", "last_wake_seconds"}], device -1
 * for all (then with "device"). Sized as unipool_device_snapshot_json. */
size_t unipool_device_tag_stats_json(unipool_device_pools_t* pools, int device, char* buffer, size_t capacity);

/* Checks every invariant of every device pool; UNIPOOL_BAD_ARGUMENT and the
 * broken invariant in unipool_last_error() if one fails. */
unipool_status_t unipool_device_validate(unipool_device_pools_t* pools);

#ifdef __cplusplus
}
#endif

#endif /* UNIPOOL_C_DEVICE_H */
