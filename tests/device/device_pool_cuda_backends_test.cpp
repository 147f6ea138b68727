// The device pool on the real CUDA backend code (cuda_malloc, cuda_vmm with
// and without expandable segments, nccl) run against the null GPU:
// stream ordering with CUDA events, OOM retry and text, a failure injected at
// every CUDA call in turn, expandable growth and release, segment hooks,
// checkpoint and restore, stats against the snapshot, threads.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include "backend/cuda/cuda_backends.hpp"
#include "backend/nullgpu_fixture.hpp"
#include "device_test_support.hpp"
#include "support/rng.hpp"
#include "support/test_scale.hpp"
#include "unipool/c/device.h"

namespace unipool::test {
namespace {

struct Variant {
  const char* backend;
  bool expandable;
};
void PrintTo(const Variant& v, std::ostream* os) { *os << v.backend << (v.expandable ? " expandable" : ""); }

class DevicePoolOnNullGpu : public NullGpuTest, public ::testing::WithParamInterface<Variant> {
 protected:
  gpu::Config config() const override {
    gpu::Config c;
    c.device_count = 2;
    c.capacity = 96 * kMiB;
    return c;
  }
  void SetUp() override {
    NullGpuTest::SetUp();
    ASSERT_EQ(cudaStreamCreate(&s1), cudaSuccess);
    ASSERT_EQ(cudaStreamCreate(&s2), cudaSuccess);
    pool = make_pool(0);
  }
  void TearDown() override {
    pool.reset();
    EXPECT_EQ(cudaStreamDestroy(s1), cudaSuccess);
    EXPECT_EQ(cudaStreamDestroy(s2), cudaSuccess);
    (void)cudaGetLastError();
    NullGpuTest::TearDown();
  }
  std::unique_ptr<DevicePool> make_pool(int device) {
    std::shared_ptr<DeviceBackend> backend = backend::make_cuda_backend(GetParam().backend);
    DevicePoolConfig c;
    c.expandable_segments = GetParam().expandable ? 1 : 0;
    return std::make_unique<DevicePool>(backend, device, c);
  }
  StreamHandle h1() const { return reinterpret_cast<StreamHandle>(s1); }
  StreamHandle h2() const { return reinterpret_cast<StreamHandle>(s2); }

  cudaStream_t s1 = nullptr, s2 = nullptr;
  std::unique_ptr<DevicePool> pool;
};

TEST_P(DevicePoolOnNullGpu, StreamOrderedReuse) {
  void* p = pool->allocate(4 * kMiB, h1());
  pool->deallocate(p);
  void* q = pool->allocate(4 * kMiB, h1());
  EXPECT_EQ(q, p);  // same stream: at once
  pool->record_stream(q, h2());
  pool->deallocate(q);  // a CUDA event on s2
  void* r = pool->allocate(4 * kMiB, h1());
  EXPECT_NE(r, p);
  gpu::complete_stream(h2());
  pool->deallocate(r);
  void* again = pool->allocate(4 * kMiB, h1());
  EXPECT_EQ(again, p);
  pool->deallocate(again);
  EXPECT_POOL_VALID(*pool);
  expect_stats_match_snapshot(*pool);
}

// Checkpoint and restore on the real backends: a freed block used on another
// stream is in the way of the checkpoint's block, so restore synchronizes
// its CUDA event first; memory given back since makes restore fail.
TEST_P(DevicePoolOnNullGpu, CheckpointRestoreWaitsForEventsAndRefusesReleasedMemory) {
  void* p = pool->allocate(6 * kMiB, h1());
  const DeviceCheckpoint cp = pool->checkpoint();
  pool->record_stream(p, h2());
  pool->deallocate(p);  // a pending CUDA event on s2
  ASSERT_EQ(gpu::pending_events(), 1u);
  const DeviceRestoreResult r = pool->restore(cp);
  ASSERT_EQ(r.allocated.size(), 1u);
  EXPECT_EQ(r.allocated[0], p);
  EXPECT_EQ(gpu::pending_events(), 0u);  // cudaEventSynchronize'd, not skipped
  EXPECT_EQ(pool->requested_size(p), 6 * kMiB);
  EXPECT_POOL_VALID(*pool);
  expect_stats_match_snapshot(*pool);
  pool->deallocate(p);
  pool->empty_cache();
  EXPECT_THROW(pool->restore(cp), DevicePoolError);
  EXPECT_EQ(pool->stats().allocation[0].current, 0);
  EXPECT_POOL_VALID(*pool);
}

TEST_P(DevicePoolOnNullGpu, OomRetryAndErrorText) {
  void* a = pool->allocate(40 * kMiB, h1());
  void* b = pool->allocate(40 * kMiB, h1());
  try {
    pool->allocate(40 * kMiB, h1());
    FAIL() << "expected OutOfMemoryError";
  } catch (const OutOfMemoryError& e) {
    const std::string text = e.what();
    EXPECT_NE(text.find("Tried to allocate 40.00 MiB"), std::string::npos) << text;
    EXPECT_NE(text.find("80.00 MiB is allocated"), std::string::npos) << text;
    EXPECT_NE(text.find("total capacity of 96.00 MiB"), std::string::npos) << text;
  }
  EXPECT_EQ(pool->stats().num_ooms, 1);
  pool->deallocate(a);
  void* c = pool->allocate(50 * kMiB, h2());  // releases s1's cached 40 MiB, retries
  EXPECT_GE(pool->stats().num_alloc_retries, 2);
  for (void* p : {b, c}) pool->deallocate(p);
  EXPECT_POOL_VALID(*pool);
}

TEST_P(DevicePoolOnNullGpu, EmptyCacheGivesEverythingBack) {
  std::vector<void*> blocks;
  for (const uint64_t size : {uint64_t{512}, uint64_t{70000}, 3 * kMiB, 25 * kMiB}) {
    blocks.push_back(pool->allocate(size, h1()));
    blocks.push_back(pool->allocate(size, h2()));
  }
  pool->record_stream(blocks[0], h2());
  for (void* p : blocks) pool->deallocate(p);
  EXPECT_GT(gpu::live_bytes(0), 0u);
  pool->empty_cache();  // synchronizes the events it needs
  EXPECT_EQ(gpu::live_bytes(0), 0u);
  EXPECT_EQ(gpu::mapped_bytes(0), 0u);
  EXPECT_EQ(pool->stats().reserved_bytes[0].current, 0);
  EXPECT_POOL_VALID(*pool);
}

TEST_P(DevicePoolOnNullGpu, HooksOncePerMapAndUnmap) {
  int64_t bytes = 0;
  int maps = 0, unmaps = 0;
  pool->set_segment_hooks({[&](const DeviceSegmentEvent& e) {
                             ++maps;
                             bytes += static_cast<int64_t>(e.bytes);
                           },
                           [&](const DeviceSegmentEvent& e) {
                             ++unmaps;
                             bytes -= static_cast<int64_t>(e.bytes);
                           }});
  std::vector<void*> blocks;
  for (int i = 1; i <= 12; ++i) blocks.push_back(pool->allocate(static_cast<uint64_t>(i) * 700 * 1024, h1()));
  EXPECT_EQ(bytes, pool->stats().reserved_bytes[0].current);
  for (void* p : blocks) pool->deallocate(p);
  pool->empty_cache();
  EXPECT_EQ(bytes, 0);
  EXPECT_EQ(maps, pool->stats().num_device_alloc);
  EXPECT_EQ(unmaps, pool->stats().num_device_free);
}

// The scenario every injected failure runs through.
void scenario(DevicePool& pool, StreamHandle a, StreamHandle b) {
  std::vector<void*> live;
  auto alloc = [&](uint64_t bytes, StreamHandle s) {
    try {
      live.push_back(pool.allocate(bytes, s));
    } catch (const OutOfMemoryError&) {
    } catch (const DevicePoolError& e) {  // the injected driver error, during growth
      EXPECT_EQ(e.status(), Status::backend_error) << e.what();
    }
  };
  alloc(3000, a);
  alloc(5 * kMiB, a);
  alloc(30 * kMiB, b);
  alloc(600 * 1024, b);
  if (live.size() > 2) pool.record_stream(live[2], a);
  while (live.size() > 1) {
    pool.deallocate(live.back());
    live.pop_back();
  }
  pool.empty_cache();
  alloc(50 * kMiB, b);
  alloc(40 * kMiB, a);  // the OOM path
  gpu::complete_all_events();
  for (void* p : live) pool.deallocate(p);
  pool.empty_cache();
}

// The call that gets memory from the driver, per backend.
const char* memory_call(const char* backend) {
  const std::string b = backend;
  return b == "cuda_malloc" ? "cudaMalloc" : b == "nccl" ? "ncclMemAlloc" : "cuMemCreate";
}

// A driver error other than out-of-memory is Status::backend_error at once
// (no release, no retry, not an OOM); an out-of-memory code (2 in all three
// libraries: cudaErrorMemoryAllocation, CUDA_ERROR_OUT_OF_MEMORY,
// ncclSystemError) takes the OOM path and its retry.
TEST_P(DevicePoolOnNullGpu, DriverErrorIsABackendErrorNotAnOom) {
  const char* call = memory_call(GetParam().backend);
  SCOPED_TRACE(call);
  gpu::fail_nth_call(call, 1);  // cudaErrorUnknown / CUDA_ERROR_UNKNOWN / ncclUnhandledCudaError
  try {
    pool->allocate(30 * kMiB, h1());
    FAIL() << "expected DevicePoolError(backend_error)";
  } catch (const OutOfMemoryError& e) {
    FAIL() << "a driver error reported as OOM: " << e.what();
  } catch (const DevicePoolError& e) {
    EXPECT_EQ(e.status(), Status::backend_error);
    const std::string text = e.what();
    EXPECT_NE(text.find(std::string("the ") + GetParam().backend + " backend failed while allocating 30.00 MiB"),
              std::string::npos) << text;
  }
  EXPECT_EQ(gpu::last_fault(), call);
  EXPECT_EQ(pool->stats().num_ooms, 0);
  EXPECT_EQ(pool->stats().num_alloc_retries, 0);
  EXPECT_EQ(gpu::live_bytes(0), 0u);
  (void)cudaGetLastError();

  gpu::fail_nth_call(call, 1, 2);  // out of memory: released, retried, served
  void* p = pool->allocate(30 * kMiB, h1());
  EXPECT_EQ(pool->stats().num_alloc_retries, 1);
  EXPECT_EQ(pool->stats().num_ooms, 0);
  pool->deallocate(p);
  (void)cudaGetLastError();
  EXPECT_POOL_VALID(*pool);
  expect_stats_match_snapshot(*pool);
}

// The C ABI passes it on as UNIPOOL_BACKEND_ERROR.
TEST(DeviceCApiOnNullGpu, BackendErrorStatus) {
  gpu::reset();
  unipool_device_pools_t* pools = nullptr;
  ASSERT_EQ(unipool_device_pools_create("backend=cuda_malloc", &pools), UNIPOOL_OK) << unipool_last_error();
  gpu::fail_nth_call("cudaMalloc", 1);
  unipool_status_t status = UNIPOOL_OK;
  void* p = reinterpret_cast<void*>(0x1);
  status = unipool_device_alloc(pools, 4 * kMiB, 0, nullptr, &p);
  EXPECT_EQ(status, UNIPOOL_BACKEND_ERROR);
  EXPECT_EQ(p, nullptr);
  EXPECT_STREQ(unipool_status_string(status), "the memory backend failed (see the message)");
  EXPECT_NE(std::string(unipool_last_error()).find("cuda_malloc backend failed"), std::string::npos)
      << unipool_last_error();
  (void)cudaGetLastError();
  EXPECT_EQ(unipool_device_alloc(pools, 4 * kMiB, 0, nullptr, &p), UNIPOOL_OK);
  EXPECT_NE(p, nullptr);
  EXPECT_EQ(unipool_device_free(pools, p), UNIPOOL_OK);
  unipool_device_pools_destroy(pools);
  gpu::reset();
}

TEST_P(DevicePoolOnNullGpu, EveryCudaCallFailsInTurn) {
  const uint64_t before = gpu::total_calls();
  scenario(*pool, h1(), h2());
  const uint64_t calls = gpu::total_calls() - before;
  ASSERT_GT(calls, 5u);
  for (uint64_t k = 1; k <= calls; ++k) {
    SCOPED_TRACE("failing CUDA call #" + std::to_string(k));
    pool.reset();
    pool = make_pool(0);
    gpu::inject(gpu::Fault{"*", k});
    scenario(*pool, h1(), h2());
    const std::string failed = gpu::last_fault();
    SCOPED_TRACE("the failed call: " + failed);
    gpu::clear_faults();
    (void)cudaGetLastError();
    EXPECT_POOL_VALID(*pool);
    expect_stats_match_snapshot(*pool);
    gpu::complete_all_events();
    pool->empty_cache();
    EXPECT_EQ(pool->stats().reserved_bytes[0].current, 0);
    void* p = pool->allocate(80 * kMiB, h1());  // still usable to the device's size
    pool->deallocate(p);
    pool->empty_cache();
    // (cuda_vmm retries a handle whose cuMemRelease failed at its next call.)
    EXPECT_EQ(gpu::live_bytes(0), 0u);
  }
}

TEST_P(DevicePoolOnNullGpu, RandomOperationsKeepExactBooks) {
  Rng rng(42);
  std::vector<void*> live;
  const StreamHandle streams[] = {h1(), h2()};
  const uint64_t steps = scaled(1500, 200);
  for (uint64_t step = 0; step < steps; ++step) {
    const uint64_t op = rng.below(100);
    if (op < 55 || live.empty()) {
      const uint64_t size = rng.chance(0.6) ? rng.log_uniform(1, kMiB) : rng.log_uniform(kMiB, 24 * kMiB);
      try {
        live.push_back(pool->allocate(size, streams[rng.below(2)]));
      } catch (const OutOfMemoryError&) {
      }
    } else if (op < 92) {
      const uint64_t i = rng.below(live.size());
      pool->deallocate(live[i]);
      live[i] = live.back();
      live.pop_back();
    } else if (op < 96) {
      pool->record_stream(live[rng.below(live.size())], streams[rng.below(2)]);
    } else if (op < 99) {
      gpu::complete_stream(streams[rng.below(2)]);
    } else {
      pool->empty_cache();
    }
    ASSERT_VALID(*pool);
    if (step % 50 == 0) expect_stats_match_snapshot(*pool);
  }
  for (void* p : live) pool->deallocate(p);
  pool->empty_cache();
  EXPECT_EQ(gpu::live_bytes(0), 0u);
}

TEST_P(DevicePoolOnNullGpu, ThreadsOnTwoDevices) {
  std::unique_ptr<DevicePool> second = make_pool(1);
  const uint64_t ops = scaled(3000, 200);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      DevicePool& p = t % 2 ? *second : *pool;
      Rng rng(9 + static_cast<uint64_t>(t));
      const StreamHandle s = t < 2 ? h1() : h2();
      std::vector<void*> live;
      for (uint64_t i = 0; i < ops; ++i) {
        if (live.size() < 8 && (live.empty() || rng.chance(0.5))) {
          try {
            live.push_back(p.allocate(rng.log_uniform(1, 4 * kMiB), s));
          } catch (const OutOfMemoryError&) {
          }
        } else {
          const uint64_t k = rng.below(live.size());
          p.deallocate(live[k]);
          live[k] = live.back();
          live.pop_back();
        }
      }
      for (void* q : live) p.deallocate(q);
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_POOL_VALID(*pool);
  EXPECT_POOL_VALID(*second);
  second.reset();
}

INSTANTIATE_TEST_SUITE_P(Backends, DevicePoolOnNullGpu,
                         ::testing::Values(Variant{"cuda_malloc", false}, Variant{"cuda_vmm", true},
                                           Variant{"cuda_vmm", false}, Variant{"nccl", false}),
                         [](const auto& info) {
                           return std::string(info.param.backend) + (info.param.expandable ? "_expandable" : "");
                         });

}  // namespace
}  // namespace unipool::test
