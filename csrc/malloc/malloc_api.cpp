// unipool malloc face: the C allocation functions, for LD_PRELOAD.
//
// These definitions take the place of glibc's for the whole process (the
// preloaded library comes first in symbol lookup), including the calls glibc
// makes to malloc itself. Behaviour follows glibc where the standards leave a
// choice (see face_alloc.hpp).
#include <malloc.h>
#include <unistd.h>

#include <cstdlib>

#include "core/align.hpp"
#include "malloc/face_alloc.hpp"

namespace mf = unipool::malloc_face;

namespace {

size_t page_size() {
  static const size_t size = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  return size;
}

// aligned_alloc's EINVAL, out of line: the call to errno's address would
// otherwise give aligned_alloc a stack frame on every call.
[[gnu::cold, gnu::noinline]] void* refuse_alignment() noexcept {
  errno = EINVAL;
  return nullptr;
}

}  // namespace

// exports.map lists what the library exports; everything else is local.
#define UNIPOOL_EXPORT extern "C"

// The version of the face; host_bench checks for this symbol to know the
// preload took effect.
UNIPOOL_EXPORT const char* unipool_malloc_face_version() { return UNIPOOL_VERSION; }

UNIPOOL_EXPORT void* malloc(size_t size) noexcept { return mf::allocate(size); }

UNIPOOL_EXPORT void free(void* block) noexcept { mf::release(block, "free"); }

UNIPOOL_EXPORT void cfree(void* block) noexcept { mf::release(block, "cfree"); }

UNIPOOL_EXPORT void* calloc(size_t count, size_t size) noexcept {
  size_t bytes = 0;
  if (__builtin_mul_overflow(count, size, &bytes)) {
    errno = ENOMEM;
    return nullptr;
  }
  return mf::allocate_zeroed(bytes);
}

UNIPOOL_EXPORT void* realloc(void* block, size_t size) noexcept { return mf::reallocate(block, size); }

UNIPOOL_EXPORT void* reallocarray(void* block, size_t count, size_t size) noexcept {
  size_t bytes = 0;
  if (__builtin_mul_overflow(count, size, &bytes)) {
    errno = ENOMEM;
    return nullptr;
  }
  return mf::reallocate(block, bytes, "reallocarray");
}

UNIPOOL_EXPORT int posix_memalign(void** out, size_t alignment, size_t size) noexcept {
  if (!unipool::is_power_of_two(alignment) || alignment % sizeof(void*) != 0) return EINVAL;
  const int saved = errno;  // posix_memalign reports through its result only
  void* block = mf::allocate_aligned(alignment, size);
  errno = saved;
  if (block == nullptr) return ENOMEM;
  *out = block;
  return 0;
}

UNIPOOL_EXPORT void* aligned_alloc(size_t alignment, size_t size) noexcept {
  if (UNIPOOL_UNLIKELY(!unipool::is_power_of_two(alignment))) return refuse_alignment();
  return mf::allocate_aligned(alignment, size);
}

// glibc rounds an alignment that is not a power of two up to the next one.
UNIPOOL_EXPORT void* memalign(size_t alignment, size_t size) noexcept {
  if (alignment > (size_t{1} << 62)) {
    errno = EINVAL;
    return nullptr;
  }
  size_t a = 1;
  while (a < alignment) a <<= 1;
  return mf::allocate_aligned(a, size);
}

UNIPOOL_EXPORT void* valloc(size_t size) noexcept { return mf::allocate_aligned(page_size(), size); }

UNIPOOL_EXPORT void* pvalloc(size_t size) noexcept {
  const size_t page = page_size();
  if (size > SIZE_MAX - page) {
    errno = ENOMEM;
    return nullptr;
  }
  return mf::allocate_aligned(page, unipool::align_up(size, page));
}

UNIPOOL_EXPORT size_t malloc_usable_size(void* block) noexcept { return mf::usable_size(block); }
