// unipool: the errors the device pool raises.
//
// Every misuse (double free, foreign or interior pointer, zero or huge size,
// bad config) and every exhausted device is reported by an exception that
// carries a Status and a message saying what happened; the pool is unchanged
// by the failed call, so it stays usable.
#pragma once

#include <stdexcept>
#include <string>

#include "unipool/status.hpp"

namespace unipool {

class DevicePoolError : public std::runtime_error {
 public:
  DevicePoolError(Status status, const std::string& message)
      : std::runtime_error(message), status_(status) {}
  Status status() const noexcept { return status_; }

 private:
  Status status_;
};

// The device (or the configured limit) cannot hold the request even after
// the pool released what it caches. what() reads like PyTorch's "CUDA out of
// memory. Tried to allocate ..." message.
class OutOfMemoryError : public DevicePoolError {
 public:
  explicit OutOfMemoryError(const std::string& message)
      : DevicePoolError(Status::out_of_space, message) {}
};

}  // namespace unipool
