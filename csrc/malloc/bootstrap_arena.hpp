// unipool malloc face: memory for calls made while the pool is being built.
//
// Building the default pool may itself reach malloc (pthread_atfork and the
// C++ runtime allocate), and a program's first malloc can come from a library
// constructor before ours ran. Those calls, and a process's first requests up
// to the start-up share (face_pool.hpp), are served by bumping through a
// static buffer: never reused, never returned, recognised by address on free
// and realloc. Each block carries its size in a 16-byte header.
#pragma once

#include <cstddef>
#include <cstdint>

namespace unipool::malloc_face {

// The buffer; named here so that contains() (on every free) is inlined.
inline constexpr size_t kBootstrapBytes = size_t{256} << 10;
// What a process's first requests may take of it; the rest stays for the
// requests made while the pool is built.
inline constexpr size_t kStartupShare = size_t{128} << 10;
extern unsigned char g_bootstrap_buffer[kBootstrapBytes] __attribute__((visibility("hidden")));

class BootstrapArena {
 public:
  // nullptr when the buffer is used up.
  static void* allocate(size_t size, size_t alignment) noexcept;
  static bool contains(const void* p) noexcept {
    return reinterpret_cast<uintptr_t>(p) - reinterpret_cast<uintptr_t>(g_bootstrap_buffer) < kBootstrapBytes;
  }
  // True while the requests so far and one of `size` bytes (with room for
  // its header and any alignment) fit the start-up share.
  static bool fits_startup_share(size_t size) noexcept;
  // The size asked for the block at p (p must be contained).
  static size_t size_of(const void* p) noexcept;
};

}  // namespace unipool::malloc_face
