// unipool malloc face: memory for calls made while the pool is being built.
//
// Building the default pool may itself reach malloc (pthread_atfork and the
// C++ runtime allocate), and a program's first malloc can come from a library
// constructor before ours ran. Those few calls are served by bumping through
// a static buffer: never reused, never returned, recognised by address on
// free and realloc. Each block carries its size in a 16-byte header.
#pragma once

#include <cstddef>
#include <cstdint>

namespace unipool::malloc_face {

class BootstrapArena {
 public:
  // nullptr when the buffer is used up.
  static void* allocate(size_t size, size_t alignment) noexcept;
  static bool contains(const void* p) noexcept {
    const auto a = reinterpret_cast<uintptr_t>(p);
    return a >= begin() && a < begin() + kBytes;
  }
  // The size asked for the block at p (p must be contained).
  static size_t size_of(const void* p) noexcept;

 private:
  static constexpr size_t kBytes = size_t{256} << 10;
  static uintptr_t begin() noexcept;
};

}  // namespace unipool::malloc_face
