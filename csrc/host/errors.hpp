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
  Message& add(const char* text) noexcept;
  Message& add_hex(uint64_t value) noexcept;
  Message& add_dec(uint64_t value) noexcept;
  Message& add_ptr(const void* p) noexcept { return add_hex(reinterpret_cast<uintptr_t>(p)); }
  const char* c_str() const noexcept { return text_; }

 private:
  char text_[256] = {};
  size_t size_ = 0;
};

// Records status + message for this thread; returns the status.
Status fail(Status status, const Message& message) noexcept;
Status fail(Status status, const char* message) noexcept;
Status thread_last_status() noexcept;
const char* thread_last_error() noexcept;

}  // namespace unipool::host
