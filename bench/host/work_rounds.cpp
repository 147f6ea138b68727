// hakmem's scenarios: allocate a batch, write it, free it all.
#include <algorithm>
#include <vector>

#include "work_patterns.hpp"

namespace host_bench {
namespace {

class RoundWork final : public ThreadWork {
 public:
  RoundWork(const RoundParams& p, uint64_t seed) : p_(p), rng_(seed) {
    uint32_t most = 0;
    for (uint32_t k = 0; k < p.kinds; ++k) {
      rings_.emplace_back(p.sizes[k], seed + 1 + k);
      most = std::max(most, p.blocks[k]);
    }
    blocks_.resize(most);
    lengths_.resize(most);
  }

  void run(Meter& meter) override {
    for (uint64_t r = 0; r < p_.rounds; ++r) {
      const uint32_t kind = p_.kinds == 1 ? 0 : rng_.below(p_.kinds);
      const uint32_t count = p_.blocks[kind];
      for (uint32_t i = 0; i < count; ++i) {
        lengths_[i] = rings_[kind].next();
        blocks_[i] = meter.alloc(lengths_[i]);
      }
      for (uint32_t i = 0; i < count; ++i) meter.release(blocks_[i], lengths_[i]);
    }
  }

 private:
  RoundParams p_;
  Rng rng_;
  std::vector<SizeRing> rings_;
  std::vector<void*> blocks_;
  std::vector<uint64_t> lengths_;
};

}  // namespace

std::unique_ptr<ThreadWork> make_round_work(const RoundParams& p, uint64_t seed) {
  return std::make_unique<RoundWork>(p, seed);
}

}  // namespace host_bench
