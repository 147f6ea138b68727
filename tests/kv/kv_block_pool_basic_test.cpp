// KVBlockPool: geometry, handing out every block once, reuse, contents.
#include <algorithm>
#include <cstring>
#include <set>
#include <vector>

#include "kv/kv_test_util.hpp"

namespace unipool::test {
namespace {

TEST(KVBlockPool, GeometryFollowsTheOptions) {
  KVBlockPoolOptions o = small_kv_options(1000, 10);
  KVBlockPool pool(o);
  EXPECT_EQ(pool.block_bytes(), 1000u);
  EXPECT_EQ(pool.stride(), 1024u);  // rounded to the 256-byte alignment
  EXPECT_EQ(pool.num_blocks(), 10u);
  EXPECT_EQ(pool.arena_bytes(), 10240u);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(pool.base()) % 4096, 0u);
  EXPECT_EQ(static_cast<char*>(pool.block(3)) - static_cast<char*>(pool.base()), 3 * 1024);
  EXPECT_FALSE(pool.pinned());
  EXPECT_EQ(pool.pinning_state(), PinningState::pageable);
  const KVBlockPoolStats st = pool.stats();
  EXPECT_EQ(st.requested_bytes, 10000u);
  EXPECT_EQ(st.reserved_bytes, 12288u);  // page-rounded
  expect_valid(pool);
}

TEST(KVBlockPool, ExactStrideForKvShapedBlocks) {
  // Llama-3-8B: 32 layers x 2 x 8 heads x 128 dim x 16 tokens x 2 bytes = 2 MiB.
  KVBlockPool pool(small_kv_options(32 * 2 * 8 * 128 * 16 * 2, 4));
  EXPECT_EQ(pool.stride(), pool.block_bytes());
  EXPECT_EQ(pool.stats().reserved_bytes, pool.stats().requested_bytes);
}

TEST(KVBlockPool, HandsOutEveryBlockExactlyOnce) {
  KVBlockPool pool(small_kv_options(256, 100));
  std::vector<int64_t> ids(100);
  ASSERT_EQ(pool.allocate(37, ids.data()), Status::ok);
  ASSERT_EQ(pool.allocate(63, ids.data() + 37), Status::ok);
  std::set<int64_t> unique(ids.begin(), ids.end());
  EXPECT_EQ(unique.size(), 100u);
  EXPECT_EQ(*unique.begin(), 0);
  EXPECT_EQ(*unique.rbegin(), 99);
  EXPECT_EQ(pool.free_blocks(), 0u);
  for (int64_t id : ids) EXPECT_TRUE(pool.is_live(id));
  expect_valid(pool);
  ASSERT_EQ(pool.deallocate(ids.data(), ids.size()), Status::ok);
  EXPECT_EQ(pool.free_blocks(), 100u);
  EXPECT_EQ(pool.stats().live_blocks, 0u);
  EXPECT_EQ(pool.stats().peak_live_blocks, 100u);
  expect_valid(pool);
}

TEST(KVBlockPool, FreedBlocksAreReusedLowestFirst) {
  KVBlockPool pool(small_kv_options(256, 8));
  uint32_t a[6];
  ASSERT_EQ(pool.allocate(6, a), Status::ok);
  EXPECT_EQ(a[0], 0u);  // a fresh pool hands out ascending ids
  EXPECT_EQ(a[5], 5u);
  const uint32_t back[3] = {4, 1, 2};
  ASSERT_EQ(pool.deallocate(back, 3), Status::ok);
  uint32_t b[4];
  ASSERT_EQ(pool.allocate(4, b), Status::ok);  // the lowest free first, whatever the order they came back in
  EXPECT_EQ(std::vector<uint32_t>(b, b + 4), (std::vector<uint32_t>{1, 2, 4, 6}));
  expect_valid(pool);
}

TEST(KVBlockPool, ContentsOfEveryBlockAreItsOwn) {
  KVBlockPool pool(small_kv_options(512, 16));
  std::vector<int32_t> ids(16);
  ASSERT_EQ(pool.allocate(16, ids.data()), Status::ok);
  for (int32_t id : ids) std::memset(pool.block(id), id + 1, pool.block_bytes());
  for (int32_t id : ids) {
    const auto* p = static_cast<const unsigned char*>(pool.block(id));
    EXPECT_EQ(std::count(p, p + 512, static_cast<unsigned char>(id + 1)), 512) << "block " << id;
  }
}

TEST(KVBlockPool, ZeroSizedBatchesAreNoOps) {
  KVBlockPool pool(small_kv_options());
  EXPECT_EQ(pool.allocate(0, static_cast<int64_t*>(nullptr)), Status::ok);
  EXPECT_EQ(pool.deallocate(static_cast<const int64_t*>(nullptr), 0), Status::ok);
  EXPECT_EQ(pool.stats().allocs, 0u);
  expect_valid(pool);
}

TEST(KVBlockPool, BadOptionsAreRefusedWithTheReason) {
  EXPECT_THROW(KVBlockPool(small_kv_options(0, 4)), std::invalid_argument);
  EXPECT_THROW(KVBlockPool(small_kv_options(256, 0)), std::invalid_argument);
  EXPECT_THROW(KVBlockPool(small_kv_options(256, (uint64_t{1} << 31) + 1)), std::invalid_argument);
  KVBlockPoolOptions o = small_kv_options();
  o.alignment = 3;
  EXPECT_THROW(KVBlockPool{o}, std::invalid_argument);
  o = small_kv_options(uint64_t{1} << 40, uint64_t{1} << 30);
  EXPECT_THROW(KVBlockPool{o}, std::invalid_argument);
}

TEST(KVBlockPool, PinnedBestEffortRunsPageableWithoutADevice) {
  KVBlockPoolOptions o = small_kv_options();
  o.pinned = HostPinned::best_effort;
  KVBlockPool pool(o);
  // No GPU in CI: pageable, and it says so. With a GPU: pinned.
  if (!pool.pinned()) {
    EXPECT_NE(pool.pinning_state(), PinningState::pinned);
    o.pinned = HostPinned::on;
    EXPECT_THROW(KVBlockPool{o}, std::runtime_error);
  } else {
    EXPECT_EQ(pool.stats().pinned_bytes, pool.stats().reserved_bytes);
  }
}

}  // namespace
}  // namespace unipool::test
