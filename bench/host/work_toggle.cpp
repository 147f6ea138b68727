// mid_mt's mid-range loop: free a full slot, fill an empty one.
#include <vector>

#include "work_patterns.hpp"

namespace host_bench {
namespace {

class ToggleWork final : public ThreadWork {
 public:
  ToggleWork(const ToggleParams& p, uint64_t seed)
      : p_(p), rng_(seed), sizes_(p.sizes, seed + 1), blocks_(p.slots, nullptr), lengths_(p.slots, 0) {}

  void run(Meter& meter) override {
    for (uint64_t c = 0; c < p_.cycles; ++c) {
      const uint32_t i = rng_.below(p_.slots);
      if (blocks_[i] != nullptr) {
        meter.release(blocks_[i], lengths_[i]);
        blocks_[i] = nullptr;
      } else {
        lengths_[i] = static_cast<uint32_t>(sizes_.next());
        blocks_[i] = meter.alloc(lengths_[i]);
      }
    }
    for (uint32_t i = 0; i < p_.slots; ++i) {
      if (blocks_[i] != nullptr) meter.release(blocks_[i], lengths_[i]);
    }
  }

 private:
  ToggleParams p_;
  Rng rng_;
  SizeRing sizes_;
  std::vector<void*> blocks_;
  std::vector<uint32_t> lengths_;
};

}  // namespace

std::unique_ptr<ThreadWork> make_toggle_work(const ToggleParams& p, uint64_t seed) {
  return std::make_unique<ToggleWork>(p, seed);
}

}  // namespace host_bench
