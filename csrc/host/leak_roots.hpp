// unipool host: metadata in mmap'd memory that points to heap objects (the
// range allocators' node vectors, the pinner) is shown to LeakSanitizer as a
// root region, or the default pool, which is never destroyed, would be
// reported as leaking them.
#pragma once

#include <cstddef>

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/lsan_interface.h>
#endif

namespace unipool::host {

inline void add_leak_root(const void* p, size_t bytes) noexcept {
#if defined(__SANITIZE_ADDRESS__)
  __lsan_register_root_region(p, bytes);
#else
  (void)p;
  (void)bytes;
#endif
}

inline void remove_leak_root(const void* p, size_t bytes) noexcept {
#if defined(__SANITIZE_ADDRESS__)
  __lsan_unregister_root_region(p, bytes);
#else
  (void)p;
  (void)bytes;
#endif
}

}  // namespace unipool::host
