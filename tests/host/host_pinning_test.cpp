// unipool host: pinning through a test pinner with injected failures:
// pinned=on fails clearly and never hands out unpinned memory, best_effort
// serves pageable memory and counts it, registrations stay under max_pin,
// no GPU means pageable and says so.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "host_test_util.hpp"
#include "test_pinner.hpp"

namespace unipool::test {
namespace {

TEST(HostPinning, PinnedOnPinsEveryChunkInPiecesOfAtMostMaxPin) {
  UseTestPinner use;
  {
    HostPool pool(conf("pinned=on,chunk=4MiB,max_pin=8MiB"));
    std::vector<void*> blocks;
    for (size_t size : {size_t{100}, size_t{20000}, size_t{300000}, size_t{20} << 20, size_t{9} << 20}) {
      void* p = pool.allocate(size);
      ASSERT_NE(p, nullptr) << HostPool::last_error();
      EXPECT_TRUE(pool.is_pinned(p)) << size;
      blocks.push_back(p);
    }
    const HostPoolStats st = pool.stats();
    EXPECT_EQ(st.pinned_bytes, st.committed_bytes);
    EXPECT_EQ(st.pinned_bytes, pinner_state().pinned());
    EXPECT_LE(pinner_state().largest, uint64_t{8} << 20);
    EXPECT_GT(st.pin_registrations, 3u);  // the 20 MiB block alone needs 3
    EXPECT_EQ(pinner_state().overlaps, 0u);
    EXPECT_EQ(pool.pinning_state(), PinningState::pinned);
    EXPECT_VALID(pool);
    for (void* p : blocks) EXPECT_EQ(pool.deallocate(p), Status::ok);
  }
  // Destroying the pool unregisters every registration it made, and only those.
  EXPECT_EQ(pinner_state().pinned(), 0u);
  EXPECT_EQ(pinner_state().bad_unpins, 0u);
}

TEST(HostPinning, PinnedOnFailsClearlyWhenRegistrationFails) {
  UseTestPinner use;
  HostPool pool(conf("pinned=on"));
  pinner_state().fail_from = 1;
  for (size_t size : {size_t{64}, size_t{200000}, size_t{9} << 20}) {
    const HostAllocation a = pool.allocate(size);
    EXPECT_EQ(a, nullptr) << size;
    EXPECT_EQ(a.status, Status::out_of_space);
    const std::string why = HostPool::last_error();
    EXPECT_NE(why.find("pinned=on"), std::string::npos) << why;
    EXPECT_NE(why.find("injected"), std::string::npos) << why;
  }
  HostPoolStats st = pool.stats();
  EXPECT_EQ(st.committed_bytes, 0u);  // rolled back: nothing unpinned kept
  EXPECT_GE(st.pin_failures, 3u);
  EXPECT_EQ(pinner_state().pinned(), 0u);
  EXPECT_VALID(pool);
  // Once registration works again, so does the pool.
  pinner_state().fail_from = ~uint64_t{0};
  void* p = pool.allocate(64);
  ASSERT_NE(p, nullptr);
  EXPECT_TRUE(pool.is_pinned(p));
  pool.deallocate(p);
  EXPECT_VALID(pool);
}

TEST(HostPinning, BestEffortServesPageableAndCountsIt) {
  UseTestPinner use;
  HostPool pool(conf("pinned=best_effort,chunk=4MiB"));
  pinner_state().fail_only = 1;  // the first chunk's registration fails
  void* first = pool.allocate((4 << 20) - 64);  // fills the first chunk exactly
  ASSERT_NE(first, nullptr) << HostPool::last_error();
  EXPECT_FALSE(pool.is_pinned(first));
  HostPoolStats st = pool.stats();
  EXPECT_EQ(st.pin_failures, 1u);
  EXPECT_EQ(st.pageable_bytes, uint64_t{4} << 20);
  EXPECT_EQ(pool.pinning_state(), PinningState::partially_pinned);
  // Later chunks pin fine and their blocks say so.
  void* later = pool.allocate(6 << 20);  // from new chunks only
  ASSERT_NE(later, nullptr);
  EXPECT_TRUE(pool.is_pinned(later));
  EXPECT_EQ(pool.stats().pinned_bytes, pinner_state().pinned());
  // A huge block whose registration fails is pageable and counted, then the
  // count goes when its mapping goes.
  pinner_state().fail_only = pinner_state().calls + 1;
  void* huge = pool.allocate(9 << 20);
  ASSERT_NE(huge, nullptr);
  EXPECT_FALSE(pool.is_pinned(huge));
  EXPECT_EQ(pool.stats().pin_failures, 2u);
  EXPECT_GE(pool.stats().pageable_bytes, (uint64_t{4} << 20) + (uint64_t{9} << 20));
  pool.deallocate(huge);
  pool.trim();
  EXPECT_EQ(pool.stats().pageable_bytes, uint64_t{4} << 20);
  pool.deallocate(first);
  pool.deallocate(later);
  EXPECT_VALID(pool);
}

TEST(HostPinning, WithoutAGpuBestEffortRunsPageableAndSaysSo) {
  UseTestPinner use;
  pinner_state().available = false;
  HostPool pool(conf("pinned=best_effort"));
  EXPECT_EQ(pool.pinning_state(), PinningState::pageable_no_gpu);  // before any allocation too
  void* p = pool.allocate(1000);
  ASSERT_NE(p, nullptr);
  EXPECT_FALSE(pool.is_pinned(p));
  EXPECT_EQ(pool.pinning_state(), PinningState::pageable_no_gpu);
  EXPECT_EQ(pinner_state().calls, 0u);
  EXPECT_EQ(pool.stats().pinned_bytes, 0u);
  pool.deallocate(p);
}

TEST(HostPinning, WithoutAGpuPinnedOnRefusesEverySizeAndSaysWhy) {
  // pinned=on promises pinned memory: none is handed out pageable.
  UseTestPinner use;
  pinner_state().available = false;
  HostPool pool(conf("pinned=on"));
  EXPECT_EQ(pool.pinning_state(), PinningState::pageable_no_gpu);
  for (const size_t size : {size_t{16}, size_t{1000}, size_t{100} << 10, size_t{8} << 20, size_t{64} << 20}) {
    EXPECT_EQ(pool.allocate(size), nullptr) << size;
    const std::string why = HostPool::last_error();
    EXPECT_NE(why.find("no CUDA device to pin with"), std::string::npos) << size << ": " << why;
  }
  EXPECT_EQ(pool.stats().committed_bytes, 0u);
  EXPECT_VALID(pool);
}

TEST(HostPinning, PinnedOffNeverCallsThePinner) {
  UseTestPinner use;
  HostPool pool(kTestConf);
  pool.deallocate(pool.allocate(1000));
  pool.deallocate(pool.allocate(9 << 20));
  EXPECT_EQ(pinner_state().calls, 0u);
  EXPECT_EQ(pool.pinning_state(), PinningState::pageable);
}

TEST(HostPinning, PinnedArenasAreNotDecommitted) {
  UseTestPinner use;
  HostPool pool(conf("pinned=on,retain=0"));
  void* p = pool.allocate(6 << 20);
  const uint64_t committed = pool.stats().committed_bytes;
  pool.deallocate(p);
  pool.trim();
  EXPECT_EQ(pool.stats().committed_bytes, committed);  // re-pinning costs ~0.1 s/GB
  EXPECT_EQ(pool.stats().pinned_bytes, committed);
  EXPECT_VALID(pool);
}

}  // namespace
}  // namespace unipool::test
