// bench/device: without the null GPU (no CUDA toolkit, or tests not
// configured) every peer runs on the sim backend: unipool's two, and
// "cudamalloc" as one sim allocation per request. No CUB, no torch.
#include <memory>

#include "peers.hpp"
#include "unipool/device_sim_backend.hpp"
#include "unipool_peer.hpp"

namespace device_bench {

namespace {

std::shared_ptr<unipool::SimBackend> fresh_sim() {
  unipool::SimBackendOptions o;
  o.capacity = uint64_t{80} << 30;
  return std::make_shared<unipool::SimBackend>(o);
}

std::unique_ptr<Peer> make_unipool_on_sim(bool expandable) {
  std::shared_ptr<unipool::SimBackend> sim = fresh_sim();
  return make_unipool_peer(sim, expandable, [s = sim.get()] { return s->memory_calls(); });
}

class SimMallocPeer final : public Peer {
 public:
  SimMallocPeer() : sim_(fresh_sim()) {}
  void* allocate(uint64_t bytes) override {
    void* p = nullptr;
    sim_->allocate(0, bytes, &p);
    return p;
  }
  void deallocate(void* ptr, uint64_t bytes) override { sim_->deallocate(0, ptr, bytes); }
  uint64_t reserved() const override { return sim_->used_bytes(0); }
  uint64_t backend_calls() const override { return sim_->memory_calls(); }

 private:
  std::shared_ptr<unipool::SimBackend> sim_;
};

}  // namespace

std::vector<PeerInfo> all_peers() {
  const std::string sim = "sim backend (80 GiB)";
  return {{"unipool", [] { return make_unipool_on_sim(false); }, sim},
          {"unipool:expandable", [] { return make_unipool_on_sim(true); }, sim},
          {"cudamalloc", [] { return std::unique_ptr<Peer>(std::make_unique<SimMallocPeer>()); }, sim}};
}

const char* baseline_substrate() { return "sim backend"; }

std::string missing_peers() {
  return "cub, torch and torch:expandable skipped: this build has no null GPU (CUDA toolkit and tests needed)";
}

}  // namespace device_bench
