// CUB's CachingDeviceAllocator runs on the null GPU, so the
// benchmarks and tests can use it as a peer on machines without a GPU.
#include <cub/util_allocator.cuh>

#include "nullgpu_fixture.hpp"

namespace unipool::test {
namespace {

using CubOnNullGpu = NullGpuTest;

TEST_F(CubOnNullGpu, CachesAndReusesBlocksBehindEvents) {
  cudaStream_t stream = nullptr;
  ASSERT_EQ(cudaStreamCreate(&stream), cudaSuccess);
  {
    cub::CachingDeviceAllocator cub_allocator;
    void* a = nullptr;
    ASSERT_EQ(cub_allocator.DeviceAllocate(&a, 1000, stream), cudaSuccess);
    EXPECT_EQ(gpu::calls("cudaMalloc"), 1u);
    ASSERT_EQ(cub_allocator.DeviceFree(a), cudaSuccess);  // cached, with an event recorded on the stream
    void* b = nullptr;
    ASSERT_EQ(cub_allocator.DeviceAllocate(&b, 1000, stream), cudaSuccess);
    EXPECT_EQ(b, a);  // same stream: reused at once
    EXPECT_EQ(gpu::calls("cudaMalloc"), 1u);
    ASSERT_EQ(cub_allocator.DeviceFree(b), cudaSuccess);

    // Another stream waits for the event: the block is busy until then.
    void* c = nullptr;
    ASSERT_EQ(cub_allocator.DeviceAllocate(&c, 1000, nullptr), cudaSuccess);
    EXPECT_NE(c, a);
    EXPECT_EQ(gpu::calls("cudaMalloc"), 2u);
    ASSERT_EQ(cub_allocator.DeviceFree(c), cudaSuccess);
    gpu::complete_all_events();
    void* d = nullptr;
    ASSERT_EQ(cub_allocator.DeviceAllocate(&d, 1000, nullptr), cudaSuccess);
    EXPECT_EQ(gpu::calls("cudaMalloc"), 2u);
    ASSERT_EQ(cub_allocator.DeviceFree(d), cudaSuccess);
    ASSERT_EQ(cub_allocator.FreeAllCached(), cudaSuccess);
    EXPECT_EQ(gpu::live_bytes(0), 0u);
  }
  (void)cudaGetLastError();  // CUB leaves the "not ready" of its event queries pending
  EXPECT_EQ(cudaStreamDestroy(stream), cudaSuccess);
}

}  // namespace
}  // namespace unipool::test
