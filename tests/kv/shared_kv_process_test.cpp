// SharedKVBlockPool across processes: the same bytes at each process's
// address, hand-overs between processes, the two lifetimes, and nothing
// left behind once every process is gone.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "shared_kv_test_util.hpp"
#include "unipool/shared_kv_block_pool.hpp"

namespace unipool {
namespace {

using test::Worker;

using test::expect_valid;

SharedKVBlockPoolOptions pool_options() { return test::shared_options(256); }

TEST(SharedKVProcesses, AnotherProcessSeesTheBytesAndHandsBlocksOver) {
  const std::string name = test::unique_name("bytes");
  auto pool = SharedKVBlockPool::create(name, pool_options());
  uint32_t mine;
  ASSERT_EQ(pool->allocate(1, &mine), Status::ok);
  std::memset(pool->block(mine), 0x3c, pool->block_bytes());
  Worker reader({"check", name, std::to_string(mine), std::to_string(0x3c)});
  EXPECT_EQ(test::exit_code(reader.wait()), 0);

  Worker giver({"hand_over", name, "5", std::to_string(getpid()), std::to_string(0x77)});
  std::vector<uint32_t> ids;
  for (const std::string& l : giver.until_ready()) ids.push_back(static_cast<uint32_t>(std::stoul(l)));
  ASSERT_EQ(ids.size(), 5u);
  EXPECT_EQ(pool->owner_of(ids[0]), giver.pid());
  EXPECT_EQ(pool->handed_to_me(), ids);
  ASSERT_EQ(pool->take_over(ids.data(), ids.size()), Status::ok);
  giver.close_stdin();
  EXPECT_EQ(test::exit_code(giver.wait()), 0);
  for (uint32_t id : ids) {
    EXPECT_EQ(pool->owner_of(id), getpid());  // taken over: the giver's exit left them alone
    EXPECT_EQ(static_cast<unsigned char*>(pool->block(id))[pool->block_bytes() - 1], 0x77);
  }
  EXPECT_EQ(pool->stats().live_blocks, 6u);
  expect_valid(*pool);
}

TEST(SharedKVProcesses, AKilledMembersBlocksAreReclaimed) {
  const std::string name = test::unique_name("killed");
  auto pool = SharedKVBlockPool::create(name, pool_options());
  Worker holder({"hold", name, "40"});
  EXPECT_EQ(holder.until_ready().size(), 40u);
  EXPECT_EQ(pool->stats().live_blocks, 40u);
  Worker giver({"hand_over", name, "3", std::to_string(getpid()), "1"});
  std::vector<uint32_t> handed;
  for (const std::string& l : giver.until_ready()) handed.push_back(static_cast<uint32_t>(std::stoul(l)));
  ASSERT_EQ(handed.size(), 3u);
  holder.kill_now();
  giver.kill_now();
  EXPECT_EQ(pool->reclaim_dead(), 43u);
  EXPECT_EQ(pool->take_over(handed.data(), handed.size()), Status::not_live);  // its giver died first
  const SharedKVBlockPoolStats st = pool->stats();
  EXPECT_EQ(st.live_blocks, 0u);
  EXPECT_EQ(st.reclaimed_blocks, 43u);
  EXPECT_EQ(st.dead_members, 2u);
  EXPECT_EQ(st.members, 1u);
  expect_valid(*pool);
}

TEST(SharedKVProcesses, WhileAttachedOutlivesItsCreator) {
  const std::string name = test::unique_name("outlives");
  Worker creator({"create", name, "0"});
  const std::vector<std::string> lines = creator.until_ready();
  ASSERT_EQ(lines.size(), 1u) << (lines.empty() ? "" : lines[0]);
  const int64_t id = std::stoll(lines[0]);
  auto pool = SharedKVBlockPool::attach(name);
  creator.send(std::to_string(getpid()) + "\n");
  EXPECT_EQ(creator.line(), "handed");
  ASSERT_EQ(pool->take_over(&id, 1), Status::ok);
  creator.kill_now();
  // This process serves attaches now: another process attaches and reads.
  Worker reader({"check", name, std::to_string(id), std::to_string(0x5a)});
  EXPECT_EQ(test::exit_code(reader.wait()), 0);
  EXPECT_FALSE(pool->closed());
  uint32_t more;
  EXPECT_EQ(pool->allocate(1, &more), Status::ok);
  pool->reclaim_dead();
  expect_valid(*pool);
}

TEST(SharedKVProcesses, CreatorLifetimeClosesWithItsCreator) {
  const std::string name = test::unique_name("creator");
  Worker creator({"create", name, "1"});
  const std::vector<std::string> lines = creator.until_ready();
  ASSERT_EQ(lines.size(), 1u) << (lines.empty() ? "" : lines[0]);
  auto pool = SharedKVBlockPool::attach(name);
  EXPECT_FALSE(pool->closed());
  creator.kill_now();
  EXPECT_TRUE(pool->closed());
  uint32_t id;
  EXPECT_EQ(pool->allocate(1, &id), Status::out_of_space);
  EXPECT_NE(std::string(SharedKVBlockPool::last_error()).find("closed"), std::string::npos);
  EXPECT_THROW(SharedKVBlockPool::attach(name), std::runtime_error);  // nobody serves it
  pool->reclaim_dead();
  expect_valid(*pool);
}

// A process forked from a member (Python's multiprocessing does it) must not
// keep the member's listening socket: when the member leaves, another one
// takes the name over.
TEST(SharedKVProcesses, AForkedChildDoesNotKeepTheName) {
  const std::string name = test::unique_name("forked");
  auto pool = SharedKVBlockPool::create(name, pool_options());
  Worker member({"hold", name, "1"});
  ASSERT_EQ(member.until_ready().size(), 1u);
  const pid_t child = fork();
  if (child == 0) {
    pause();
    _exit(0);
  }
  pool.reset();  // the creator leaves: the member serves from now on
  Worker late({"check", name, "0", "0"});
  EXPECT_EQ(test::exit_code(late.wait()), 0);  // attached (block 0 is the member's, zeroed)
  kill(child, SIGKILL);
  waitpid(child, nullptr, 0);
}

// However the members end, no file and no memory is left: the memfd goes
// with the last process that maps it, and /dev/shm is never used.
TEST(SharedKVProcesses, NothingIsLeftOnceEveryMemberIsGone) {
  const std::string name = test::unique_name("leftovers");
  const std::vector<std::string> shm_before = test::dev_shm();
  {
    auto pool = SharedKVBlockPool::create(name, pool_options());
    Worker a({"hold", name, "10"}), b({"hold", name, "10"});
    a.until_ready();
    b.until_ready();
    EXPECT_EQ(test::processes_holding("unipool.kv." + name), 3);
    a.kill_now();
    b.close_stdin();
    EXPECT_EQ(test::exit_code(b.wait()), 0);
  }
  EXPECT_EQ(test::processes_holding("unipool.kv." + name), 0);
  EXPECT_EQ(test::dev_shm(), shm_before);
  EXPECT_THROW(SharedKVBlockPool::attach(name), std::runtime_error);
}

}  // namespace
}  // namespace unipool
