// KVBlockPool: exhaustion, double free, bad and repeated ids. A refused call
// changes nothing.
#include <string>
#include <vector>

#include "kv/kv_test_util.hpp"

namespace unipool::test {
namespace {

TEST(KVBlockPoolMisuse, ExhaustionTakesNothingAndSaysWhy) {
  KVBlockPool pool(small_kv_options(256, 10));
  int64_t ids[11];
  ASSERT_EQ(pool.allocate(6, ids), Status::ok);
  EXPECT_EQ(pool.allocate(5, ids + 6), Status::out_of_space);
  EXPECT_NE(std::string(KVBlockPool::last_error()).find("5 blocks asked, 4 free"), std::string::npos)
      << KVBlockPool::last_error();
  EXPECT_EQ(pool.free_blocks(), 4u);
  EXPECT_EQ(pool.stats().failed_allocs, 1u);
  EXPECT_EQ(pool.allocate(4, ids + 6), Status::ok);
  expect_valid(pool);
}

TEST(KVBlockPoolMisuse, DoubleFreeIsRefused) {
  KVBlockPool pool(small_kv_options(256, 10));
  int64_t ids[3];
  ASSERT_EQ(pool.allocate(3, ids), Status::ok);
  ASSERT_EQ(pool.deallocate(ids, 1), Status::ok);
  EXPECT_EQ(pool.deallocate(ids, 3), Status::not_live);  // ids[0] is already free
  EXPECT_NE(std::string(KVBlockPool::last_error()).find("double free"), std::string::npos);
  EXPECT_TRUE(pool.is_live(ids[1]));  // nothing of the batch was freed
  EXPECT_TRUE(pool.is_live(ids[2]));
  EXPECT_EQ(pool.stats().misuse_errors, 1u);
  expect_valid(pool);
  EXPECT_EQ(pool.deallocate(ids + 1, 2), Status::ok);
  expect_valid(pool);
}

TEST(KVBlockPoolMisuse, RepeatedIdInOneBatchIsRefused) {
  KVBlockPool pool(small_kv_options(256, 10));
  int64_t ids[2];
  ASSERT_EQ(pool.allocate(2, ids), Status::ok);
  const int64_t batch[3] = {ids[0], ids[1], ids[0]};
  EXPECT_EQ(pool.deallocate(batch, 3), Status::not_live);
  EXPECT_NE(std::string(KVBlockPool::last_error()).find("twice"), std::string::npos);
  EXPECT_TRUE(pool.is_live(ids[0]));
  EXPECT_TRUE(pool.is_live(ids[1]));
  expect_valid(pool);
}

TEST(KVBlockPoolMisuse, OutOfRangeIdsAreRefused) {
  KVBlockPool pool(small_kv_options(256, 10));
  int64_t ids[1];
  ASSERT_EQ(pool.allocate(1, ids), Status::ok);
  for (int64_t bad : {int64_t{-1}, int64_t{10}, int64_t{1} << 40}) {
    const int64_t batch[2] = {ids[0], bad};
    EXPECT_EQ(pool.deallocate(batch, 2), Status::not_live) << bad;
    EXPECT_NE(std::string(KVBlockPool::last_error()).find("out of range"), std::string::npos);
    EXPECT_TRUE(pool.is_live(ids[0]));
  }
  const uint32_t never[1] = {5};
  EXPECT_EQ(pool.deallocate(never, 1), Status::not_live);  // never handed out
  expect_valid(pool);
}

}  // namespace
}  // namespace unipool::test
