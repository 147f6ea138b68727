// KVBlockPool: free_after keeps blocks out of reuse until their fence completes.
#include <set>
#include <vector>

#include "kv/kv_test_util.hpp"

namespace unipool::test {
namespace {

TEST(KVBlockPoolDeferred, BlocksWaitForTheirFence) {
  KVBlockPool pool(small_kv_options(256, 4));
  ManualFenceSource fences;
  int64_t ids[4];
  ASSERT_EQ(pool.allocate(4, ids), Status::ok);
  const FenceId f = fences.record(0, /*stream=*/7);
  ASSERT_EQ(pool.deallocate_after(ids, 2, fences, f), Status::ok);
  EXPECT_EQ(pool.stats().deferred_blocks, 2u);
  expect_valid(pool);
  int64_t more[1];
  EXPECT_EQ(pool.allocate(1, more), Status::out_of_space);  // still in flight
  EXPECT_EQ(pool.deallocate(ids, 1), Status::not_live);     // freeing it again is a double free
  fences.complete(f);
  ASSERT_EQ(pool.allocate(2, ids), Status::ok);  // reclaimed on demand
  EXPECT_EQ(fences.outstanding(), 0u);
  EXPECT_EQ(pool.stats().deferred_blocks, 0u);
  expect_valid(pool);
}

TEST(KVBlockPoolDeferred, CollectFreesOnlyCompletedBatches) {
  KVBlockPool pool(small_kv_options(256, 8));
  ManualFenceSource fences;
  int64_t ids[6];
  ASSERT_EQ(pool.allocate(6, ids), Status::ok);
  const FenceId f1 = fences.record(0, 1), f2 = fences.record(0, 2), f3 = fences.record(0, 3);
  ASSERT_EQ(pool.deallocate_after(ids, 2, fences, f1), Status::ok);
  ASSERT_EQ(pool.deallocate_after(ids + 2, 2, fences, f2), Status::ok);
  ASSERT_EQ(pool.deallocate_after(ids + 4, 2, fences, f3), Status::ok);
  fences.complete(f2);
  EXPECT_EQ(pool.collect_deferred(), 2u);
  expect_valid(pool);
  EXPECT_EQ(pool.stats().deferred_blocks, 4u);
  EXPECT_EQ(pool.free_blocks(), 4u);
  fences.complete_all();
  EXPECT_EQ(pool.collect_deferred(), 4u);
  EXPECT_EQ(pool.free_blocks(), 8u);
  EXPECT_EQ(fences.outstanding(), 0u);
  expect_valid(pool);
}

TEST(KVBlockPoolDeferred, RefusedDeferralReleasesTheFence) {
  KVBlockPool pool(small_kv_options(256, 8));
  ManualFenceSource fences;
  const int64_t never[1] = {3};
  EXPECT_EQ(pool.deallocate_after(never, 1, fences, fences.record(0, 1)), Status::not_live);
  EXPECT_EQ(fences.outstanding(), 0u);
}

TEST(KVBlockPoolDeferred, PendingFencesGoBackWhenThePoolDies) {
  ManualFenceSource fences;
  {
    KVBlockPool pool(small_kv_options(256, 8));
    int64_t ids[2];
    ASSERT_EQ(pool.allocate(2, ids), Status::ok);
    ASSERT_EQ(pool.deallocate_after(ids, 2, fences, fences.record(0, 1)), Status::ok);
    EXPECT_EQ(fences.outstanding(), 1u);
  }
  EXPECT_EQ(fences.outstanding(), 0u);
}

}  // namespace
}  // namespace unipool::test
