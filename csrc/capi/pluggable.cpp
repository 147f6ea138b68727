// unipool C ABI: torch's CUDAPluggableAllocator entry points, thin wrappers
// over the device C ABI on the default pools. Nothing here throws (torch
// calls them through plain function pointers, ctypes users too).
#include "unipool/c/device.h"
#include "unipool/c/pluggable.h"

extern "C" {

void* unipool_alloc(size_t size, int device, void* stream) {
  if (size == 0) return nullptr;  // torch never asks for 0; others get NULL, like malloc(0) may
  return unipool_device_alloc(nullptr, size, device, stream, nullptr);
}

void unipool_free(void* ptr, size_t /*size*/, int device, void* /*stream*/) {
  // The pool knows the block's size and stream; a foreign pointer is refused
  // there (UNIPOOL_NOT_LIVE in the last error) and changes nothing.
  if (ptr != nullptr) unipool_device_free_on(nullptr, ptr, device);
}

void unipool_init(int /*device_count*/) { (void)unipool_device_default(); }

void unipool_reset(void) { unipool_device_empty_cache(nullptr, -1); }

void unipool_memory_fraction(double fraction, int device) {
  unipool_device_set_memory_fraction(nullptr, device, fraction);
}

void unipool_record_stream(void* ptr, void* stream) { unipool_device_record_stream(nullptr, ptr, stream); }

}  // extern "C"
