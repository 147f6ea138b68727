// unipool core: preconditions stated in code.
//
// UNIPOOL_ASSERT(cond, "what must hold") checks a precondition or an
// invariant the code relies on. It is on where NDEBUG is not defined (the
// debug, asan and tsan presets, so every sanitizer run checks it) and
// compiles to nothing in release builds, where the hot paths cannot pay for
// it. A failure writes one line naming the condition, the reason and the
// place with write(2) (no heap: it may fire inside the allocator) and aborts.
// Bad input from a caller is not a precondition: it gets a Status and a
// message, in every build.
#pragma once

namespace unipool::detail {
[[noreturn]] void assertion_failed(const char* condition, const char* what, const char* file, int line) noexcept;
}  // namespace unipool::detail

#ifndef NDEBUG
#define UNIPOOL_ASSERT(cond, what)                                                       \
  do {                                                                                   \
    if (!(cond)) ::unipool::detail::assertion_failed(#cond, (what), __FILE__, __LINE__); \
  } while (0)
#else
#define UNIPOOL_ASSERT(cond, what) \
  do {                             \
  } while (0)
#endif
