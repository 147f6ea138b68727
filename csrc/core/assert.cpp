#include "core/assert.hpp"

#include <unistd.h>

#include <cstdlib>
#include <cstring>

#include "core/number_text.hpp"

namespace unipool::detail {
namespace {

void put(const char* text) noexcept {
  for (size_t left = std::strlen(text); left > 0;) {
    const ssize_t n = ::write(STDERR_FILENO, text, left);
    if (n <= 0) return;
    text += n;
    left -= static_cast<size_t>(n);
  }
}

}  // namespace

void assertion_failed(const char* condition, const char* what, const char* file, int line) noexcept {
  put("unipool: assertion failed: ");
  put(condition);
  put(" (");
  put(what);
  put(") at ");
  put(file);
  put(":");
  put(to_dec(line > 0 ? static_cast<uint64_t>(line) : 0).text);
  put("\n");
  std::abort();
}

}  // namespace unipool::detail
