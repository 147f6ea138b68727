/* unipool C ABI: what the host and device parts share. */
#ifndef UNIPOOL_C_COMMON_H
#define UNIPOOL_C_COMMON_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Same values as unipool::Status (include/unipool/status.hpp). */
typedef enum unipool_status {
  UNIPOOL_OK = 0,
  UNIPOOL_ZERO_SIZE = 1,
  UNIPOOL_TOO_LARGE = 2,
  UNIPOOL_OUT_OF_SPACE = 3,
  UNIPOOL_ALLOCATION_LIMIT = 4,
  UNIPOOL_NOT_LIVE = 5,
  UNIPOOL_BAD_ALIGNMENT = 6,
  UNIPOOL_BAD_ARGUMENT = 7,
  UNIPOOL_BACKEND_ERROR = 8,
  UNIPOOL_FOREIGN = 9,    /* an allocation of another range allocator */
  UNIPOOL_CORRUPTED = 10, /* a free block was written after it was freed */
  UNIPOOL_ASLEEP = 11     /* the memory's tag is asleep (unipool_device_sleep), or awake for a wake */
} unipool_status_t;

/* A static, human-readable description of a status; "unknown status" for a
 * value that is none. */
const char* unipool_status_string(unipool_status_t status);

/* Same values as unipool::PinningState (include/unipool/host_config.hpp):
 * where a pool's memory stands with respect to pinning. */
typedef enum unipool_pinning_state {
  UNIPOOL_PINNING_PAGEABLE = 0,        /* pinned=off */
  UNIPOOL_PINNING_PAGEABLE_NO_GPU = 1, /* pinning asked, no CUDA device */
  UNIPOOL_PINNING_PINNED = 2,          /* every committed chunk is pinned */
  UNIPOOL_PINNING_PARTIALLY_PINNED = 3 /* best_effort, some registrations failed */
} unipool_pinning_state_t;

/* A static, human-readable description ("pinned", "pageable (pinned=off)");
 * "unknown pinning state" for a value that is none. */
const char* unipool_pinning_state_string(unipool_pinning_state_t state);

/* A fence a pool polls for a deferred free (unipool_host_free_after,
 * unipool_kv_free_after): completed() returns nonzero once the work before
 * `fence` is done; release() (may be NULL) is called once, when the pool no
 * longer needs the fence. The struct must stay valid until then. */
typedef struct unipool_fence {
  void* context;
  int (*completed)(void* context, uint64_t fence);
  void (*release)(void* context, uint64_t fence);
} unipool_fence_t;

/* The last error message of this thread (a config key that was wrong, the
 * OOM report of the device pool, ...); "" if none. Valid until the thread's
 * next unipool call. */
const char* unipool_last_error(void);

#ifdef __cplusplus
}
#endif

#endif /* UNIPOOL_C_COMMON_H */
