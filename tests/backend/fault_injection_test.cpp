// Every CUDA, driver and NCCL call the backends make, failed in turn: each
// failure must come back as a clean error, leave no memory, handle, event
// or registration behind, leave no CUDA error pending, and leave the
// caller's device current.
#include <cuda.h>
#include <nccl.h>

#include <algorithm>
#include <cstring>
#include <set>
#include <string>
#include <vector>

#include "backend/cuda/cuda_backends.hpp"
#include "backend/host_pinner.hpp"
#include "nullgpu_fixture.hpp"

namespace unipool::test {
namespace {

using backend::make_cuda_backend;

constexpr int kDevice = 1;  // not the caller's: every call goes through a device guard

gpu::Config two_devices() {
  gpu::Config c;
  c.device_count = 2;
  c.capacity = 64 * gpu::kMiB;
  return c;
}

// A fixed workload touching every backend call; failures are collected.
// Acquisitions that fail are abandoned; releases that fail are retried once,
// as a pool would (an injected fault fires once).
class Scenario {
 public:
  std::vector<BackendStatus> failures;

  void run() {
    pin_and_unpin();
    for (const char* name : {"cuda_malloc", "nccl", "cuda_vmm"}) plain_segment_and_fence(name);
    expandable_segment();
  }

 private:
  // Touches the first and last byte of every 1 MiB of [p, p + bytes): the
  // memory must be there, and a full memset is slow under TSan.
  static void touch(void* p, uint64_t bytes) {
    auto* c = static_cast<volatile char*>(p);
    for (uint64_t at = 0; at < bytes; at += gpu::kMiB) {
      c[at] = 1;
      c[std::min(at + gpu::kMiB, bytes) - 1] = 1;
    }
  }

  bool ok(const BackendStatus& status) {
    if (!status.is_ok()) failures.push_back(status);
    return status.is_ok();
  }
  template <class Release>
  void release(Release&& call) {
    if (!ok(call())) (void)ok(call());
  }

  void pin_and_unpin() {
    std::vector<char> host(64 * 1024);
    const auto pinner = backend::make_default_host_pinner();
    (void)pinner->available();
    if (ok(pinner->pin(host.data(), host.size()))) release([&] { return pinner->unpin(host.data()); });
  }

  void plain_segment_and_fence(const char* name) {
    const auto b = make_cuda_backend(name);
    (void)b->device_count();
    uint64_t free_bytes = 0, total = 0;
    (void)ok(b->memory_info(kDevice, &free_bytes, &total));
    void* p = nullptr;
    if (ok(b->allocate(kDevice, 3 * gpu::kMiB, &p))) {
      touch(p, 3 * gpu::kMiB);
      release([&] { return b->deallocate(kDevice, p, 3 * gpu::kMiB); });
    }
    FenceSource& fences = b->fences();
    const FenceId fence = fences.record(kDevice, 0);
    if (fence != kNoFence) {
      (void)fences.completed(fence);
      gpu::complete_stream(0);
      (void)fences.completed(fence);
      fences.release(fence);
    }
  }

  void expandable_segment() {
    const auto vmm = make_cuda_backend("cuda_vmm");
    if (!vmm->supports_expandable()) return;
    const uint64_t g = vmm->granularity(kDevice);
    void* base = nullptr;
    if (g == 0 || !ok(vmm->reserve(kDevice, 4 * g, &base))) return;
    if (ok(vmm->map(kDevice, base, 0, 2 * g))) {
      touch(base, 2 * g);
      if (ok(vmm->map(kDevice, base, 2 * g, g))) release([&] { return vmm->unmap(kDevice, base, 2 * g, g); });
      release([&] { return vmm->unmap(kDevice, base, 0, 2 * g); });
    }
    release([&] { return vmm->unreserve(kDevice, base, 4 * g); });
  }
};

// Calls that acquire something: a fault there must reach the caller.
bool acquires(const std::string& function) {
  static const std::set<std::string> kAcquire = {"cudaMalloc",  "ncclMemAlloc",        "cuMemCreate", "cudaHostRegister",
                                                 "cuMemMap",    "cuMemAddressReserve", "cuMemSetAccess"};
  return kAcquire.count(function) != 0;
}

int expected_native(const std::string& function, int code) {
  if (code != gpu::kDefaultError) return code;
  if (function.rfind("nccl", 0) == 0) return ncclUnhandledCudaError;
  return function.rfind("cuda", 0) == 0 ? static_cast<int>(cudaErrorUnknown) : static_cast<int>(CUDA_ERROR_UNKNOWN);
}

class FaultInjection : public NullGpuTest, public ::testing::WithParamInterface<int> {
 protected:
  gpu::Config config() const override { return two_devices(); }
};

TEST_P(FaultInjection, EveryCallFailsCleanly) {
  const int code = GetParam();
  Scenario clean;
  clean.run();
  ASSERT_TRUE(clean.failures.empty()) << clean.failures.front().message;
  ASSERT_TRUE(gpu::leaks().clean()) << gpu::leaks().describe();
  const uint64_t calls = gpu::total_calls();
  ASSERT_GT(calls, 50u);

  std::set<std::string> failed_functions;
  for (uint64_t n = 1; n <= calls; ++n) {
    gpu::reset(two_devices());
    gpu::fail_nth_call("*", n, code);
    Scenario faulty;
    faulty.run();
    const std::string function = gpu::last_fault();
    SCOPED_TRACE("fault at call " + std::to_string(n) + ": " + function);
    ASSERT_EQ(gpu::faults_fired(), 1u);  // the scenario is deterministic
    failed_functions.insert(function);

    EXPECT_TRUE(gpu::leaks().clean()) << gpu::leaks().describe();
    EXPECT_EQ(cudaPeekAtLastError(), cudaSuccess);
    if (function != "cudaSetDevice") {
      EXPECT_EQ(gpu::current_device(), 0);
    }
    for (const BackendStatus& status : faulty.failures) {
      EXPECT_NE(status.code, BackendStatus::ok);
      EXPECT_GT(std::strlen(status.message), 0u);
    }
    if (acquires(function)) {
      const int native = expected_native(function, code);
      const bool surfaced = std::any_of(faulty.failures.begin(), faulty.failures.end(),
                                        [&](const BackendStatus& s) { return s.native == native; });
      EXPECT_TRUE(surfaced) << "the failure of " << function << " was not reported";
      if (code == cudaErrorMemoryAllocation) {
        EXPECT_EQ(faulty.failures.front().code, BackendStatus::out_of_memory);
      }
    }
  }
  // The loop reached every kind of call the backends make.
  for (const char* function : {"cudaMalloc", "cudaFree", "ncclMemAlloc", "ncclMemFree", "cuMemCreate", "cuMemMap",
                               "cuMemSetAccess", "cuMemUnmap", "cuMemRelease", "cuMemAddressReserve",
                               "cuMemAddressFree", "cudaEventCreateWithFlags", "cudaEventRecord", "cudaEventQuery",
                               "cudaHostRegister", "cudaHostUnregister", "cudaSetDevice", "cudaGetDevice",
                               "cudaGetDriverEntryPointByVersion"}) {
    EXPECT_EQ(failed_functions.count(function), 1u) << function;
  }
}

// The generic error of each library, and out of memory (2 is
// cudaErrorMemoryAllocation, CUDA_ERROR_OUT_OF_MEMORY and ncclSystemError).
INSTANTIATE_TEST_SUITE_P(Codes, FaultInjection, ::testing::Values(gpu::kDefaultError, 2),
                         [](const auto& info) { return info.param == gpu::kDefaultError ? "Generic" : "OutOfMemory"; });

}  // namespace
}  // namespace unipool::test
