// The "cuda_malloc" backend, the factory and what all CUDA backends share
// (device count, memory info, device guards).
#include <cstring>

#include "backend/cuda/cuda_backends.hpp"
#include "nullgpu_fixture.hpp"

namespace unipool::test {
namespace {

using backend::make_cuda_backend;

class CudaMalloc : public NullGpuTest {
 protected:
  gpu::Config config() const override {
    gpu::Config c;
    c.device_count = 2;
    c.capacity = 64 * gpu::kMiB;
    return c;
  }
  std::unique_ptr<DeviceBackend> backend = make_cuda_backend("cuda_malloc");
};

TEST(CudaBackendFactory, KnowsItsNames) {
  nullgpu::reset();
  for (const char* name : {"cuda_malloc", "cuda_vmm", "nccl"}) {
    const auto backend = make_cuda_backend(name);
    ASSERT_NE(backend, nullptr) << name;
    EXPECT_STREQ(backend->name(), name);
  }
  EXPECT_EQ(make_cuda_backend("sim"), nullptr);  // not a CUDA backend
  EXPECT_EQ(make_cuda_backend("CUDA_MALLOC"), nullptr);
  EXPECT_EQ(make_cuda_backend(""), nullptr);
  EXPECT_TRUE(nullgpu::leaks().clean()) << nullgpu::leaks().describe();
}

TEST_F(CudaMalloc, AllocatesUsableMemoryAndFreesIt) {
  EXPECT_FALSE(backend->supports_expandable());
  void* p = nullptr;
  ASSERT_TRUE(backend->allocate(0, 3 * gpu::kMiB, &p).is_ok());
  ASSERT_NE(p, nullptr);
  std::memset(p, 0x42, 3 * gpu::kMiB);
  EXPECT_EQ(gpu::live_bytes(0), 3 * gpu::kMiB);
  ASSERT_TRUE(backend->deallocate(0, p, 3 * gpu::kMiB).is_ok());
  EXPECT_EQ(gpu::live_bytes(0), 0u);
  EXPECT_EQ(gpu::calls("cudaMalloc"), 1u);
  EXPECT_EQ(gpu::calls("cudaFree"), 1u);
}

TEST_F(CudaMalloc, WorksOnTheNamedDeviceAndRestoresTheCallers) {
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  void* p = nullptr;
  ASSERT_TRUE(backend->allocate(1, gpu::kMiB, &p).is_ok());
  EXPECT_EQ(gpu::live_bytes(1), gpu::kMiB);
  EXPECT_EQ(gpu::live_bytes(0), 0u);
  EXPECT_EQ(gpu::current_device(), 0);
  uint64_t free_bytes = 0, total = 0;
  ASSERT_TRUE(backend->memory_info(1, &free_bytes, &total).is_ok());
  EXPECT_EQ(total, 64 * gpu::kMiB);
  EXPECT_EQ(free_bytes, 63 * gpu::kMiB);
  EXPECT_EQ(gpu::current_device(), 0);
  ASSERT_TRUE(backend->deallocate(1, p, gpu::kMiB).is_ok());
  EXPECT_EQ(gpu::current_device(), 0);
  EXPECT_EQ(backend->device_count(), 2);
}

TEST_F(CudaMalloc, DeviceNotChangedWhenAlreadyCurrent) {
  void* p = nullptr;
  ASSERT_TRUE(backend->allocate(0, 256, &p).is_ok());
  ASSERT_TRUE(backend->deallocate(0, p, 256).is_ok());
  EXPECT_EQ(gpu::calls("cudaSetDevice"), 0u);
}

TEST_F(CudaMalloc, OutOfMemoryIsReportedAsSuchAndCleared) {
  void* p = reinterpret_cast<void*>(0x1);
  const BackendStatus status = backend->allocate(0, 65 * gpu::kMiB, &p);
  EXPECT_EQ(status.code, BackendStatus::out_of_memory);
  EXPECT_EQ(status.native, cudaErrorMemoryAllocation);
  EXPECT_STREQ(status.message, "out of memory");
  EXPECT_EQ(p, nullptr);
  EXPECT_EQ(cudaPeekAtLastError(), cudaSuccess);

  gpu::set_byte_limit(gpu::kMiB);
  EXPECT_EQ(backend->allocate(0, 2 * gpu::kMiB, &p).code, BackendStatus::out_of_memory);
  EXPECT_EQ(cudaPeekAtLastError(), cudaSuccess);
}

TEST_F(CudaMalloc, BadInputIsAnErrorNotACrash) {
  void* p = nullptr;
  EXPECT_EQ(backend->allocate(0, 0, &p).code, BackendStatus::error);
  EXPECT_EQ(backend->allocate(0, 16, nullptr).code, BackendStatus::error);
  EXPECT_EQ(backend->deallocate(0, nullptr, 16).code, BackendStatus::error);
  const BackendStatus bad_device = backend->allocate(7, 16, &p);
  EXPECT_EQ(bad_device.code, BackendStatus::error);
  EXPECT_EQ(bad_device.native, cudaErrorInvalidDevice);
  EXPECT_EQ(backend->allocate(-1, 16, &p).native, cudaErrorInvalidDevice);
  int local = 0;
  const BackendStatus foreign = backend->deallocate(0, &local, sizeof local);
  EXPECT_EQ(foreign.code, BackendStatus::error);
  EXPECT_EQ(foreign.native, cudaErrorInvalidValue);
  uint64_t free_bytes = 0;
  EXPECT_EQ(backend->memory_info(0, &free_bytes, nullptr).code, BackendStatus::error);
  EXPECT_EQ(cudaPeekAtLastError(), cudaSuccess);
  EXPECT_EQ(gpu::current_device(), 0);
}

TEST_F(CudaMalloc, NoDriverMeansNoDevicesAndClearErrors) {
  gpu::Config none = config();
  none.driver_present = false;
  gpu::reset(none);
  EXPECT_EQ(backend->device_count(), 0);
  void* p = nullptr;
  const BackendStatus status = backend->allocate(0, 16, &p);
  EXPECT_EQ(status.code, BackendStatus::error);
  EXPECT_STREQ(status.message, "CUDA driver version is insufficient for CUDA runtime version");
}

}  // namespace
}  // namespace unipool::test
