// unipool host: pinning through the real CUDA pinner (cudaHostRegister) on
// the fake CUDA runtime, with injected registration failures: pinned=on
// fails clearly, best_effort serves pageable and counts it, the pending CUDA
// error is cleared, registrations stay under max_pin, no driver = pageable.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "fake_cuda/fake_cuda.hpp"
#include "unipool/host_pool.hpp"

namespace unipool {
namespace {

constexpr const char* kConf = "reserve=1GiB,huge_threshold=8MiB,chunk=4MiB,max_pin=8MiB";

std::string conf(const char* extra) { return std::string(kConf) + "," + extra; }

class HostFakeCuda : public ::testing::Test {
 protected:
  void SetUp() override { fake_cuda::reset(); }
  void TearDown() override { EXPECT_TRUE(fake_cuda::leaks().clean()) << fake_cuda::leaks().describe(); }
};

TEST_F(HostFakeCuda, PinnedOnRegistersChunksUnderMaxPin) {
  {
    HostPool pool(conf("pinned=on"));
    std::vector<void*> blocks;
    for (size_t size : {size_t{64}, size_t{20000}, size_t{20} << 20, size_t{9} << 20}) {
      void* p = pool.allocate(size);
      ASSERT_NE(p, nullptr) << HostPool::last_error();
      EXPECT_TRUE(pool.is_pinned(p));
      blocks.push_back(p);
    }
    EXPECT_EQ(pool.pinning_state(), HostPinningState::pinned);
    const HostPoolStats st = pool.stats();
    EXPECT_EQ(st.pinned_bytes, fake_cuda::pinned_bytes());
    for (const fake_cuda::HostRange& r : fake_cuda::registered_ranges()) EXPECT_LE(r.bytes, uint64_t{8} << 20);
    for (void* p : blocks) EXPECT_EQ(pool.free(p), Status::ok);
    std::string why;
    EXPECT_TRUE(pool.validate(&why)) << why;
  }
  EXPECT_EQ(fake_cuda::pinned_bytes(), 0u);  // every registration undone with the pool
}

TEST_F(HostFakeCuda, PinnedOnFailsClearlyAndClearsThePendingError) {
  HostPool pool(conf("pinned=on"));
  fake_cuda::fail_nth_call("cudaHostRegister", 1);
  EXPECT_EQ(pool.allocate(1000), nullptr);
  EXPECT_EQ(HostPool::last_status(), Status::out_of_space);
  EXPECT_NE(std::string(HostPool::last_error()).find("pinned=on"), std::string::npos) << HostPool::last_error();
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);  // not left for an unrelated later call
  EXPECT_EQ(pool.stats().committed_bytes, 0u);
  EXPECT_EQ(pool.stats().pin_failures, 1u);
  void* p = pool.allocate(1000);  // the next registration works
  ASSERT_NE(p, nullptr);
  EXPECT_TRUE(pool.is_pinned(p));
  pool.free(p);
}

TEST_F(HostFakeCuda, BestEffortServesPageableAndCountsIt) {
  HostPool pool(conf("pinned=best_effort"));
  fake_cuda::fail_nth_call("cudaHostRegister", 1);
  void* p = pool.allocate(1000);
  ASSERT_NE(p, nullptr) << HostPool::last_error();
  EXPECT_FALSE(pool.is_pinned(p));
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  const HostPoolStats st = pool.stats();
  EXPECT_EQ(st.pin_failures, 1u);
  EXPECT_EQ(st.pageable_bytes, uint64_t{4} << 20);
  EXPECT_EQ(pool.pinning_state(), HostPinningState::partially_pinned);
  pool.free(p);
}

TEST_F(HostFakeCuda, RegistrationBeyondThePinnedLimitFails) {
  fake_cuda::Config config;
  config.pinned_limit = uint64_t{16} << 20;
  fake_cuda::reset(config);
  HostPool pool(conf("pinned=on"));
  void* a = pool.allocate(10 << 20);
  ASSERT_NE(a, nullptr) << HostPool::last_error();
  EXPECT_EQ(pool.allocate(10 << 20), nullptr);  // would pass the limit
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  EXPECT_LE(fake_cuda::pinned_bytes(), uint64_t{16} << 20);
  pool.free(a);
}

TEST_F(HostFakeCuda, NoDriverMeansPageableAndSaysSo) {
  fake_cuda::Config config;
  config.driver_present = false;
  fake_cuda::reset(config);
  HostPool pool(conf("pinned=on"));
  void* p = pool.allocate(1000);
  ASSERT_NE(p, nullptr);
  EXPECT_FALSE(pool.is_pinned(p));
  EXPECT_EQ(pool.pinning_state(), HostPinningState::pageable_no_gpu);
  EXPECT_EQ(fake_cuda::calls("cudaHostRegister"), 0u);
  pool.free(p);
}

}  // namespace
}  // namespace unipool
