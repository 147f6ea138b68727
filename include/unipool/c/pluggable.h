/* unipool C ABI: the entry points of torch's CUDAPluggableAllocator route.
 *
 *   torch.cuda.memory.CUDAPluggableAllocator(path_to_libunipool,
 *                                            "unipool_alloc", "unipool_free")
 *
 * They serve the default device pools (UNIPOOL_DEVICE_CONF; docs/pytorch.md).
 * Streams are cudaStream_t values passed as void*, so this header compiles
 * without CUDA; the ABI is the same (a pointer). Failures never throw: an
 * allocation that fails returns NULL and unipool_last_error() says why. */
#ifndef UNIPOOL_C_PLUGGABLE_H
#define UNIPOOL_C_PLUGGABLE_H

#include "unipool/c/common.h"

#ifdef __cplusplus
extern "C" {
#endif

/* set_alloc_fn / set_free_fn: `size` bytes on `device`, stream-ordered on
 * `stream`; the free gets the allocation's size, device and stream back.
 * unipool_alloc returns NULL on failure (unipool_last_error() says why).
 * unipool_free of a pointer the pools do not hold (foreign, interior, freed
 * twice) prints the reason to stderr and aborts: it cannot report it, and
 * going on would hide a bug (torch's allocator ends the process too). */
void* unipool_alloc(size_t size, int device, void* stream);
void unipool_free(void* ptr, size_t size, int device, void* stream);
/* set_init_fn: torch calls it with the device count when CUDA initialises;
 * creates the default pools (so a bad UNIPOOL_DEVICE_CONF shows up early). */
void unipool_init(int device_count);
/* set_reset_fn: torch.cuda.empty_cache(). */
void unipool_reset(void);
/* set_memory_fraction_fn: torch.cuda.set_per_process_memory_fraction. */
void unipool_memory_fraction(double fraction, int device);
/* set_record_stream_fn: Tensor.record_stream. */
void unipool_record_stream(void* ptr, void* stream);

#ifdef __cplusplus
}
#endif

#endif /* UNIPOOL_C_PLUGGABLE_H */
