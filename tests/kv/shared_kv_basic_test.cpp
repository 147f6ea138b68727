// SharedKVBlockPool within one process: KVBlockPool's calls and checks,
// hand-overs between two attachments, and refused input.
#include <gtest/gtest.h>
#include <unistd.h>

#include <numeric>
#include <stdexcept>
#include <string>
#include <vector>

#include "kv/shared/shared_state.hpp"
#include "shared_kv_test_util.hpp"
#include "unipool/kv_block_pool.hpp"
#include "unipool/shared_kv_block_pool.hpp"

namespace unipool {
namespace {

using test::expect_valid;

SharedKVBlockPoolOptions small_pool(uint64_t blocks = 200) { return test::shared_options(blocks); }

TEST(SharedKVBlockPool, AllocatesLowestFirstAndFreesAsKVBlockPool) {
  auto pool = SharedKVBlockPool::create(test::unique_name("basic"), small_pool());
  std::vector<uint32_t> ids(70);
  ASSERT_EQ(pool->allocate(70, ids.data()), Status::ok);
  for (uint32_t i = 0; i < 70; ++i) EXPECT_EQ(ids[i], i);
  EXPECT_EQ(pool->owner_of(5), getpid());
  EXPECT_EQ(pool->block(3), static_cast<char*>(pool->base()) + 3 * pool->stride());
  EXPECT_EQ(pool->free_blocks(), 130u);
  expect_valid(*pool);
  ASSERT_EQ(pool->deallocate(ids.data() + 10, 20), Status::ok);
  EXPECT_EQ(pool->deallocate(ids.data() + 10, 1), Status::not_live);  // double free
  EXPECT_NE(std::string(SharedKVBlockPool::last_error()).find("block 10 is not allocated: double free"),
            std::string::npos)
      << SharedKVBlockPool::last_error();
  const int64_t repeated[] = {40, 41, 40};
  EXPECT_EQ(pool->deallocate(repeated, 3), Status::not_live);
  EXPECT_NE(std::string(SharedKVBlockPool::last_error()).find("appears twice"), std::string::npos);
  EXPECT_TRUE(pool->is_live(40));  // the refused batch freed nothing
  const int64_t out_of_range[] = {1, 200};
  EXPECT_EQ(pool->deallocate(out_of_range, 2), Status::not_live);
  int64_t out[25];
  ASSERT_EQ(pool->allocate(25, out), Status::ok);
  EXPECT_EQ(out[0], 10);  // the freed ids come back first
  expect_valid(*pool);
  const SharedKVBlockPoolStats st = pool->stats();
  EXPECT_EQ(st.live_blocks, 75u);
  EXPECT_EQ(st.owned_blocks, 75u);
  EXPECT_EQ(st.allocs, 95u);
  EXPECT_EQ(st.frees, 20u);
  EXPECT_EQ(st.misuse_errors, 3u);
  EXPECT_EQ(st.members, 1u);
}

TEST(SharedKVBlockPool, ExhaustionAndFreeAndAllocRefuseWhole) {
  auto pool = SharedKVBlockPool::create(test::unique_name("exhaust"), small_pool(100));
  std::vector<int32_t> ids(100);
  ASSERT_EQ(pool->allocate(90, ids.data()), Status::ok);
  EXPECT_EQ(pool->allocate(11, ids.data() + 90), Status::out_of_space);
  EXPECT_NE(std::string(SharedKVBlockPool::last_error()).find("exhausted: 11 blocks asked, 10 free"),
            std::string::npos);
  // 5 freed + 10 free < 20: neither half happens.
  std::vector<int32_t> out(20);
  EXPECT_EQ(pool->deallocate_and_allocate(ids.data(), 5, 20, out.data()), Status::out_of_space);
  EXPECT_TRUE(pool->is_live(0));
  // 5 freed + 10 free = 15: the freed ones come straight back, in place.
  ASSERT_EQ((pool->deallocate_and_allocate<int32_t, int32_t>(ids.data(), 5, 15, ids.data())), Status::ok);
  EXPECT_EQ(ids[0], 0);
  EXPECT_EQ(pool->free_blocks(), 0u);
  EXPECT_EQ(pool->stats().failed_allocs, 2u);
  expect_valid(*pool);
}

TEST(SharedKVBlockPool, HandOverBetweenTwoAttachmentsOfOneProcess) {
  const std::string name = test::unique_name("handover");
  auto giver = SharedKVBlockPool::create(name, small_pool());
  auto receiver = SharedKVBlockPool::attach(name);
  EXPECT_EQ(receiver->stats().members, 2u);
  uint32_t ids[8];
  ASSERT_EQ(giver->allocate(8, ids), Status::ok);
  EXPECT_EQ(giver->hand_over(ids, 8, getpid()), Status::ok);        // the other member of this pid
  EXPECT_EQ(giver->hand_over(ids, 1, getpid()), Status::not_live);  // already in transit
  EXPECT_EQ(giver->stats().transit_blocks, 8u);
  EXPECT_EQ(receiver->handed_to_me(), std::vector<uint32_t>(ids, ids + 8));
  EXPECT_TRUE(giver->handed_to_me().empty());
  EXPECT_EQ(giver->take_over(ids, 8), Status::not_live);  // not handed to the giver
  ASSERT_EQ(receiver->take_over(ids, 8), Status::ok);
  EXPECT_EQ(receiver->take_over(ids, 1), Status::not_live);  // taken already
  EXPECT_EQ(receiver->stats().owned_blocks, 8u);
  EXPECT_EQ(giver->stats().owned_blocks, 0u);
  EXPECT_EQ(giver->hand_over(ids, 1, getpid()), Status::not_live);  // no longer the giver's
  EXPECT_NE(std::string(SharedKVBlockPool::last_error()).find("is not the caller's"), std::string::npos);
  expect_valid(*receiver);
  // Detaching frees the detaching member's blocks.
  receiver.reset();
  EXPECT_EQ(giver->stats().live_blocks, 0u);
  EXPECT_EQ(giver->stats().reclaimed_blocks, 8u);
  expect_valid(*giver);
}

TEST(SharedKVBlockPool, HandOverRefusalsChangeNothing) {
  const std::string name = test::unique_name("handover_bad");
  auto a = SharedKVBlockPool::create(name, small_pool());
  auto b = SharedKVBlockPool::attach(name);
  int64_t ids[4];
  ASSERT_EQ(a->allocate(4, ids), Status::ok);
  EXPECT_EQ(a->hand_over(ids, 4, 1), Status::bad_argument);  // pid 1 is no member
  const int64_t repeated[] = {ids[0], ids[1], ids[0]};
  EXPECT_EQ(a->hand_over(repeated, 3, getpid()), Status::not_live);
  const int64_t past_end[] = {ids[0], 200};
  EXPECT_EQ(a->hand_over(past_end, 2, getpid()), Status::not_live);
  EXPECT_EQ(a->stats().transit_blocks, 0u);  // the repeated batch's first ids were put back
  EXPECT_TRUE(b->handed_to_me().empty());
  expect_valid(*a);
}

TEST(SharedKVBlockPool, HandedBlocksOfADetachedGiverAreFreed) {
  const std::string name = test::unique_name("giver_gone");
  auto creator = SharedKVBlockPool::create(name, small_pool());
  auto giver = SharedKVBlockPool::attach(name);
  uint32_t ids[3];
  ASSERT_EQ(giver->allocate(3, ids), Status::ok);
  ASSERT_EQ(giver->hand_over(ids, 3, getpid()), Status::ok);
  giver.reset();
  EXPECT_EQ(creator->take_over(ids, 3), Status::not_live);
  EXPECT_NE(std::string(SharedKVBlockPool::last_error()).find("its giver died"), std::string::npos);
  EXPECT_EQ(creator->free_blocks(), 200u);
  expect_valid(*creator);
}

TEST(SharedKVBlockPool, BadNamesOptionsAndTakenNamesAreRefused) {
  EXPECT_THROW(SharedKVBlockPool::create("a/b", small_pool()), std::invalid_argument);
  EXPECT_THROW(SharedKVBlockPool::create("", small_pool()), std::invalid_argument);
  SharedKVBlockPoolOptions zero = small_pool();
  zero.block_bytes = 0;
  EXPECT_THROW(SharedKVBlockPool::create(test::unique_name("zero"), zero), std::invalid_argument);
  SharedKVBlockPoolOptions members = small_pool();
  members.max_members = 256;
  EXPECT_THROW(SharedKVBlockPool::create(test::unique_name("members"), members), std::invalid_argument);
  const std::string name = test::unique_name("taken");
  auto pool = SharedKVBlockPool::create(name, small_pool());
  try {
    SharedKVBlockPool::create(name, small_pool());
    ADD_FAILURE() << "a second pool of the same name was created";
  } catch (const SharedKVRefused& e) {
    EXPECT_NE(std::string(e.what()).find("exists"), std::string::npos) << e.what();
  }
  try {
    SharedKVBlockPool::attach(test::unique_name("nobody"));
    ADD_FAILURE() << "attached to a pool nobody created";
  } catch (const SharedKVRefused& e) {
    EXPECT_NE(std::string(e.what()).find("no process serves it"), std::string::npos) << e.what();
  }
}

TEST(SharedKVBlockPool, MismatchedLayoutOrVersionIsRefused) {
  const std::string name = test::unique_name("mismatch");
  auto pool = SharedKVBlockPool::create(name, small_pool());
  SharedKVAttachOptions expect;
  expect.block_bytes = 8192;
  try {
    SharedKVBlockPool::attach(name, expect);
    ADD_FAILURE() << "a pool of another block size was attached";
  } catch (const SharedKVRefused& e) {
    EXPECT_NE(std::string(e.what()).find("200 blocks of 4096 bytes; the caller expects any number of blocks of 8192"),
              std::string::npos)
        << e.what();
  }
  kv_shared::Header& h = *pool->local().header;
  h.version = kv_shared::kLayoutVersion + 1;
  try {
    SharedKVBlockPool::attach(name);
    ADD_FAILURE() << "a pool of another layout version was attached";
  } catch (const SharedKVRefused& e) {
    EXPECT_NE(std::string(e.what()).find("layout version " + std::to_string(kv_shared::kLayoutVersion + 1)),
              std::string::npos)
        << e.what();
  }
  h.version = kv_shared::kLayoutVersion;
  EXPECT_NO_THROW(SharedKVBlockPool::attach(name));
}

TEST(SharedKVBlockPool, MembersBeyondTheLimitAreRefused) {
  SharedKVBlockPoolOptions o = small_pool();
  o.max_members = 2;
  const std::string name = test::unique_name("full");
  auto a = SharedKVBlockPool::create(name, o);
  auto b = SharedKVBlockPool::attach(name);
  EXPECT_THROW(SharedKVBlockPool::attach(name), SharedKVRefused);
  b.reset();
  EXPECT_NO_THROW(SharedKVBlockPool::attach(name));  // the slot is free again
}

TEST(SharedKVBlockPool, AForkedChildIsNotTheMember) {
  auto pool = SharedKVBlockPool::create(test::unique_name("fork"), small_pool());
  const pid_t child = fork();
  if (child == 0) {
    uint32_t id;
    const bool refused = pool->allocate(1, &id) == Status::bad_argument &&
                         std::string(SharedKVBlockPool::last_error()).find("forked") != std::string::npos;
    pool.release();  // the parent's member: not this process's to detach
    _exit(refused ? 0 : 1);
  }
  int status = 0;
  waitpid(child, &status, 0);
  EXPECT_EQ(test::exit_code(status), 0);
  EXPECT_EQ(pool->stats().members, 1u);
  expect_valid(*pool);
}

TEST(SharedKVBlockPool, FreeAfterKeepsBlocksUntilTheFence) {
  auto pool = SharedKVBlockPool::create(test::unique_name("fence"), small_pool(64));
  ManualFenceSource fences;
  int64_t ids[64];
  ASSERT_EQ(pool->allocate(64, ids), Status::ok);
  const FenceId fence = fences.record(0, 0);
  ASSERT_EQ(pool->deallocate_after(ids, 32, fences, fence), Status::ok);
  EXPECT_EQ(pool->stats().deferred_blocks, 32u);
  EXPECT_EQ(pool->deallocate(ids, 1), Status::not_live);  // waiting on its fence: a double free
  expect_valid(*pool);
  EXPECT_EQ(pool->allocate(1, ids), Status::out_of_space);
  fences.complete(fence);
  ASSERT_EQ(pool->allocate(1, ids), Status::ok);  // a shortage collects completed fences
  EXPECT_EQ(pool->stats().deferred_blocks, 0u);
  EXPECT_EQ(pool->deallocate_after(ids + 40, 1, fences, 0), Status::bad_argument);  // no fence
  EXPECT_EQ(fences.outstanding(), 0u);  // the collected fence went back to its source
  expect_valid(*pool);
}

}  // namespace
}  // namespace unipool

namespace unipool {
namespace {

// Code written against KVPool works the same with either pool.
void churn_through_the_interface(KVPool& pool) {
  int64_t ids[10];
  ASSERT_EQ(pool.allocate(10, ids), Status::ok);
  EXPECT_EQ(ids[9], 9);
  EXPECT_TRUE(pool.is_live(9));
  int32_t out[4];
  const int64_t evict[] = {2, 3};
  ASSERT_EQ((pool.deallocate_and_allocate<int64_t, int32_t>(evict, 2, 4, out)), Status::ok);
  EXPECT_EQ(out[0], 2);  // the evicted blocks come straight back
  EXPECT_EQ(out[3], 11);
  EXPECT_EQ(pool.deallocate(ids, 1), Status::ok);
  EXPECT_EQ(pool.deallocate(ids, 1), Status::not_live);
  EXPECT_NE(std::string(KVPool::last_error()).find("double free"), std::string::npos);
  const KVBlockPoolStats st = pool.stats();
  EXPECT_EQ(st.live_blocks, 11u);
  EXPECT_EQ(st.allocs, 14u);
  EXPECT_EQ(st.frees, 3u);
  EXPECT_EQ(pool.free_blocks(), 53u);
  EXPECT_EQ(pool.block(5), static_cast<char*>(pool.base()) + 5 * pool.stride());
  std::string why;
  EXPECT_TRUE(pool.validate(&why)) << why;
}

TEST(KVPool, OneCodePathServesBothPools) {
  KVBlockPoolOptions local;
  local.block_bytes = 4096;
  local.num_blocks = 64;
  local.pinned = HostPinned::off;
  KVBlockPool in_process(local);
  churn_through_the_interface(in_process);
  SharedKVBlockPoolOptions shared;
  shared.block_bytes = 4096;
  shared.num_blocks = 64;
  shared.pinned = HostPinned::off;
  churn_through_the_interface(*SharedKVBlockPool::create(test::unique_name("interface"), shared));
}

}  // namespace
}  // namespace unipool
