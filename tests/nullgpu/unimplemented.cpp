// unipool null GPU: report_unimplemented (unimplemented.hpp).
#include <cstdio>
#include <mutex>
#include <set>
#include <string>

#include "nullgpu/unimplemented.hpp"

namespace unipool::nullgpu::detail {

void report_unimplemented(const char* function) noexcept {
  // Its own lock: a stub may be reached while no other null GPU state is.
  static std::mutex* const mutex = new std::mutex;
  static std::set<std::string>* const reported = new std::set<std::string>;
  try {
    std::lock_guard lock(*mutex);
    if (!reported->insert(function).second) return;
  } catch (...) {
  }
  std::fprintf(stderr, "unipool null GPU: %s is not implemented\n", function);
}

}  // namespace unipool::nullgpu::detail
