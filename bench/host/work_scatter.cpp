// rpmalloc's random benchmark: scattered frees and scattered refills.
#include <numeric>
#include <vector>

#include "work_patterns.hpp"

namespace host_bench {
namespace {

class ScatterWork final : public ThreadWork {
 public:
  ScatterWork(const ScatterParams& p, uint64_t seed)
      : p_(p), rng_(seed), sizes_(p.sizes, seed + 1), blocks_(p.slots, nullptr), lengths_(p.slots, 0) {}

  void run(Meter& meter) override {
    for (uint32_t loop = 0; loop < p_.loops; ++loop) {
      uint32_t slot = rng_.below(p_.slots);
      const uint32_t stride = coprime_stride();
      for (uint32_t k = 0; k < p_.ops; ++k, slot = advance(slot, stride)) {
        if (blocks_[slot] != nullptr) {
          meter.release(blocks_[slot], lengths_[slot]);
          blocks_[slot] = nullptr;
        }
      }
      slot = rng_.below(p_.slots);
      for (uint32_t k = 0; k < p_.ops; ++k, slot = advance(slot, stride)) {
        if (blocks_[slot] != nullptr) meter.release(blocks_[slot], lengths_[slot]);
        lengths_[slot] = static_cast<uint32_t>(sizes_.next());
        blocks_[slot] = meter.alloc(lengths_[slot]);
      }
    }
    for (uint32_t i = 0; i < p_.slots; ++i) {
      if (blocks_[i] != nullptr) meter.release(blocks_[i], lengths_[i]);
    }
  }

 private:
  // A stride coprime with the table size visits `ops` distinct slots.
  uint32_t coprime_stride() {
    for (;;) {
      const uint32_t s = p_.slots / 3 + rng_.below(p_.slots / 3) + 1;
      if (std::gcd(s, p_.slots) == 1) return s;
    }
  }
  uint32_t advance(uint32_t slot, uint32_t stride) const {
    const uint32_t next = slot + stride;
    return next >= p_.slots ? next - p_.slots : next;
  }

  ScatterParams p_;
  Rng rng_;
  SizeRing sizes_;
  std::vector<void*> blocks_;
  std::vector<uint32_t> lengths_;
};

}  // namespace

std::unique_ptr<ThreadWork> make_scatter_work(const ScatterParams& p, uint64_t seed) {
  if (p.ops > p.slots) die("scatter: more ops than slots");
  return std::make_unique<ScatterWork>(p, seed);
}

}  // namespace host_bench
