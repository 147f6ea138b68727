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
  UNIPOOL_FOREIGN = 9 /* an allocation of another range allocator */
} unipool_status_t;

/* A static, human-readable description of a status. */
const char* unipool_status_string(unipool_status_t status);

/* The last error message of this thread (a config key that was wrong, the
 * OOM report of the device pool, ...); "" if none. Valid until the thread's
 * next unipool call. */
const char* unipool_last_error(void);

#ifdef __cplusplus
}
#endif

#endif /* UNIPOOL_C_COMMON_H */
