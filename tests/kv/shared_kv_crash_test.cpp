// SharedKVBlockPool when members die at the worst moments: holding the
// lock, halfway through a batch, halfway through reclaiming another dead
// member; and 1,000 SIGKILLs at random points of random calls, each
// followed by exact books.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "kv/shared/shared_state.hpp"
#include "shared_kv_test_util.hpp"
#include "unipool/shared_kv_block_pool.hpp"

namespace unipool {
namespace {

using kv_shared::HookPoint;
using test::Worker;

using test::expect_valid;

SharedKVBlockPoolOptions pool_options(uint64_t blocks) { return test::shared_options(blocks, 1024); }

// A member stops itself (SIGSTOP) at `at` inside an allocation of 64, is
// killed there, and the next call of this process repairs the books: a call
// killed before its journal entry was whole did nothing; one killed while
// applying it is finished (and its blocks reclaimed with their dead owner).
void die_inside(HookPoint at, uint64_t finished) {
  const std::string name = test::unique_name("inside");
  auto pool = SharedKVBlockPool::create(name, pool_options(512));
  uint32_t mine[4];
  ASSERT_EQ(pool->allocate(4, mine), Status::ok);
  Worker w({"stop_at", name, std::to_string(static_cast<int>(at)), "64"});
  ASSERT_EQ(w.until_ready().size(), 0u);
  ASSERT_TRUE(w.wait_stopped());
  w.kill_now();
  // The lock was held by the dead member: taking it repairs, then reclaims
  // the member's 8 blocks (and the 64 if its call was finished).
  uint32_t more[16];
  ASSERT_EQ(pool->allocate(16, more), Status::ok);
  const SharedKVBlockPoolStats st = pool->stats();
  EXPECT_EQ(st.recoveries, 1u);
  EXPECT_EQ(st.live_blocks, 20u);
  EXPECT_EQ(st.reclaimed_blocks, 8u + finished);
  EXPECT_EQ(st.allocs, 4u + 8u + finished + 16u);
  EXPECT_EQ(more[0], 4u);  // the dead member's blocks are free again
  expect_valid(*pool);
}

TEST(SharedKVCrash, DeathHoldingTheLock) { die_inside(HookPoint::locked, 0); }
TEST(SharedKVCrash, DeathHalfwayThroughABatch) { die_inside(HookPoint::mid_batch, 64); }

// The member reclaiming a dead member dies halfway; the next locker
// finishes the reclaim from the journal, counting each block once.
TEST(SharedKVCrash, DeathHalfwayThroughAReclaim) {
  const std::string name = test::unique_name("reclaim");
  auto pool = SharedKVBlockPool::create(name, pool_options(512));
  Worker victim({"hold", name, "300"});
  ASSERT_EQ(victim.until_ready().size(), 300u);
  victim.kill_now();
  Worker reclaimer({"stop_at", name, std::to_string(static_cast<int>(HookPoint::reclaiming)), "0"});
  ASSERT_EQ(reclaimer.until_ready().size(), 0u);
  ASSERT_TRUE(reclaimer.wait_stopped());
  reclaimer.kill_now();
  pool->reclaim_dead();
  const SharedKVBlockPoolStats st = pool->stats();
  EXPECT_EQ(st.live_blocks, 0u);
  EXPECT_EQ(st.reclaimed_blocks, 308u);  // the victim's 300 and the reclaimer's own 8
  EXPECT_EQ(st.dead_members, 2u);
  EXPECT_EQ(st.members, 1u);
  EXPECT_EQ(pool->free_blocks(), 512u);
  expect_valid(*pool);
}

// Six members make random calls (allocate, free, free_and_alloc, hand over,
// take over); 1,000 times one of them is killed at a random moment, and
// some kill themselves inside calls (holding the lock, halfway through a
// batch). After every death the survivors' books are exact.
TEST(SharedKVCrash, AThousandRandomKills) {
  constexpr int kWorkers = 6, kKills = 1000;
  const std::string name = test::unique_name("stress");
  const std::vector<std::string> shm_before = test::dev_shm();
  auto pool = SharedKVBlockPool::create(name, pool_options(2048));
  std::minstd_rand rng(12345);
  auto spawn = [&](int i) {
    // Every third worker may also die by its own hand inside its calls.
    const HookPoint at = i % 3 == 0 ? HookPoint::locked : HookPoint::mid_batch;
    auto w = std::make_unique<Worker>(std::vector<std::string>{
        "stress", name, std::to_string(rng()), std::to_string(static_cast<int>(at)), i % 3 == 2 ? "0" : "2"});
    w->until_ready();
    return w;
  };
  std::vector<std::unique_ptr<Worker>> workers;
  for (int i = 0; i < kWorkers; ++i) workers.push_back(spawn(i));
  int kills = 0, self_kills = 0;
  while (kills + self_kills < kKills) {
    usleep(static_cast<useconds_t>(rng() % 3000));
    const int i = static_cast<int>(rng() % kWorkers);
    const pid_t dead = workers[i]->pid();
    if (workers[i]->ended()) {
      ++self_kills;
    } else {
      workers[i]->kill_now();
      ++kills;
    }
    pool->reclaim_dead();
    std::string why;
    ASSERT_TRUE(pool->validate(&why)) << "after death " << kills + self_kills << ": " << why;
    const std::vector<pid_t> members = pool->member_pids();
    ASSERT_EQ(std::count(members.begin(), members.end(), dead), 0) << "a dead member is still attached";
    workers[i] = spawn(i);
  }
  workers.clear();  // killed
  pool->reclaim_dead();
  const SharedKVBlockPoolStats st = pool->stats();
  EXPECT_EQ(st.live_blocks + st.deferred_blocks, 0u);
  EXPECT_EQ(pool->free_blocks(), 2048u);
  EXPECT_EQ(st.allocs, st.frees + st.reclaimed_blocks);
  EXPECT_GT(st.reclaimed_blocks, 0u);
  std::printf("kills %d, deaths inside calls %d, recoveries %llu, blocks reclaimed %llu\n", kills, self_kills,
              static_cast<unsigned long long>(st.recoveries), static_cast<unsigned long long>(st.reclaimed_blocks));
  expect_valid(*pool);
  pool.reset();
  EXPECT_EQ(test::processes_holding("unipool.kv." + name), 0);
  EXPECT_EQ(test::dev_shm(), shm_before);
}

}  // namespace
}  // namespace unipool
