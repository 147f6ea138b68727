// Random replacement in a table of live blocks (rl_small, rl_medium,
// fragmentation_mix, alignment64).
#include <vector>

#include "work_patterns.hpp"

namespace host_bench {
namespace {

class ReplaceWork final : public ThreadWork {
 public:
  ReplaceWork(const ReplaceParams& p, uint64_t seed)
      : p_(p), rng_(seed), sizes_(p.sizes, seed + 1), blocks_(p.slots, nullptr), lengths_(p.slots, 0) {}

  void run(Meter& meter) override {
    for (uint32_t i = 0; i < p_.slots; ++i) fill(meter, i);
    if (p_.batch <= 1) {
      for (uint64_t s = 0; s < p_.steps; ++s) {
        const uint32_t i = rng_.below(p_.slots);
        meter.release(blocks_[i], lengths_[i]);
        fill(meter, i);
      }
    } else {
      // An odd stride over a power-of-two table visits `batch` distinct slots.
      for (uint64_t s = 0; s < p_.steps; ++s) {
        const uint32_t start = rng_.below(p_.slots);
        const uint32_t stride = rng_.below(p_.slots) | 1u;
        const uint32_t mask = p_.slots - 1;
        for (uint32_t k = 0; k < p_.batch; ++k) {
          const uint32_t i = (start + k * stride) & mask;
          meter.release(blocks_[i], lengths_[i]);
        }
        for (uint32_t k = 0; k < p_.batch; ++k) fill(meter, (start + k * stride) & mask);
      }
    }
    for (uint32_t i = 0; i < p_.slots; ++i) meter.release(blocks_[i], lengths_[i]);
  }

 private:
  void fill(Meter& meter, uint32_t i) {
    const uint64_t n = sizes_.next();
    blocks_[i] = p_.alignment ? meter.alloc_aligned(p_.alignment, n) : meter.alloc(n);
    lengths_[i] = static_cast<uint32_t>(n);
  }

  ReplaceParams p_;
  Rng rng_;
  SizeRing sizes_;
  std::vector<void*> blocks_;
  std::vector<uint32_t> lengths_;
};

}  // namespace

std::unique_ptr<ThreadWork> make_replace_work(const ReplaceParams& p, uint64_t seed) {
  if (p.batch > 1 && (p.slots & (p.slots - 1)) != 0) die("batched replacement needs a power-of-two table");
  return std::make_unique<ReplaceWork>(p, seed);
}

}  // namespace host_bench
