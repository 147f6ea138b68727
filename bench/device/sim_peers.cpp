// bench/device: without the null GPU (tests not configured) there is
// no CUB peer; "cudamalloc" is then one sim backend allocation per request.
#include <memory>
#include <unordered_map>

#include "peers.hpp"
#include "unipool/device_sim_backend.hpp"

namespace device_bench {

namespace {

class SimMallocPeer final : public Peer {
 public:
  SimMallocPeer() {
    unipool::SimBackendOptions o;
    o.capacity = uint64_t{80} << 30;
    sim_ = std::make_unique<unipool::SimBackend>(o);
  }
  void* allocate(uint64_t bytes) override {
    void* p = nullptr;
    sim_->allocate(0, bytes, &p);
    return p;
  }
  void deallocate(void* ptr, uint64_t bytes) override { sim_->deallocate(0, ptr, bytes); }
  uint64_t reserved() const override { return sim_->used_bytes(0); }
  uint64_t backend_calls() const override { return sim_->memory_calls(); }

 private:
  std::unique_ptr<unipool::SimBackend> sim_;
};

}  // namespace

std::unique_ptr<Peer> make_unipool();
std::unique_ptr<Peer> make_unipool_expandable();

std::vector<PeerInfo> all_peers() {
  return {{"unipool", make_unipool},
          {"unipool:expandable", make_unipool_expandable},
          {"cudamalloc", [] { return std::unique_ptr<Peer>(std::make_unique<SimMallocPeer>()); }}};
}

const char* baseline_substrate() { return "sim backend"; }

}  // namespace device_bench
