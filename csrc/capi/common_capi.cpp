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

// The C enum mirrors unipool::Status value for value.
static_assert(UNIPOOL_OK == static_cast<int>(unipool::Status::ok));
static_assert(UNIPOOL_ZERO_SIZE == static_cast<int>(unipool::Status::zero_size));
static_assert(UNIPOOL_TOO_LARGE == static_cast<int>(unipool::Status::too_large));
static_assert(UNIPOOL_OUT_OF_SPACE == static_cast<int>(unipool::Status::out_of_space));
static_assert(UNIPOOL_ALLOCATION_LIMIT == static_cast<int>(unipool::Status::allocation_limit));
static_assert(UNIPOOL_NOT_LIVE == static_cast<int>(unipool::Status::not_live));
static_assert(UNIPOOL_BAD_ALIGNMENT == static_cast<int>(unipool::Status::bad_alignment));
static_assert(UNIPOOL_BAD_ARGUMENT == static_cast<int>(unipool::Status::bad_argument));
static_assert(UNIPOOL_BACKEND_ERROR == static_cast<int>(unipool::Status::backend_error));
static_assert(UNIPOOL_FOREIGN == static_cast<int>(unipool::Status::foreign));
static_assert(UNIPOOL_CORRUPTED == static_cast<int>(unipool::Status::corrupted));
static_assert(UNIPOOL_ASLEEP == static_cast<int>(unipool::Status::asleep));

// Checked before the cast: unipool::Status is 8 bits wide, so a C caller's
// 256 would read as UNIPOOL_OK.
extern "C" const char* unipool_status_string(unipool_status_t status) {
  const auto value = static_cast<long long>(status);
  if (value < UNIPOOL_OK || value > UNIPOOL_ASLEEP) return "unknown status";
  return unipool::to_string(static_cast<unipool::Status>(status));
}

extern "C" const char* unipool_last_error(void) { return unipool::capi::last_error(); }
