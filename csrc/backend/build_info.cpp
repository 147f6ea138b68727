#include "unipool/build_info.hpp"

#if UNIPOOL_HAS_CUDA
#include "backend/cuda/cuda_runtime_info.hpp"
#endif

namespace unipool {

BuildInfo build_info() noexcept {
#if UNIPOOL_HAS_CUDA
  return BuildInfo{UNIPOOL_VERSION, true, backend::cuda_runtime_version()};
#else
  return BuildInfo{UNIPOOL_VERSION, false, 0};
#endif
}

}  // namespace unipool
