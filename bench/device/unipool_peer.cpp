// bench/device: unipool's DevicePool as a peer (80 GiB device).
#include "unipool_peer.hpp"

#include <utility>

#include "counting_backend.hpp"
#include "unipool/device_pool.hpp"

namespace device_bench {

namespace {

class UnipoolPeer final : public Peer {
 public:
  UnipoolPeer(std::shared_ptr<unipool::DeviceBackend> backend, bool expandable, std::function<uint64_t()> calls)
      : calls_(std::move(calls)), counting_(std::make_shared<CountingBackend>(std::move(backend))) {
    unipool::DevicePoolConfig c;
    c.expandable_segments = expandable ? 1 : 0;
    pool_ = std::make_unique<unipool::DevicePool>(counting_, 0, c);
  }
  void* allocate(uint64_t bytes) override { return pool_->allocate(bytes, 0); }
  void deallocate(void* ptr, uint64_t) override { pool_->deallocate(ptr); }
  uint64_t reserved() const override {
    return static_cast<uint64_t>(pool_->stats().reserved_bytes[0].current);
  }
  uint64_t backend_calls() const override { return calls_(); }
  uint64_t pool_calls() const override { return counting_->memory_calls(); }

 private:
  std::function<uint64_t()> calls_;  // not on the timed path
  std::shared_ptr<CountingBackend> counting_;
  std::unique_ptr<unipool::DevicePool> pool_;
};

}  // namespace

std::unique_ptr<Peer> make_unipool_peer(std::shared_ptr<unipool::DeviceBackend> backend, bool expandable,
                                        std::function<uint64_t()> backend_calls) {
  return std::make_unique<UnipoolPeer>(std::move(backend), expandable, std::move(backend_calls));
}

}  // namespace device_bench
