// unipool C ABI: status strings and the per-thread last error message.
#include "capi/last_error.hpp"
#include "unipool/c/common.h"
#include "unipool/status.hpp"

namespace unipool::capi {

namespace {
thread_local std::string t_last_error;
}  // namespace

void set_last_error(std::string message) { t_last_error = std::move(message); }
void clear_last_error() { t_last_error.clear(); }
const char* last_error() noexcept { return t_last_error.c_str(); }

}  // namespace unipool::capi

// Checked before the cast: unipool::Status is 8 bits wide, so a C caller's
// 256 would read as UNIPOOL_OK.
extern "C" const char* unipool_status_string(unipool_status_t status) {
  const auto value = static_cast<long long>(status);
  if (value < UNIPOOL_OK || value > UNIPOOL_FOREIGN) return "unknown status";
  return unipool::to_string(static_cast<unipool::Status>(status));
}

extern "C" const char* unipool_last_error(void) { return unipool::capi::last_error(); }
