/* unipool: the C ABI. One header per pool under unipool/c/; this one
 * includes them all. Every function returns a unipool_status_t (0 = ok)
 * or, for allocations, NULL with the reason in *status. */
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
