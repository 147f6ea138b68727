// KVBlockPool::free_and_alloc: one call that frees a batch and allocates one
// (an offload manager evicting to make room). Refused calls change nothing.
#include <algorithm>
#include <set>
#include <string>
#include <vector>

#include "kv/kv_test_util.hpp"

namespace unipool::test {
namespace {

TEST(KVBlockPoolFreeAndAlloc, FreedBlocksComeStraightBack) {
  KVBlockPool pool(small_kv_options(256, 8));
  int64_t ids[8];
  ASSERT_EQ(pool.allocate(8, ids), Status::ok);  // full
  const int64_t evict[3] = {6, 2, 4};
  int64_t got[3];
  ASSERT_EQ(pool.deallocate_and_allocate(evict, 3, 3, got), Status::ok);
  EXPECT_EQ(std::vector<int64_t>(got, got + 3), (std::vector<int64_t>{2, 4, 6}));  // lowest first
  const KVBlockPoolStats st = pool.stats();
  EXPECT_EQ(st.live_blocks, 8u);
  EXPECT_EQ(st.allocs, 11u);
  EXPECT_EQ(st.frees, 3u);
  expect_valid(pool);
}

TEST(KVBlockPoolFreeAndAlloc, OutMayBeTheIdsBeingFreed) {
  KVBlockPool pool(small_kv_options(256, 100));
  std::vector<int32_t> ids(40);
  ASSERT_EQ(pool.allocate(40, ids.data()), Status::ok);            // 0..39
  ASSERT_EQ(pool.deallocate(ids.data() + 10, 10), Status::ok);     // 10..19 free
  std::vector<int32_t> batch(ids.begin() + 20, ids.begin() + 30);  // 20..29
  ASSERT_EQ(pool.deallocate_and_allocate(batch.data(), 10, 10, batch.data()), Status::ok);
  for (int i = 0; i < 10; ++i) EXPECT_EQ(batch[i], 10 + i);  // the lowest free: 10..19
  for (int id = 20; id < 30; ++id) EXPECT_FALSE(pool.is_live(id));
  // More or fewer than freed, and mixed id types.
  std::vector<int64_t> more(15);
  ASSERT_EQ(pool.deallocate_and_allocate(batch.data(), 10, 15, more.data()), Status::ok);
  for (int i = 0; i < 15; ++i) EXPECT_EQ(more[i], 10 + i);
  ASSERT_EQ(pool.deallocate_and_allocate(more.data(), 15, 0, static_cast<uint32_t*>(nullptr)), Status::ok);
  EXPECT_EQ(pool.stats().live_blocks, 20u);  // 0..9 and 30..39
  expect_valid(pool);
}

TEST(KVBlockPoolFreeAndAlloc, ABadFreeIdRefusesBothHalves) {
  KVBlockPool pool(small_kv_options(256, 10));
  int64_t ids[4];
  ASSERT_EQ(pool.allocate(4, ids), Status::ok);
  const int64_t batch[2] = {ids[0], 7};  // 7 was never handed out
  int64_t out[2] = {-5, -5};
  EXPECT_EQ(pool.deallocate_and_allocate(batch, 2, 2, out), Status::not_live);
  EXPECT_NE(std::string(KVBlockPool::last_error()).find("free_and_alloc: block 7 is not allocated: double free"),
            std::string::npos)
      << KVBlockPool::last_error();
  EXPECT_TRUE(pool.is_live(ids[0]));
  EXPECT_EQ(out[0], -5);  // nothing written
  EXPECT_EQ(pool.stats().allocs, 4u);
  EXPECT_EQ(pool.stats().misuse_errors, 1u);
  expect_valid(pool);
}

TEST(KVBlockPoolFreeAndAlloc, TooFewBlocksEvenWithTheFreedOnesFreesNothing) {
  KVBlockPool pool(small_kv_options(256, 10));
  int64_t ids[8];
  ASSERT_EQ(pool.allocate(8, ids), Status::ok);  // 2 free
  int64_t out[6];
  EXPECT_EQ(pool.deallocate_and_allocate(ids, 3, 6, out), Status::out_of_space);  // 2 + 3 < 6
  const std::string error = KVBlockPool::last_error();
  EXPECT_NE(error.find("6 blocks asked, 5 free (with the ones being freed)"), std::string::npos) << error;
  EXPECT_NE(error.find("nothing was freed"), std::string::npos) << error;
  for (int64_t id : ids) EXPECT_TRUE(pool.is_live(id));
  EXPECT_EQ(pool.free_blocks(), 2u);
  EXPECT_EQ(pool.stats().failed_allocs, 1u);
  EXPECT_EQ(pool.stats().frees, 0u);
  expect_valid(pool);
  ASSERT_EQ(pool.deallocate_and_allocate(ids, 3, 5, out), Status::ok);  // exactly enough
  EXPECT_EQ(pool.free_blocks(), 0u);
  expect_valid(pool);
}

TEST(KVBlockPoolFreeAndAlloc, ReclaimsCompletedDeferralsWhenShort) {
  ManualFenceSource fences;
  KVBlockPool pool(small_kv_options(256, 6));
  int64_t ids[6];
  ASSERT_EQ(pool.allocate(6, ids), Status::ok);
  const FenceId f = fences.record(0, 1);
  ASSERT_EQ(pool.deallocate_after(ids + 4, 2, fences, f), Status::ok);
  int64_t out[3];
  EXPECT_EQ(pool.deallocate_and_allocate(ids, 1, 3, out), Status::out_of_space);  // fence pending
  EXPECT_TRUE(pool.is_live(ids[0]));
  fences.complete(f);
  ASSERT_EQ(pool.deallocate_and_allocate(ids, 1, 3, out), Status::ok);
  EXPECT_EQ(std::set<int64_t>(out, out + 3), (std::set<int64_t>{0, 4, 5}));
  EXPECT_EQ(fences.outstanding(), 0u);
  expect_valid(pool);
}

}  // namespace
}  // namespace unipool::test
