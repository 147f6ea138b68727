// bench/device: unipool's DevicePool on the simulated device (80 GiB).
#include <memory>

#include "peers.hpp"
#include "unipool/device_pool.hpp"
#include "unipool/device_sim_backend.hpp"

namespace device_bench {

namespace {

class UnipoolPeer final : public Peer {
 public:
  explicit UnipoolPeer(bool expandable) {
    unipool::SimBackendOptions o;
    o.capacity = uint64_t{80} << 30;
    sim_ = std::make_shared<unipool::SimBackend>(o);
    unipool::DevicePoolConfig c;
    c.expandable_segments = expandable ? 1 : 0;
    pool_ = std::make_unique<unipool::DevicePool>(sim_, 0, c);
  }
  void* allocate(uint64_t bytes) override { return pool_->allocate(bytes, 0); }
  void deallocate(void* ptr, uint64_t) override { pool_->deallocate(ptr); }
  uint64_t reserved() const override {
    return static_cast<uint64_t>(pool_->stats().reserved_bytes[0].current);
  }
  uint64_t backend_calls() const override { return sim_->memory_calls(); }

 private:
  std::shared_ptr<unipool::SimBackend> sim_;
  std::unique_ptr<unipool::DevicePool> pool_;
};

}  // namespace

std::unique_ptr<Peer> make_unipool() { return std::make_unique<UnipoolPeer>(false); }
std::unique_ptr<Peer> make_unipool_expandable() { return std::make_unique<UnipoolPeer>(true); }

}  // namespace device_bench
