// HostPool: bad input to each public member that takes some, and where its
// case is (file: test). Members without input (stats, trim, flush_thread_cache,
// reset_peak_stats, pinning_state, config, wait_for_pinning, last_error,
// default_pool_error, history, history_json, history_enabled,
// history_max_entries) have nothing to refuse.
//
//   HostPool(config), HostPool(string)  host_config_test: HostConfig.PoolConstructorRejectsBadConfig
//                                       host_os_limits_test: HostPoolOsLimits.LimitBelowAChunkIsRefused
//   default_pool, default_pool_nothrow  capi/capi_bad_input_test: unipool_host_default (bad UNIPOOL_HOST_CONF)
//   allocate(size)                      host_misuse_test: HostMisuseArguments.ZeroSizeBadAlignmentAndTooLarge,
//                                       HostMisuseArguments.ExhaustedPoolSaysSo,
//                                       host_os_limits_test: HostPoolOsLimits.SizesNoMemoryCanBackAreRefused
//   allocate(size, alignment)           host_misuse_test: HostMisuseArguments.EveryNonPowerOfTwoAlignmentIsRefused
//   allocate_zeroed                     here: HostBadInput.AllocateZeroedRefusesAsAllocateDoes
//   deallocate                          host_misuse_test: HostMisuse.DoubleFreeIsRefusedAndThePoolStaysValid,
//                                       HostMisuse.InteriorPointerIsRefused,
//                                       HostMisuseForeign.PointersThePoolNeverGaveOutAreRefused,
//                                       HostMisuseForeign.BlockOfAnotherPoolIsForeign
//   deallocate_after                    here: HostBadInput.RefusedDeferralsKeepNoFence
//   collect_deferred                    here: HostBadInput.RefusedDeferralsKeepNoFence (nothing to collect)
//   usable_size, owns, is_pinned        here: HostBadInput.QueriesOfPointersThatAreNotLiveBlocks
//   validate                            here: HostBadInput.ValidateWithoutAReason
//   record_history                      host_history_test: HostHistory.RingsWhoseBytesWrapAreRefused
#include <gtest/gtest.h>

#include <cstdint>
#include <string>

#include "host_test_util.hpp"

namespace unipool::test {
namespace {

bool error_names(const char* text) { return std::string(HostPool::last_error()).find(text) != std::string::npos; }

TEST(HostBadInput, AllocateZeroedRefusesAsAllocateDoes) {
  HostPool pool(conf("limit=64MiB"));
  HostAllocation a = pool.allocate_zeroed(0);
  EXPECT_EQ(a.ptr, nullptr);
  EXPECT_EQ(a.status, Status::zero_size);
  EXPECT_TRUE(error_names("0 bytes")) << HostPool::last_error();
  a = pool.allocate_zeroed(~size_t{0});
  EXPECT_EQ(a.ptr, nullptr);
  EXPECT_EQ(a.status, Status::too_large);
  a = pool.allocate_zeroed(128 * kMiB);  // over the limit
  EXPECT_EQ(a.ptr, nullptr);
  EXPECT_EQ(a.status, Status::out_of_space);
  EXPECT_TRUE(error_names("limit")) << HostPool::last_error();
  EXPECT_EQ(pool.stats().allocated_bytes, 0u);
  EXPECT_VALID(pool);
}

TEST(HostBadInput, QueriesOfPointersThatAreNotLiveBlocks) {
  HostPool pool(kTestConf);
  HostPool other(kTestConf);
  auto* p = static_cast<char*>(pool.allocate(4096).ptr);
  void* theirs = other.allocate(4096).ptr;
  void* freed = pool.allocate(100).ptr;
  ASSERT_TRUE(p && theirs && freed);
  ASSERT_EQ(pool.deallocate(freed), Status::ok);
  int on_stack = 0;
  for (const void* q :
       {static_cast<const void*>(nullptr), static_cast<const void*>(&on_stack), static_cast<const void*>(p + 64),
        static_cast<const void*>(theirs), static_cast<const void*>(freed)}) {
    EXPECT_EQ(pool.usable_size(q), 0u) << q;
    EXPECT_FALSE(pool.owns(q)) << q;
    EXPECT_FALSE(pool.is_pinned(q)) << q;
  }
  EXPECT_GE(pool.usable_size(p), 4096u);
  EXPECT_EQ(pool.deallocate(p), Status::ok);
  EXPECT_EQ(other.deallocate(theirs), Status::ok);
  EXPECT_VALID(pool);
  EXPECT_VALID(other);
}

// A refused deferral takes neither the block nor the fence: the source is
// never asked about the fence and never told to release it.
TEST(HostBadInput, RefusedDeferralsKeepNoFence) {
  HostPool pool(kTestConf);
  ManualFenceSource fences;
  auto* p = static_cast<char*>(pool.allocate(4096).ptr);
  void* freed = pool.allocate(100).ptr;
  ASSERT_TRUE(p && freed);
  ASSERT_EQ(pool.deallocate(freed), Status::ok);
  int on_stack = 0;
  EXPECT_EQ(pool.deallocate_after(nullptr, fences, fences.record(0, 1)), Status::bad_argument);
  EXPECT_EQ(pool.deallocate_after(&on_stack, fences, fences.record(0, 1)), Status::not_live);
  EXPECT_EQ(pool.deallocate_after(p + 64, fences, fences.record(0, 1)), Status::not_live);
  EXPECT_EQ(pool.deallocate_after(freed, fences, fences.record(0, 1)), Status::not_live);
  EXPECT_TRUE(error_names("double free")) << HostPool::last_error();
  EXPECT_EQ(pool.stats().deferred_blocks, 0u);
  fences.complete_all();
  EXPECT_EQ(pool.collect_deferred(), 0u);
  EXPECT_EQ(pool.deallocate(p), Status::ok);  // still live
  EXPECT_VALID(pool);
}

TEST(HostBadInput, ValidateWithoutAReason) {
  HostPool pool(kTestConf);
  void* p = pool.allocate(100).ptr;
  EXPECT_TRUE(pool.validate(nullptr));  // no string to fill: still checks
  EXPECT_EQ(pool.deallocate(p), Status::ok);
  EXPECT_TRUE(pool.validate());
}

}  // namespace
}  // namespace unipool::test
