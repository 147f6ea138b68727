// bench/device: PyTorch's CUDACachingAllocator on the null GPU (torch_peer.hpp).
#include "torch_peer.hpp"

#include <c10/core/AllocatorConfig.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/PeerToPeerAccess.h>
#include <c10/util/Exception.h>
#include <torch/headeronly/version.h>

#include <mutex>

#include "null_gpu.hpp"

// Exported by libc10_cuda but not declared in its installed headers: the hook
// libtorch_cuda registers so that c10 can ask whether a device has a primary
// context. Without it c10 warns on every device switch of emptyCache.
namespace c10::cuda::_internal {
void setHasPrimaryContext(bool (*func)(c10::DeviceIndex));
}  // namespace c10::cuda::_internal

namespace device_bench {

namespace {

namespace cca = c10::cuda::CUDACachingAllocator;

// What torch's own lazy CUDA initialization (at::cuda) does before the
// allocator is used, minus what the bench does not need (streams, RNG).
void init_torch_once() {
  static std::once_flag once;
  std::call_once(once, [] {
    // The bench uses device 0 only, whose context the null GPU always has.
    c10::cuda::_internal::setHasPrimaryContext([](c10::DeviceIndex) { return true; });
    const int devices = c10::cuda::device_count();
    // Expandable segments ask whether the device has fabric access, which
    // reads this cache.
    c10::cuda::detail::init_p2p_access_cache(devices);
    cca::init(devices);
  });
}

class TorchPeer final : public Peer {
 public:
  explicit TorchPeer(bool expandable) {
    init_torch_once();
    // Read when a segment is created, so switching between peers works on
    // an empty cache.
    c10::CachingAllocator::setAllocatorSettings(expandable ? "expandable_segments:True"
                                                           : "expandable_segments:False");
    cca::emptyCache();
    cca::resetPeakStats(0);
    cca::resetAccumulatedStats(0);
    counters_ = NullGpuCounters{};
  }
  ~TorchPeer() override { cca::emptyCache(); }
  void* allocate(uint64_t bytes) override { return cca::raw_alloc(bytes); }
  void deallocate(void* ptr, uint64_t) override { cca::raw_delete(ptr); }
  uint64_t reserved() const override {
    const auto stats = cca::getDeviceStats(0);
    return static_cast<uint64_t>(stats.reserved_bytes[static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE)].current);
  }
  uint64_t backend_calls() const override { return counters_.memory_calls(); }

 private:
  NullGpuCounters counters_;
};

}  // namespace

std::unique_ptr<Peer> make_torch_peer(bool expandable) { return std::make_unique<TorchPeer>(expandable); }

std::string torch_substrate(bool expandable) {
  return std::string("CUDACachingAllocator of torch ") + TORCH_VERSION + (expandable ? ", expandable_segments:True" : "");
}

}  // namespace device_bench
