// unipool malloc face: fatal errors.
//
// A misuse the face cannot recover from (free of a pointer it did not give
// out, a double free, an interior pointer, a bad UNIPOOL_HOST_CONF) ends the
// process with one line on stderr. The message is put together on the stack
// and written with write(2): stdio may allocate, and the heap is what just
// went wrong.
#pragma once

#include <cstddef>

namespace unipool::malloc_face {

// "unipool malloc: <call>(<ptr>): <reason>" on stderr, then abort().
[[noreturn]] void fatal(const char* call, const void* ptr, const char* reason) noexcept;

// "unipool malloc: <reason><detail>" on stderr, then abort().
[[noreturn]] void fatal(const char* reason, const char* detail = nullptr) noexcept;

// "unipool malloc: <reason><detail>" on stderr; the program goes on.
void warn(const char* reason, const char* detail = nullptr) noexcept;

}  // namespace unipool::malloc_face
