// unipool backend: page-locking ("pinning") of host memory for fast,
// asynchronous copies. With CUDA: cudaHostRegister / cudaHostUnregister
// (backend/cuda/cuda_host_pinner.cpp). Without: a pinner that reports it is
// unavailable, and pools run pageable and say so.
#pragma once

#include <cstdint>
#include <memory>

#include "unipool/device_backend.hpp"

namespace unipool::backend {

class HostPinner {
 public:
  virtual ~HostPinner() = default;
  virtual const char* name() const noexcept = 0;
  // True when a CUDA runtime with at least one device is present.
  virtual bool available() = 0;
  // Why available() is false when it is not for want of a device (the
  // runtime could not be loaded), else nullptr.
  virtual const char* unavailable_reason() const noexcept { return nullptr; }
  // Registers [ptr, ptr + bytes). On failure the pending CUDA error is
  // cleared, so it cannot surface in an unrelated later call.
  virtual BackendStatus pin(void* ptr, uint64_t bytes) = 0;
  virtual BackendStatus unpin(void* ptr) = 0;
};

// The CUDA pinner when built with CUDA, else the unavailable one.
std::unique_ptr<HostPinner> make_default_host_pinner();

}  // namespace unipool::backend
