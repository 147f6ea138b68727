// unipool backend/cuda: makes a device current for the length of a call and
// gives the caller's device back afterwards, so a pool serving device 1
// never leaves the application's thread switched away from its device 0.
#pragma once

#include "unipool/device_backend.hpp"

namespace unipool::backend::cuda {

class DeviceGuard {
 public:
  explicit DeviceGuard(int device) noexcept;
  ~DeviceGuard();
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

  // Whether `device` is current; if not, why (an invalid ordinal, no driver).
  bool ok() const noexcept { return status_.is_ok(); }
  const BackendStatus& status() const noexcept { return status_; }

 private:
  int previous_ = -1;
  bool switched_ = false;
  BackendStatus status_;
};

}  // namespace unipool::backend::cuda
