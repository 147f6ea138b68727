// unipool host: the per-thread last error of the host pools.
//
// Messages are built in a fixed buffer (no heap: the malloc face reports them
// before aborting) and kept per thread until the thread's next error.
#pragma once

#include <cstddef>
#include <cstdint>

#include "unipool/status.hpp"

namespace unipool::host {

class Message {
 public:
  // Only the first byte is cleared: the allocation paths build one or two
  // per call and fill them only on failure (clearing all 256 bytes of each
  // was ~3% of hakmem_mixed's profile under perf).
  Message() noexcept { text_[0] = '\0'; }
  Message(const Message& other) noexcept : size_(other.size_) { copy_text(other); }
  Message& operator=(const Message& other) noexcept {
    size_ = other.size_;
    copy_text(other);
    return *this;
  }

  Message& add(const char* text) noexcept;
  Message& add_hex(uint64_t value) noexcept;
  Message& add_dec(uint64_t value) noexcept;
  Message& add_ptr(const void* p) noexcept { return add_hex(reinterpret_cast<uintptr_t>(p)); }
  const char* c_str() const noexcept { return text_; }

 private:
  void copy_text(const Message& other) noexcept {
    for (size_t i = 0; i <= size_; ++i) text_[i] = other.text_[i];
  }

  char text_[256];
  size_t size_ = 0;
};

// Records status + message for this thread; returns the status.
Status fail(Status status, const Message& message) noexcept;
Status fail(Status status, const char* message) noexcept;
Status thread_last_status() noexcept;
const char* thread_last_error() noexcept;

// Heap corruption (a free block written after it was freed: free_link.hpp)
// is reported to the caller as Status::corrupted where it can be (an
// allocation), but it may also be found while freeing or at thread exit,
// where no caller waits for a status. A handler installed here hears of
// every one, with its message, before the engine returns: the malloc face
// installs one that aborts, as glibc does on its heap checks. Process-wide
// (per copy of the engine: the face links its own); nullptr: none.
using CorruptionHandler = void (*)(const char* message) noexcept;
void set_corruption_handler(CorruptionHandler handler) noexcept;
CorruptionHandler corruption_handler() noexcept;

}  // namespace unipool::host
