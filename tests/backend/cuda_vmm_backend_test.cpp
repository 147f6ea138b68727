// The "cuda_vmm" backend: expandable segments on the driver's VMM API,
// reached through cudaGetDriverEntryPointByVersion.
#include <cuda.h>

#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "backend/cuda/cuda_backends.hpp"
#include "nullgpu_fixture.hpp"
#include "support/test_scale.hpp"

namespace unipool::test {
namespace {

using backend::make_cuda_backend;

constexpr uint64_t kGranule = 2 * gpu::kMiB;

class CudaVmm : public NullGpuTest {
 protected:
  gpu::Config config() const override {
    gpu::Config c;
    c.device_count = 2;
    c.capacity = 32 * gpu::kMiB;
    return c;
  }
  void SetUp() override {
    NullGpuTest::SetUp();
    backend = make_cuda_backend("cuda_vmm");
  }
  void TearDown() override {
    backend.reset();
    NullGpuTest::TearDown();
  }
  // A fresh backend on a differently configured null GPU.
  void restart(const gpu::Config& c) {
    backend.reset();
    gpu::reset(c);
    backend = make_cuda_backend("cuda_vmm");
  }

  std::unique_ptr<DeviceBackend> backend;
};

TEST_F(CudaVmm, SupportsExpandableSegmentsWithTwoMiBGranules) {
  EXPECT_TRUE(backend->supports_expandable());
  EXPECT_EQ(backend->granularity(0), kGranule);
  EXPECT_EQ(backend->granularity(1), kGranule);
  EXPECT_EQ(backend->granularity(2), 0u);  // no such device
  EXPECT_EQ(gpu::calls("cuMemGetAllocationGranularity"), 4u);  // min + recommended, once per device
  (void)backend->granularity(0);
  EXPECT_EQ(gpu::calls("cuMemGetAllocationGranularity"), 4u);  // cached
}

TEST_F(CudaVmm, GranularityIsAtLeastTwoMiBAndAMultipleOfTheDrivers) {
  gpu::Config small = config();
  small.granularity = 64 * 1024;
  restart(small);
  EXPECT_EQ(backend->granularity(0), kGranule);
  gpu::Config large = config();
  large.granularity = 8 * gpu::kMiB;
  restart(large);
  EXPECT_EQ(backend->granularity(0), 8 * gpu::kMiB);
}

TEST_F(CudaVmm, MappedMemoryIsWritableAndUnmappedMemoryIsNot) {
  void* base = nullptr;
  ASSERT_TRUE(backend->reserve(0, 8 * kGranule, &base).is_ok());
  auto* bytes = static_cast<char*>(base);
  EXPECT_EQ(gpu::reserved_bytes(), 8 * kGranule);
  EXPECT_EQ(gpu::live_bytes(0), 0u);  // address space is free
  EXPECT_FALSE(writable(bytes));

  ASSERT_TRUE(backend->map(0, base, 0, 3 * kGranule).is_ok());
  EXPECT_EQ(gpu::mapped_bytes(0), 3 * kGranule);
  EXPECT_EQ(gpu::live_bytes(0), 3 * kGranule);
  EXPECT_EQ(gpu::calls("cuMemCreate"), 3u);  // one handle per granule
  std::memset(bytes, 0x5a, 3 * kGranule);
  EXPECT_EQ(bytes[3 * kGranule - 1], 0x5a);
  EXPECT_FALSE(writable(bytes + 3 * kGranule));

  // Grow, then give back a middle granule.
  ASSERT_TRUE(backend->map(0, base, 3 * kGranule, kGranule).is_ok());
  ASSERT_TRUE(backend->unmap(0, base, kGranule, kGranule).is_ok());
  EXPECT_TRUE(writable(bytes));
  EXPECT_FALSE(writable(bytes + kGranule));
  EXPECT_FALSE(readable(bytes + 2 * kGranule - 1));
  EXPECT_TRUE(writable(bytes + 2 * kGranule));
  EXPECT_EQ(gpu::mapped_bytes(0), 3 * kGranule);
  EXPECT_EQ(gpu::live_bytes(0), 3 * kGranule);

  ASSERT_TRUE(backend->unmap(0, base, 0, kGranule).is_ok());
  ASSERT_TRUE(backend->unmap(0, base, 2 * kGranule, 2 * kGranule).is_ok());
  EXPECT_EQ(gpu::mapped_bytes(0), 0u);
  EXPECT_EQ(gpu::live_bytes(0), 0u);
  EXPECT_FALSE(readable(bytes + 3 * kGranule));
  ASSERT_TRUE(backend->unreserve(0, base, 8 * kGranule).is_ok());
  EXPECT_EQ(gpu::reserved_bytes(), 0u);
}

TEST_F(CudaVmm, WriteAfterUnmapFaults) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  void* base = nullptr;
  ASSERT_TRUE(backend->reserve(0, 2 * kGranule, &base).is_ok());
  ASSERT_TRUE(backend->map(0, base, 0, kGranule).is_ok());
  auto* volatile bytes = static_cast<char*>(base);
  bytes[0] = 1;
  ASSERT_TRUE(backend->unmap(0, base, 0, kGranule).is_ok());
  EXPECT_DEATH(bytes[100] = 1, "");
  ASSERT_TRUE(backend->unreserve(0, base, 2 * kGranule).is_ok());
}

TEST_F(CudaVmm, WorksOnTheNamedDeviceAndRestoresTheCallers) {
  void* base = nullptr;
  ASSERT_TRUE(backend->reserve(1, 4 * kGranule, &base).is_ok());
  ASSERT_TRUE(backend->map(1, base, 0, 2 * kGranule).is_ok());
  EXPECT_EQ(gpu::mapped_bytes(1), 2 * kGranule);
  EXPECT_EQ(gpu::mapped_bytes(0), 0u);
  EXPECT_EQ(gpu::current_device(), 0);
  // The range is device 1's: device 0 may not touch it.
  EXPECT_EQ(backend->map(0, base, 2 * kGranule, kGranule).code, BackendStatus::error);
  ASSERT_TRUE(backend->unmap(1, base, 0, 2 * kGranule).is_ok());
  ASSERT_TRUE(backend->unreserve(1, base, 4 * kGranule).is_ok());
  EXPECT_EQ(gpu::current_device(), 0);
}

TEST_F(CudaVmm, PlainSegmentsAreReservationsMappedWhole) {
  void* p = nullptr;
  ASSERT_TRUE(backend->allocate(0, 3 * gpu::kMiB, &p).is_ok());
  EXPECT_EQ(gpu::live_bytes(0), 2 * kGranule);  // rounded up to granules
  std::memset(p, 1, 3 * gpu::kMiB);
  EXPECT_EQ(backend->map(0, p, 0, kGranule).code, BackendStatus::error);  // not an expandable range
  EXPECT_EQ(backend->deallocate(0, p, 5 * gpu::kMiB).code, BackendStatus::error);  // wrong size
  ASSERT_TRUE(backend->deallocate(0, p, 3 * gpu::kMiB).is_ok());
  EXPECT_EQ(gpu::live_bytes(0), 0u);
  EXPECT_EQ(gpu::reserved_bytes(), 0u);
}

TEST_F(CudaVmm, MapIsAllOrNothing) {
  void* base = nullptr;
  ASSERT_TRUE(backend->reserve(0, 8 * kGranule, &base).is_ok());
  gpu::fail_nth_call("cuMemCreate", 3, CUDA_ERROR_OUT_OF_MEMORY);
  const BackendStatus failed = backend->map(0, base, 0, 4 * kGranule);
  EXPECT_EQ(failed.code, BackendStatus::out_of_memory);
  EXPECT_EQ(failed.native, CUDA_ERROR_OUT_OF_MEMORY);
  EXPECT_STREQ(failed.message, "out of memory");
  EXPECT_EQ(gpu::mapped_bytes(0), 0u);
  EXPECT_EQ(gpu::live_bytes(0), 0u);

  gpu::fail_nth_call("cuMemSetAccess", 1);
  EXPECT_EQ(backend->map(0, base, 0, 4 * kGranule).code, BackendStatus::error);
  EXPECT_EQ(gpu::mapped_bytes(0), 0u);
  // And the range is whole again afterwards.
  ASSERT_TRUE(backend->map(0, base, 0, 4 * kGranule).is_ok());
  ASSERT_TRUE(backend->unmap(0, base, 0, 4 * kGranule).is_ok());
  ASSERT_TRUE(backend->unreserve(0, base, 8 * kGranule).is_ok());
}

TEST_F(CudaVmm, DeviceCapacityIsOutOfMemory) {
  void* base = nullptr;
  ASSERT_TRUE(backend->reserve(0, 32 * kGranule, &base).is_ok());  // twice the device: fine, it is address space
  ASSERT_TRUE(backend->map(0, base, 0, 16 * kGranule).is_ok());    // the whole device
  EXPECT_EQ(backend->map(0, base, 16 * kGranule, kGranule).code, BackendStatus::out_of_memory);
  EXPECT_EQ(gpu::mapped_bytes(0), 16 * kGranule);
  ASSERT_TRUE(backend->unmap(0, base, 0, 16 * kGranule).is_ok());
  ASSERT_TRUE(backend->unreserve(0, base, 32 * kGranule).is_ok());
}

TEST_F(CudaVmm, MisuseIsAClearErrorAndChangesNothing) {
  void* base = nullptr;
  EXPECT_EQ(backend->reserve(0, kGranule + 1, &base).code, BackendStatus::error);
  EXPECT_EQ(backend->reserve(0, 0, &base).code, BackendStatus::error);
  ASSERT_TRUE(backend->reserve(0, 4 * kGranule, &base).is_ok());
  ASSERT_TRUE(backend->map(0, base, 0, kGranule).is_ok());
  EXPECT_EQ(backend->map(0, base, 0, 2 * kGranule).code, BackendStatus::error);  // overlaps
  EXPECT_EQ(backend->map(0, base, 3 * kGranule, 2 * kGranule).code, BackendStatus::error);  // past the end
  EXPECT_EQ(backend->map(0, base, 4096, kGranule).code, BackendStatus::error);  // misaligned
  EXPECT_EQ(backend->unmap(0, base, 0, 2 * kGranule).code, BackendStatus::error);  // partly unmapped
  EXPECT_EQ(backend->unreserve(0, base, 4 * kGranule).code, BackendStatus::error);  // still mapped
  EXPECT_EQ(backend->unreserve(0, base, 2 * kGranule).code, BackendStatus::error);  // wrong size
  char other = 0;
  const BackendStatus foreign = backend->map(0, &other, 0, kGranule);
  EXPECT_EQ(foreign.code, BackendStatus::error);
  EXPECT_NE(std::string(foreign.message).find("not the base"), std::string::npos);
  EXPECT_EQ(backend->deallocate(0, base, 4 * kGranule).code, BackendStatus::error);  // not plain
  EXPECT_EQ(gpu::mapped_bytes(0), kGranule);
  ASSERT_TRUE(backend->unmap(0, base, 0, kGranule).is_ok());
  ASSERT_TRUE(backend->unreserve(0, base, 4 * kGranule).is_ok());
  EXPECT_EQ(cudaPeekAtLastError(), cudaSuccess);
}

TEST_F(CudaVmm, FailedReleaseIsRetriedNotLost) {
  void* base = nullptr;
  ASSERT_TRUE(backend->reserve(0, 2 * kGranule, &base).is_ok());
  ASSERT_TRUE(backend->map(0, base, 0, kGranule).is_ok());
  gpu::fail_nth_call("cuMemRelease", 1);
  ASSERT_TRUE(backend->unmap(0, base, 0, kGranule).is_ok());  // unmapped: the caller's view is right
  EXPECT_EQ(gpu::physical_handles(), 1u);
  ASSERT_TRUE(backend->unreserve(0, base, 2 * kGranule).is_ok());  // retries the release first
  EXPECT_EQ(gpu::physical_handles(), 0u);
  EXPECT_EQ(gpu::live_bytes(0), 0u);
}

TEST_F(CudaVmm, DestructionReturnsWhatThePoolLeft) {
  void* base = nullptr;
  void* plain = nullptr;
  ASSERT_TRUE(backend->reserve(1, 4 * kGranule, &base).is_ok());
  ASSERT_TRUE(backend->map(1, base, kGranule, 2 * kGranule).is_ok());
  ASSERT_TRUE(backend->allocate(0, kGranule, &plain).is_ok());
  backend.reset();
  EXPECT_TRUE(gpu::leaks().clean()) << gpu::leaks().describe();
  EXPECT_EQ(gpu::current_device(), 0);
}

TEST_F(CudaVmm, ThreadsGrowAndShrinkTheirOwnSegments) {
  const uint64_t rounds = scaled(100, 5);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      const int device = t % 2;
      void* base = nullptr;
      ASSERT_TRUE(backend->reserve(device, 4 * kGranule, &base).is_ok());
      for (uint64_t i = 0; i < rounds; ++i) {
        const uint64_t at = (i % 3) * kGranule;
        ASSERT_TRUE(backend->map(device, base, at, kGranule).is_ok());
        static_cast<char*>(base)[at] = static_cast<char>(t);
        void* plain = nullptr;
        ASSERT_TRUE(backend->allocate(device, gpu::kMiB, &plain).is_ok());
        ASSERT_TRUE(backend->deallocate(device, plain, gpu::kMiB).is_ok());
        ASSERT_TRUE(backend->unmap(device, base, at, kGranule).is_ok());
      }
      ASSERT_TRUE(backend->unreserve(device, base, 4 * kGranule).is_ok());
      EXPECT_EQ(gpu::current_device(), 0);
    });
  }
  for (auto& thread : threads) thread.join();
  EXPECT_EQ(gpu::live_bytes(0) + gpu::live_bytes(1), 0u);
  EXPECT_EQ(gpu::reserved_bytes(), 0u);
}

TEST_F(CudaVmm, WithoutTheDriverApiItSaysSo) {
  gpu::Config hidden = config();
  hidden.hidden_driver_symbols = {"cuMemCreate"};
  restart(hidden);
  EXPECT_FALSE(backend->supports_expandable());
  EXPECT_EQ(backend->granularity(0), kGranule);  // DeviceBackend's default
  void* base = nullptr;
  const BackendStatus status = backend->reserve(0, kGranule, &base);
  EXPECT_EQ(status.code, BackendStatus::error);
  EXPECT_NE(std::string(status.message).find("driver does not provide cuMemCreate"), std::string::npos)
      << status.message;
  EXPECT_EQ(backend->map(0, base, 0, kGranule).code, BackendStatus::error);
  EXPECT_EQ(gpu::calls("cuMemAddressReserve"), 0u);
  // Plain segments still work, from cudaMalloc.
  void* p = nullptr;
  ASSERT_TRUE(backend->allocate(0, 3 * gpu::kMiB, &p).is_ok());
  EXPECT_EQ(gpu::live_bytes(0), 3 * gpu::kMiB);
  ASSERT_TRUE(backend->deallocate(0, p, 3 * gpu::kMiB).is_ok());
  EXPECT_EQ(gpu::calls("cudaMalloc"), 1u);
  EXPECT_EQ(gpu::calls("cudaFree"), 1u);

  gpu::Config no_driver = config();
  no_driver.driver_present = false;
  restart(no_driver);
  EXPECT_FALSE(backend->supports_expandable());
  EXPECT_EQ(backend->device_count(), 0);
  const BackendStatus missing = backend->reserve(0, kGranule, &base);
  EXPECT_NE(std::string(missing.message).find("CUDA driver API unavailable"), std::string::npos) << missing.message;
  EXPECT_EQ(backend->allocate(0, kGranule, &base).native, cudaErrorInsufficientDriver);
}

TEST_F(CudaVmm, DevicesWithoutVmmAreNotExpandable) {
  gpu::Config old = config();
  old.vmm_supported = false;
  restart(old);
  EXPECT_FALSE(backend->supports_expandable());
  void* base = nullptr;
  const BackendStatus status = backend->reserve(0, kGranule, &base);
  EXPECT_NE(std::string(status.message).find("does not support virtual memory management"), std::string::npos);
  // The pool falls back to plain segments: cudaMalloc blocks.
  void* p = nullptr;
  ASSERT_TRUE(backend->allocate(1, gpu::kMiB, &p).is_ok());
  EXPECT_EQ(gpu::live_bytes(1), gpu::kMiB);
  EXPECT_EQ(gpu::current_device(), 0);
  ASSERT_TRUE(backend->deallocate(1, p, gpu::kMiB).is_ok());
  EXPECT_EQ(gpu::live_bytes(1), 0u);
}

}  // namespace
}  // namespace unipool::test
