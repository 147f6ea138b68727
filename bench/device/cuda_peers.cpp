// bench/device: the peers that run on the null GPU: CUB's
// CachingDeviceAllocator (CCCL, compiled as host code) and one cudaMalloc per
// request. The null GPU's calls are host functions behind one mutex, so their
// CPU cost is not a real driver's: see docs/device_pool.md.
#include <cub/util_allocator.cuh>

#include <memory>
#include <stdexcept>

#include "nullgpu/nullgpu.hpp"
#include "peers.hpp"

namespace device_bench {

namespace {

namespace gpu = unipool::nullgpu;

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(e));
}

// A fresh null GPU device of 80 GiB for each peer instance.
void fresh_device() {
  gpu::Config c;
  c.capacity = uint64_t{80} << 30;
  // The null GPU's cudaFree would complete every pending event of the device (a
  // scan of all of them, CUB keeps one per block): a cost of the null GPU, not of
  // CUDA, so it is off here. CUB never depends on it.
  c.free_synchronizes = false;
  gpu::reset(c);
}

uint64_t fake_backend_calls() { return gpu::calls("cudaMalloc") + gpu::calls("cudaFree"); }

class CubPeer final : public Peer {
 public:
  CubPeer() {
    fresh_device();
    cub_ = std::make_unique<cub::CachingDeviceAllocator>();  // CUB's defaults
  }
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
  uint64_t backend_calls() const override { return fake_backend_calls(); }

 private:
  std::unique_ptr<cub::CachingDeviceAllocator> cub_;
};

class CudaMallocPeer final : public Peer {
 public:
  CudaMallocPeer() { fresh_device(); }
  void* allocate(uint64_t bytes) override {
    void* p = nullptr;
    check(cudaMalloc(&p, bytes), "cudaMalloc");
    return p;
  }
  void deallocate(void* ptr, uint64_t) override { check(cudaFree(ptr), "cudaFree"); }
  uint64_t reserved() const override { return gpu::live_bytes(0); }
  uint64_t backend_calls() const override { return fake_backend_calls(); }
};

}  // namespace

std::unique_ptr<Peer> make_unipool();
std::unique_ptr<Peer> make_unipool_expandable();

std::vector<PeerInfo> all_peers() {
  return {{"unipool", make_unipool},
          {"unipool:expandable", make_unipool_expandable},
          {"cub", [] { return std::unique_ptr<Peer>(std::make_unique<CubPeer>()); }},
          {"cudamalloc", [] { return std::unique_ptr<Peer>(std::make_unique<CudaMallocPeer>()); }}};
}

const char* baseline_substrate() { return "null GPU runtime"; }

}  // namespace device_bench
