// unipool device pool: sleep and wake on the real cuda_vmm backend code, run
// against the null GPU (whose copies move real bytes and whose unmapped
// memory faults): contents come back through cudaMemcpy, free memory rises
// by what sleep released, and every CUDA call of a sleep and of a wake
// fails in turn without a leak or a broken book.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "backend/cuda/cuda_backends.hpp"
#include "backend/nullgpu_fixture.hpp"
#include "device_test_support.hpp"
#include "unipool/host_pool.hpp"

namespace unipool::test {
namespace {

class SleepOnNullGpu : public NullGpuTest, public ::testing::WithParamInterface<bool> {
 protected:
  gpu::Config config() const override {
    gpu::Config c;
    c.capacity = 256 * kMiB;
    return c;
  }
  void SetUp() override {
    NullGpuTest::SetUp();
    ASSERT_EQ(cudaStreamCreate(&stream), cudaSuccess);
    DevicePoolConfig c;
    c.expandable_segments = GetParam() ? 1 : 0;
    pool = std::make_unique<DevicePool>(backend::make_cuda_backend("cuda_vmm"), 0, c);
  }
  void TearDown() override {
    pool.reset();
    EXPECT_EQ(cudaStreamDestroy(stream), cudaSuccess);
    (void)cudaGetLastError();
    NullGpuTest::TearDown();
  }

  // Weights (filled through cudaMemcpy) and a KV block, on `stream`.
  void populate() {
    DeviceTagScope w("weights");
    for (uint64_t bytes : {uint64_t{64} * kKiB, uint64_t{5} * kMiB}) {
      std::vector<unsigned char> data(bytes);
      for (uint64_t i = 0; i < bytes; ++i) data[i] = static_cast<unsigned char>(i * 13 + blocks.size());
      void* p = pool->allocate(bytes, reinterpret_cast<StreamHandle>(stream));
      ASSERT_EQ(cudaMemcpy(p, data.data(), bytes, cudaMemcpyHostToDevice), cudaSuccess);
      blocks.push_back(p);
      contents.push_back(std::move(data));
    }
    DeviceTagScope kv("kv");
    kv_block = pool->allocate(8 * kMiB, reinterpret_cast<StreamHandle>(stream));
  }
  bool intact() {
    for (size_t i = 0; i < blocks.size(); ++i) {
      std::vector<unsigned char> back(contents[i].size());
      if (cudaMemcpy(back.data(), blocks[i], back.size(), cudaMemcpyDeviceToHost) != cudaSuccess) return false;
      if (back != contents[i]) return false;
    }
    return true;
  }
  uint64_t device_free() {
    size_t free_bytes = 0, total = 0;
    EXPECT_EQ(cudaMemGetInfo(&free_bytes, &total), cudaSuccess);
    return free_bytes;
  }
  void release() {
    for (void* p : blocks) pool->deallocate(p);
    pool->deallocate(kv_block);
    blocks.clear();
    contents.clear();
  }

  cudaStream_t stream = nullptr;
  std::unique_ptr<DevicePool> pool;
  HostPool host{HostPoolConfig{}};
  std::vector<void*> blocks;
  std::vector<std::vector<unsigned char>> contents;
  void* kv_block = nullptr;
};

INSTANTIATE_TEST_SUITE_P(CudaVmm, SleepOnNullGpu, ::testing::Values(false, true),
                         [](const auto& info) { return info.param ? "expandable" : "plain"; });

const DeviceSleepRequest kRequest{{"weights"}, {"kv"}};

TEST_P(SleepOnNullGpu, FreeMemoryRisesByWhatSleepReleasedAndContentsComeBack) {
  populate();
  const uint64_t free_before = device_free();
  const DeviceSleepResult slept = pool->sleep(kRequest, &host);
  EXPECT_EQ(slept.offloaded_bytes, 64 * kKiB + 5 * kMiB);
  EXPECT_EQ(device_free(), free_before + slept.released_bytes);
  EXPECT_EQ(pool->stats().reserved_bytes[0].current, 0);
  EXPECT_FALSE(readable(blocks[1])) << "sleeping memory is unmapped";
  EXPECT_POOL_VALID(*pool);
  const DeviceSleepResult woke = pool->wake();
  EXPECT_EQ(woke.released_bytes, slept.released_bytes);
  EXPECT_EQ(device_free(), free_before);
  EXPECT_TRUE(intact());
  EXPECT_POOL_VALID(*pool);
  release();
}

TEST_P(SleepOnNullGpu, EveryCudaCallOfASleepFailsInTurn) {
  populate();
  uint64_t k = 1;
  for (;; ++k) {
    SCOPED_TRACE("failing CUDA call #" + std::to_string(k) + " of sleep");
    gpu::inject(gpu::Fault{"*", k});
    bool failed = false;
    try {
      pool->sleep(kRequest, &host);
    } catch (const DevicePoolError& e) {
      failed = true;
      SCOPED_TRACE(std::string("the failed call: ") + gpu::last_fault() + ": " + e.what());
      EXPECT_POOL_VALID(*pool);
    }
    gpu::clear_faults();
    (void)cudaGetLastError();
    try {
      pool->sleep(kRequest, &host);  // finishes a partial sleep, or sleeps again
    } catch (const DevicePoolError& e) {
      EXPECT_EQ(e.status(), Status::asleep) << e.what();  // the failure came after the last unmap
    }
    pool->wake();
    EXPECT_TRUE(intact());
    EXPECT_POOL_VALID(*pool);
    if (!failed) break;
    ASSERT_LT(k, 200u);
  }
  EXPECT_GT(k, 4u) << "the loop failed too few calls to mean anything";
  release();
}

TEST_P(SleepOnNullGpu, EveryCudaCallOfAWakeFailsInTurn) {
  populate();
  uint64_t k = 1;
  for (;; ++k) {
    SCOPED_TRACE("failing CUDA call #" + std::to_string(k) + " of wake");
    pool->sleep(kRequest, &host);
    gpu::inject(gpu::Fault{"*", k});
    bool failed = false;
    try {
      pool->wake();
    } catch (const DevicePoolError& e) {
      failed = true;
      SCOPED_TRACE(std::string("the failed call: ") + gpu::last_fault() + ": " + e.what());
      EXPECT_POOL_VALID(*pool);
      gpu::clear_faults();
      (void)cudaGetLastError();
      pool->wake();
    }
    gpu::clear_faults();
    EXPECT_TRUE(intact());
    EXPECT_POOL_VALID(*pool);
    if (!failed) break;
    ASSERT_LT(k, 200u);
  }
  EXPECT_GT(k, 4u) << "the loop failed too few calls to mean anything";
  release();
}

TEST(SleepOnCudaMalloc, IsRefusedNamingTheBackendToUse) {
  gpu::reset();
  {
    DevicePool pool(backend::make_cuda_backend("cuda_malloc"), 0, DevicePoolConfig{});
    DeviceTagScope w("weights");
    void* p = pool.allocate(kMiB);
    try {
      pool.sleep({{"weights"}, {}});
      FAIL() << "sleep on cuda_malloc succeeded";
    } catch (const DevicePoolError& e) {
      EXPECT_EQ(e.status(), Status::bad_argument);
      EXPECT_NE(std::string(e.what()).find("use backend=cuda_vmm"), std::string::npos) << e.what();
    }
    pool.deallocate(p);
  }
  gpu::reset();
}

}  // namespace
}  // namespace unipool::test
