// unipool C ABI: a C fence (unipool_fence_t) as a FenceSource, for the
// pools' free_after calls. One per deferral: it deletes itself once the pool
// releases the fence.
#pragma once

#include "unipool/c/common.h"
#include "unipool/fence.hpp"

namespace unipool::capi {

class CFence final : public FenceSource {
 public:
  explicit CFence(const unipool_fence_t& f) : f_(f) {}
  FenceId record(int, StreamHandle) override { return kNoFence; }
  bool completed(FenceId fence) override { return f_.completed(f_.context, fence) != 0; }
  void wait(FenceId fence) override {
    while (!completed(fence)) {
    }
  }
  void release(FenceId fence) override {
    if (f_.release) f_.release(f_.context, fence);
    delete this;
  }

 private:
  unipool_fence_t f_;
};

}  // namespace unipool::capi
