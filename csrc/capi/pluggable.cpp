// unipool C ABI: torch's CUDAPluggableAllocator entry points, thin wrappers
// over the device C ABI on the default pools. Nothing here throws (torch
// calls them through plain function pointers, ctypes users too).
#include <cstdio>
#include <cstdlib>

#include "unipool/c/common.h"
#include "unipool/c/device.h"
#include "unipool/c/pluggable.h"

extern "C" {

void* unipool_alloc(size_t size, int device, void* stream) {
  if (size == 0) return nullptr;  // torch never asks for 0; others get NULL, like malloc(0) may
  void* p = nullptr;
  (void)unipool_device_alloc(nullptr, size, device, stream, &p);  // NULL and the last error on failure
  return p;
}

void unipool_free(void* ptr, size_t /*size*/, int device, void* /*stream*/) {
  // The pool knows the block's size and stream. A pointer it does not hold
  // (foreign, or freed twice) is refused there and changes nothing, but the
  // caller cannot be told: torch's deleters return nothing. Carrying on would
  // hide a bug that frees someone else's memory, so it ends the process with
  // the reason, as torch's own allocator does for an invalid device pointer
  // and glibc for an invalid free.
  if (ptr == nullptr || unipool_device_free_on(nullptr, ptr, device) == UNIPOOL_OK) return;
  std::fprintf(stderr, "unipool_free(%p, device %d): %s\n", ptr, device, unipool_last_error());
  std::abort();
}

void unipool_init(int /*device_count*/) { (void)unipool_device_default(); }

void unipool_reset(void) { unipool_device_empty_cache(nullptr, -1); }

void unipool_memory_fraction(double fraction, int device) {
  unipool_device_set_memory_fraction(nullptr, device, fraction);
}

void unipool_record_stream(void* ptr, void* stream) { unipool_device_record_stream(nullptr, ptr, stream); }

}  // extern "C"
