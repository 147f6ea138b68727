// unipool device pool: the backend a config names. "sim" is always built; the
// CUDA backends (csrc/backend/cuda/, make_cuda_backend) when the library is
// built with CUDA and they are present.
#include <string>

#include "unipool/device_pool.hpp"
#include "unipool/device_sim_backend.hpp"

// UNIPOOL_DEVICE_CUDA_BACKENDS is set by device/sources.cmake when the CUDA
// backends are part of this build.
#if defined(UNIPOOL_DEVICE_CUDA_BACKENDS) && UNIPOOL_DEVICE_CUDA_BACKENDS
#include "backend/cuda/cuda_backends.hpp"
#define UNIPOOL_DEVICE_HAS_CUDA_BACKENDS 1
#else
#define UNIPOOL_DEVICE_HAS_CUDA_BACKENDS 0
#endif

namespace unipool {

std::shared_ptr<DeviceBackend> make_device_backend(const DevicePoolConfig& config) {
  std::string name = config.backend;
  if (name.empty()) name = UNIPOOL_DEVICE_HAS_CUDA_BACKENDS ? "cuda_vmm" : "sim";
  if (name == "sim") {
    SimBackendOptions o;
    o.devices = config.sim_devices;
    o.capacity = config.sim_capacity;
    o.granularity = config.sim_granularity;
    o.accessible = config.sim_accessible;
    o.expandable = true;
    return std::make_shared<SimBackend>(o);
  }
#if UNIPOOL_DEVICE_HAS_CUDA_BACKENDS
  if (auto backend = backend::make_cuda_backend(name)) return std::shared_ptr<DeviceBackend>(std::move(backend));
#endif
  throw DevicePoolError(Status::bad_argument, "unipool: UNIPOOL_DEVICE_CONF key 'backend': '" + name +
                                                  "' is not available in this build (built: sim" +
                                                  (UNIPOOL_DEVICE_HAS_CUDA_BACKENDS ? ", cuda_malloc, cuda_vmm, nccl" : "") +
                                                  ")");
}

}  // namespace unipool
