#include "malloc/fatal.hpp"

#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "core/number_text.hpp"

namespace unipool::malloc_face {
namespace {

// A fixed buffer that truncates rather than overflows.
class Line {
 public:
  Line& add(const char* s) {
    while (s != nullptr && *s != '\0' && len_ < sizeof buf_ - 1) buf_[len_++] = *s++;
    return *this;
  }
  Line& add_pointer(const void* p) { return add(to_hex(reinterpret_cast<uintptr_t>(p)).text); }
  void write() {
    buf_[len_++] = '\n';
    size_t done = 0;
    while (done < len_) {
      const ssize_t n = ::write(STDERR_FILENO, buf_ + done, len_ - done);
      if (n <= 0) break;
      done += static_cast<size_t>(n);
    }
  }
  [[noreturn]] void write_and_abort() {
    write();
    std::abort();
  }

 private:
  char buf_[512];
  size_t len_ = 0;
};

}  // namespace

void fatal(const char* call, const void* ptr, const char* reason) noexcept {
  Line().add("unipool malloc: ").add(call).add("(").add_pointer(ptr).add("): ").add(reason).write_and_abort();
}

void fatal(const char* reason, const char* detail) noexcept {
  Line().add("unipool malloc: ").add(reason).add(detail).write_and_abort();
}

void warn(const char* reason, const char* detail) noexcept {
  Line().add("unipool malloc: ").add(reason).add(detail).write();
}

}  // namespace unipool::malloc_face
