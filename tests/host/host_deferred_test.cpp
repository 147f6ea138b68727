// unipool host: free_after keeps a block out of reuse until its fence
// completes, counts it, and catches a second free of it.
#include <gtest/gtest.h>

#include <set>
#include <vector>

#include "host_test_util.hpp"

namespace unipool::test {
namespace {

class HostDeferred : public ::testing::TestWithParam<size_t> {};

TEST_P(HostDeferred, BlockIsNotReusedUntilTheFenceCompletes) {
  HostPool pool(kTestConf);
  ManualFenceSource fences;
  const size_t size = GetParam();
  void* p = pool.allocate(size);
  ASSERT_NE(p, nullptr);
  fill(p, std::min<size_t>(size, 4096), 5);
  const FenceId fence = fences.record(0, 7);
  ASSERT_EQ(pool.deallocate_after(p, fences, fence), Status::ok);
  HostPoolStats st = pool.stats();
  EXPECT_EQ(st.deferred_blocks, 1u);
  EXPECT_GE(st.deferred_bytes, size);
  EXPECT_EQ(st.allocated_bytes, 0u);
  EXPECT_EQ(st.requested_bytes, 0u);  // freed by its user: neither allocated nor requested
  EXPECT_GE(st.peak_requested_bytes, size);
  EXPECT_VALID(pool);
  // The async reader's data is untouched and the block is never handed out.
  std::vector<void*> others;
  for (int i = 0; i < 50; ++i) {
    void* q = pool.allocate(size);
    EXPECT_NE(q, p);
    others.push_back(q);
  }
  EXPECT_TRUE(intact(p, std::min<size_t>(size, 4096), 5));
  EXPECT_EQ(pool.collect_deferred(), 0u);
  // A second free (plain or deferred) of it is misuse.
  EXPECT_EQ(pool.deallocate(p), Status::not_live);
  EXPECT_EQ(pool.deallocate_after(p, fences, fences.record(0, 7)), Status::not_live);
  fences.complete_all();
  EXPECT_EQ(pool.collect_deferred(), 1u);
  st = pool.stats();
  EXPECT_EQ(st.deferred_blocks, 0u);
  EXPECT_EQ(st.deferred_bytes, 0u);
  EXPECT_GE(st.peak_deferred_bytes, size);
  EXPECT_EQ(fences.outstanding(), 1u);  // the pool released its fence; the refused one is still ours
  for (void* q : others) pool.deallocate(q);
  EXPECT_EQ(pool.stats().allocated_bytes, 0u);
  EXPECT_EQ(pool.stats().requested_bytes, 0u);
  EXPECT_VALID(pool);
}

INSTANTIATE_TEST_SUITE_P(Paths, HostDeferred,
                         ::testing::Values(size_t{48}, size_t{5000}, size_t{20000}, size_t{200000}, size_t{9} << 20));

TEST(HostDeferredMany, FencesCompleteInAnyOrder) {
  HostPool pool(kTestConf);
  ManualFenceSource fences;
  std::vector<FenceId> ids;
  std::vector<void*> blocks;
  for (int i = 0; i < 100; ++i) {
    void* p = pool.allocate(static_cast<size_t>(64 + i * 300));
    const FenceId f = fences.record(0, static_cast<StreamHandle>(i % 3));
    ASSERT_EQ(pool.deallocate_after(p, fences, f), Status::ok);
    blocks.push_back(p);
    ids.push_back(f);
  }
  fences.complete_stream(1);
  const size_t first = pool.collect_deferred();
  EXPECT_EQ(first, 33u);
  EXPECT_EQ(pool.stats().deferred_blocks, 67u);
  EXPECT_VALID(pool);
  fences.complete_all();
  EXPECT_EQ(pool.collect_deferred(), 67u);
  EXPECT_EQ(pool.stats().allocated_bytes, 0u);
  EXPECT_EQ(fences.outstanding(), 0u);
  EXPECT_VALID(pool);
}

TEST(HostDeferredMany, BadArgumentsAndForeignPointers) {
  HostPool pool(kTestConf);
  ManualFenceSource fences;
  int x = 0;
  EXPECT_EQ(pool.deallocate_after(nullptr, fences, fences.record(0, 0)), Status::bad_argument);
  EXPECT_EQ(pool.deallocate_after(&x, fences, fences.record(0, 0)), Status::not_live);
  void* p = pool.allocate(100);
  EXPECT_EQ(pool.deallocate_after(p, fences, kNoFence), Status::bad_argument);
  EXPECT_EQ(pool.deallocate_after(static_cast<char*>(p) + 16, fences, fences.record(0, 0)), Status::not_live);
  EXPECT_EQ(pool.deallocate(p), Status::ok);
  EXPECT_VALID(pool);
}

TEST(HostDeferredMany, DestroyingThePoolReleasesPendingFences) {
  ManualFenceSource fences;
  {
    HostPool pool(kTestConf);
    pool.deallocate_after(pool.allocate(100), fences, fences.record(0, 0));
    pool.deallocate_after(pool.allocate(1 << 20), fences, fences.record(0, 0));
    EXPECT_EQ(fences.outstanding(), 2u);
  }
  EXPECT_EQ(fences.outstanding(), 0u);
}

}  // namespace
}  // namespace unipool::test
