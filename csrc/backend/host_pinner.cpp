// unipool backend: the default host pinner. Built with CUDA it is the CUDA
// one (whose available() still says whether a device is present); built
// without, a pinner that refuses, so host pools run pageable and say so.
#include "backend/host_pinner.hpp"

#if UNIPOOL_HAS_CUDA
#include "backend/cuda/cuda_host_pinner.hpp"
#endif

namespace unipool::backend {
namespace {

class UnavailableHostPinner final : public HostPinner {
 public:
  const char* name() const noexcept override { return "none"; }
  bool available() override { return false; }
  BackendStatus pin(void*, uint64_t) override { return unavailable(); }
  BackendStatus unpin(void*) override { return unavailable(); }

 private:
  static BackendStatus unavailable() noexcept {
    return BackendStatus{BackendStatus::error, 0, "unipool was built without CUDA: host memory cannot be pinned"};
  }
};

}  // namespace

std::unique_ptr<HostPinner> make_default_host_pinner() {
#if UNIPOOL_HAS_CUDA
  return make_cuda_host_pinner();
#else
  return std::make_unique<UnavailableHostPinner>();
#endif
}

}  // namespace unipool::backend
