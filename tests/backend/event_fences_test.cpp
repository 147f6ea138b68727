// CudaEventFenceSource: pooled CUDA events as fences.
#include <atomic>
#include <stdexcept>
#include <thread>
#include <vector>

#include "backend/cuda/cuda_event_fences.hpp"
#include "nullgpu_fixture.hpp"
#include "support/test_scale.hpp"

namespace unipool::test {
namespace {

using backend::cuda::CudaEventFenceSource;

class EventFences : public NullGpuTest {
 protected:
  gpu::Config config() const override {
    gpu::Config c;
    c.device_count = 2;
    return c;
  }
  void SetUp() override {
    NullGpuTest::SetUp();
    fences = std::make_unique<CudaEventFenceSource>();
    ASSERT_EQ(cudaStreamCreate(&stream), cudaSuccess);
  }
  void TearDown() override {
    fences.reset();
    EXPECT_EQ(cudaStreamDestroy(stream), cudaSuccess);
    NullGpuTest::TearDown();
  }
  StreamHandle handle() const { return reinterpret_cast<StreamHandle>(stream); }

  std::unique_ptr<CudaEventFenceSource> fences;
  cudaStream_t stream = nullptr;
};

TEST_F(EventFences, NotCompletedUntilTheStreamGetsThere) {
  const FenceId fence = fences->record(0, handle());
  ASSERT_NE(fence, kNoFence);
  EXPECT_FALSE(fences->completed(fence));
  EXPECT_EQ(cudaPeekAtLastError(), cudaSuccess);  // "not ready" does not linger
  gpu::complete_stream(0);                        // another stream
  EXPECT_FALSE(fences->completed(fence));
  gpu::complete_stream(handle());
  EXPECT_TRUE(fences->completed(fence));
  EXPECT_TRUE(fences->completed(fence));
  fences->release(fence);
  EXPECT_EQ(fences->outstanding(), 0u);
}

TEST_F(EventFences, EventsAreCheapAndPooled) {
  const uint64_t rounds = scaled(200, 10);
  for (uint64_t i = 0; i < rounds; ++i) {
    const FenceId a = fences->record(0, handle());
    const FenceId b = fences->record(0, 0);
    ASSERT_NE(a, kNoFence);
    ASSERT_NE(b, kNoFence);
    gpu::complete_all_events();
    EXPECT_TRUE(fences->completed(a));
    fences->release(a);
    fences->release(b);
  }
  // Two in flight at most: two events, ever.
  EXPECT_EQ(gpu::calls("cudaEventCreateWithFlags"), 2u);
  EXPECT_EQ(fences->events_created(), 2u);
  EXPECT_EQ(fences->pooled(), 2u);
  EXPECT_EQ(gpu::live_events_with_timing(), 0u);  // all cudaEventDisableTiming
  EXPECT_EQ(gpu::calls("cudaEventRecord"), 2 * rounds);
}

TEST_F(EventFences, WaitSynchronizesTheEvent) {
  const FenceId fence = fences->record(0, handle());
  fences->wait(fence);
  EXPECT_EQ(gpu::calls("cudaEventSynchronize"), 1u);
  EXPECT_TRUE(fences->completed(fence));
  fences->release(fence);
}

TEST_F(EventFences, EventsFollowTheirDeviceAndTheCallersDeviceIsKept) {
  ASSERT_EQ(cudaSetDevice(1), cudaSuccess);
  cudaStream_t on_device_1 = nullptr;
  ASSERT_EQ(cudaStreamCreate(&on_device_1), cudaSuccess);
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);

  const FenceId f1 = fences->record(1, reinterpret_cast<StreamHandle>(on_device_1));
  const FenceId f0 = fences->record(0, handle());
  ASSERT_NE(f1, kNoFence);
  ASSERT_NE(f0, kNoFence);
  EXPECT_EQ(gpu::current_device(), 0);
  fences->release(f1);
  fences->release(f0);
  // Pooled per device: recording on device 1 again reuses device 1's event.
  const FenceId again = fences->record(1, reinterpret_cast<StreamHandle>(on_device_1));
  ASSERT_NE(again, kNoFence);
  EXPECT_EQ(fences->events_created(), 2u);
  fences->release(again);
  fences.reset();
  EXPECT_EQ(cudaStreamDestroy(on_device_1), cudaSuccess);
  fences = std::make_unique<CudaEventFenceSource>();
}

TEST_F(EventFences, RecordingFailuresGiveNoFenceAndClearTheError) {
  // A stream of device 0 named for device 1: CUDA refuses the record.
  EXPECT_EQ(fences->record(1, handle()), kNoFence);
  EXPECT_EQ(fences->last_error().native, cudaErrorInvalidResourceHandle);
  EXPECT_EQ(cudaPeekAtLastError(), cudaSuccess);
  EXPECT_EQ(fences->record(5, handle()), kNoFence);  // no such device
  EXPECT_EQ(fences->last_error().native, cudaErrorInvalidDevice);
  gpu::fail_nth_call("cudaEventCreateWithFlags", 1);
  EXPECT_EQ(fences->record(0, handle()), kNoFence);
  EXPECT_EQ(cudaPeekAtLastError(), cudaSuccess);
  EXPECT_EQ(fences->outstanding(), 0u);
  EXPECT_EQ(gpu::current_device(), 0);
}

TEST_F(EventFences, QueryErrorsKeepTheFencePendingAndAreCleared) {
  const FenceId fence = fences->record(0, handle());
  gpu::complete_all_events();
  gpu::fail_nth_call("cudaEventQuery", 1, cudaErrorLaunchFailure);
  EXPECT_FALSE(fences->completed(fence));
  EXPECT_EQ(fences->last_error().native, cudaErrorLaunchFailure);
  EXPECT_EQ(cudaPeekAtLastError(), cudaSuccess);
  EXPECT_TRUE(fences->completed(fence));
  fences->release(fence);
}

TEST_F(EventFences, FailedWaitThrows) {
  const FenceId fence = fences->record(0, handle());
  gpu::fail_nth_call("cudaEventSynchronize", 1, cudaErrorLaunchFailure);
  EXPECT_THROW(fences->wait(fence), std::runtime_error);
  EXPECT_EQ(cudaPeekAtLastError(), cudaSuccess);
  EXPECT_FALSE(fences->completed(fence));
  fences->release(fence);
}

TEST_F(EventFences, StaleAndForeignIdsAreRejected) {
  const FenceId fence = fences->record(0, handle());
  fences->release(fence);
  EXPECT_THROW(fences->completed(fence), std::invalid_argument);
  EXPECT_THROW(fences->release(fence), std::invalid_argument);
  EXPECT_THROW(fences->completed(kNoFence), std::invalid_argument);
  const FenceId reused = fences->record(0, handle());  // same slot, new generation
  EXPECT_NE(reused, fence);
  EXPECT_THROW(fences->completed(fence), std::invalid_argument);
  fences->release(reused);
}

TEST_F(EventFences, DestructionFreesOutstandingEvents) {
  (void)fences->record(0, handle());
  (void)fences->record(0, handle());
  EXPECT_EQ(gpu::live_events(), 2u);
  fences.reset();
  EXPECT_EQ(gpu::live_events(), 0u);
  fences = std::make_unique<CudaEventFenceSource>();
}

TEST_F(EventFences, ThreadsShareOneSource) {
  const uint64_t rounds = scaled(500, 20);
  std::atomic<uint64_t> completed{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (uint64_t i = 0; i < rounds; ++i) {
        const FenceId fence = fences->record(t % 2, 0);
        ASSERT_NE(fence, kNoFence);
        if (i % 2 == 0) gpu::complete_stream(0);
        if (fences->completed(fence)) completed.fetch_add(1);
        fences->release(fence);
      }
      EXPECT_EQ(cudaPeekAtLastError(), cudaSuccess);
    });
  }
  for (auto& thread : threads) thread.join();
  EXPECT_GE(completed.load(), 2 * rounds);  // at least the even rounds
  EXPECT_EQ(fences->outstanding(), 0u);
  EXPECT_LE(fences->events_created(), 4u);  // at most one in flight per thread
}

}  // namespace
}  // namespace unipool::test
