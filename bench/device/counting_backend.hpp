// bench/device: a DeviceBackend that forwards to another and counts the
// pool's memory calls into it (allocate, deallocate, reserve, map, unmap,
// unreserve). the pool's backend-call targets are stated in these units,
// pool to backend, whatever the backend turns each call into: on cuda_vmm
// one map of k granules is 2k driver calls, which the null GPU counts.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>

#include "unipool/device_backend.hpp"

namespace device_bench {

class CountingBackend final : public unipool::DeviceBackend {
 public:
  explicit CountingBackend(std::shared_ptr<unipool::DeviceBackend> inner) : inner_(std::move(inner)) {}

  uint64_t memory_calls() const { return calls_.load(std::memory_order_relaxed); }

  const char* name() const noexcept override { return inner_->name(); }
  int device_count() override { return inner_->device_count(); }
  unipool::BackendStatus memory_info(int device, uint64_t* free_bytes, uint64_t* total_bytes) override {
    return inner_->memory_info(device, free_bytes, total_bytes);
  }
  unipool::BackendStatus allocate(int device, uint64_t bytes, void** out) override {
    count();
    return inner_->allocate(device, bytes, out);
  }
  unipool::BackendStatus deallocate(int device, void* ptr, uint64_t bytes) override {
    count();
    return inner_->deallocate(device, ptr, bytes);
  }
  bool supports_expandable() const noexcept override { return inner_->supports_expandable(); }
  uint64_t granularity(int device) override { return inner_->granularity(device); }
  unipool::BackendStatus reserve(int device, uint64_t bytes, void** base) override {
    count();
    return inner_->reserve(device, bytes, base);
  }
  unipool::BackendStatus map(int device, void* base, uint64_t offset, uint64_t bytes) override {
    count();
    return inner_->map(device, base, offset, bytes);
  }
  unipool::BackendStatus unmap(int device, void* base, uint64_t offset, uint64_t bytes) override {
    count();
    return inner_->unmap(device, base, offset, bytes);
  }
  unipool::BackendStatus unreserve(int device, void* base, uint64_t bytes) override {
    count();
    return inner_->unreserve(device, base, bytes);
  }
  unipool::FenceSource& fences() override { return inner_->fences(); }

 private:
  void count() { calls_.fetch_add(1, std::memory_order_relaxed); }

  std::shared_ptr<unipool::DeviceBackend> inner_;
  std::atomic<uint64_t> calls_{0};
};

}  // namespace device_bench
