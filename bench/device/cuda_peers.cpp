// bench/device: the peers that run on the null GPU: unipool's pool on its
// production CUDA backends (cuda_malloc, cuda_vmm), CUB's
// CachingDeviceAllocator (CCCL, compiled as host code), one cudaMalloc per
// request and, when torch was found, PyTorch's CUDACachingAllocator. The
// null GPU's calls are host functions behind one mutex, so their CPU cost is
// not a real driver's: see docs/device_pool.md.
#include <cub/util_allocator.cuh>

#include <memory>
#include <stdexcept>

#include "backend/cuda/cuda_backends.hpp"
#include "null_gpu.hpp"
#include "peers.hpp"
#include "unipool_peer.hpp"
#if DEVICE_BENCH_TORCH
#include "torch_peer.hpp"
#endif

namespace device_bench {

namespace {

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(e));
}

// Plain segments on cuda_malloc, expandable ones on cuda_vmm: the backends
// unipool.torch installs in a real process.
std::unique_ptr<Peer> make_unipool_on_cuda(bool expandable) {
  auto counters = std::make_shared<NullGpuCounters>();  // before the pool's first call
  std::shared_ptr<unipool::DeviceBackend> backend =
      unipool::backend::make_cuda_backend(expandable ? "cuda_vmm" : "cuda_malloc");
  return make_unipool_peer(std::move(backend), expandable, [counters] { return counters->memory_calls(); });
}

class CubPeer final : public Peer {
 public:
  CubPeer() : cub_(std::make_unique<cub::CachingDeviceAllocator>()) {}  // CUB's defaults
  ~CubPeer() override {
    cub_.reset();
    (void)cudaGetLastError();
  }
  void* allocate(uint64_t bytes) override {
    void* p = nullptr;
    check(cub_->DeviceAllocate(&p, bytes, nullptr), "cub DeviceAllocate");
    return p;
  }
  void deallocate(void* ptr, uint64_t) override { check(cub_->DeviceFree(ptr), "cub DeviceFree"); }
  uint64_t reserved() const override {
    const auto it = cub_->cached_bytes.find(0);
    return it == cub_->cached_bytes.end() ? 0 : it->second.free + it->second.live;
  }
  uint64_t backend_calls() const override { return counters_.memory_calls(); }

 private:
  NullGpuCounters counters_;
  std::unique_ptr<cub::CachingDeviceAllocator> cub_;
};

class CudaMallocPeer final : public Peer {
 public:
  void* allocate(uint64_t bytes) override {
    void* p = nullptr;
    check(cudaMalloc(&p, bytes), "cudaMalloc");
    return p;
  }
  void deallocate(void* ptr, uint64_t) override { check(cudaFree(ptr), "cudaFree"); }
  uint64_t reserved() const override { return counters_.live_bytes(); }
  uint64_t backend_calls() const override { return counters_.memory_calls(); }

 private:
  NullGpuCounters counters_;
};

template <class P>
std::unique_ptr<Peer> make() {
  return std::make_unique<P>();
}

}  // namespace

std::vector<PeerInfo> all_peers() {
  const std::string on = null_gpu_kind();
  std::vector<PeerInfo> peers = {
      {"unipool", [] { return make_unipool_on_cuda(false); }, "cuda_malloc backend on the " + on},
      {"unipool:expandable", [] { return make_unipool_on_cuda(true); }, "cuda_vmm backend on the " + on},
      {"cub", make<CubPeer>, "cudaMalloc/cudaFree of the " + on},
      {"cudamalloc", make<CudaMallocPeer>, "cudaMalloc/cudaFree of the " + on}};
#if DEVICE_BENCH_TORCH
  peers.push_back({"torch", [] { return make_torch_peer(false); }, torch_substrate(false) + " on the " + on});
  peers.push_back({"torch:expandable", [] { return make_torch_peer(true); }, torch_substrate(true) + " on the " + on});
#endif
  return peers;
}

const char* baseline_substrate() { return null_gpu_kind(); }

std::string missing_peers() {
#if DEVICE_BENCH_TORCH
  return "";
#else
  return "torch and torch:expandable skipped: torch (libc10_cuda) not found when this build was configured, "
         "or the build has no shared null GPU";
#endif
}

}  // namespace device_bench
