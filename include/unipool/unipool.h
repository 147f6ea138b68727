/* unipool: the C ABI. One header per pool under unipool/c/; this one
 * includes them all. A call that can fail returns a unipool_status_t
 * (UNIPOOL_OK = 0), hands its result out through a pointer argument, and
 * leaves the reason in unipool_last_error(). Queries that cannot fail
 * (counts, sizes, names, destroy) return their value directly. The
 * pluggable entry points (unipool/c/pluggable.h) keep the signatures
 * torch's CUDAPluggableAllocator requires. */
#ifndef UNIPOOL_UNIPOOL_H
#define UNIPOOL_UNIPOOL_H

#include "unipool/c/common.h"
#if __has_include("unipool/c/device.h")
#include "unipool/c/device.h"
#endif
#if __has_include("unipool/c/host.h")
#include "unipool/c/host.h"
#endif
#if __has_include("unipool/c/pluggable.h")
#include "unipool/c/pluggable.h"
#endif

#endif /* UNIPOOL_UNIPOOL_H */
